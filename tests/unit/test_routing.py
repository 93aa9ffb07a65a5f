"""Routing: partition key resolution and a hash that must never change between releases."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ray_broker as rb
from ray_broker.errors import InvalidOperationError
from ray_broker.routing import (
    home_partition,
    make_sequence_number,
    partition_for_key,
    partition_of,
    resolve_partition_key,
)


@pytest.mark.parametrize(("key", "count", "expected"), [
    ("order-1", 16, 13), ("order-1", 64, 45), ("order-1", 4, 1),
    ("session-a", 16, 11), ("session-a", 64, 43),
    ("", 16, 9), ("ünïcode", 16, 6), ("x" * 128, 16, 12),
])
def test_partition_for_key_is_pinned(key: str, count: int, expected: int) -> None:
    assert partition_for_key(key, count) == expected


@pytest.mark.parametrize(("name", "count", "expected"), [
    ("orders", 16, 13), ("Orders", 16, 13), ("orders", 4, 1), ("q1", 16, 10), ("events/v1", 16, 6),
])
def test_home_partition_is_pinned_and_case_insensitive(name: str, count: int, expected: int) -> None:
    assert home_partition(name, count) == expected


def test_one_partition_is_home_to_everything() -> None:
    assert {home_partition(n, 1) for n in ("a", "b", "orders", "x/y")} == {0}


@given(st.text(max_size=128), st.integers(1, 64))
def test_a_key_always_maps_to_a_partition_in_range(key: str, count: int) -> None:
    assert 0 <= partition_for_key(key, count) < count


def test_keys_spread_over_partitions() -> None:
    hits = {partition_for_key(f"key-{i}", 16) for i in range(500)}
    assert hits == set(range(16))


def test_session_id_comes_first() -> None:
    msg = {"session_id": "s", "partition_key": "s", "message_id": "m"}
    assert resolve_partition_key(msg, duplicate_detection=True) == "s"


def test_partition_key_comes_next() -> None:
    msg = {"partition_key": "p", "message_id": "m"}
    assert resolve_partition_key(msg, duplicate_detection=True) == "p"


def test_message_id_is_a_key_only_with_duplicate_detection() -> None:
    msg = {"message_id": "m"}
    assert resolve_partition_key(msg, duplicate_detection=True) == "m"
    assert resolve_partition_key(msg, duplicate_detection=False) is None
    assert resolve_partition_key({}, duplicate_detection=True) is None


def test_a_partition_key_different_from_the_session_id_is_refused() -> None:
    with pytest.raises(InvalidOperationError):
        resolve_partition_key({"session_id": "s", "partition_key": "p"}, duplicate_detection=False)


def test_envelopes_resolve_like_messages() -> None:
    envelope = rb.Message("x", message_id="m", partition_key="p").to_envelope()
    assert resolve_partition_key(envelope, duplicate_detection=True) == "p"


@given(st.integers(0, (1 << 16) - 1), st.integers(0, (1 << 48) - 1))
def test_sequence_numbers_split_into_partition_and_counter(partition: int, counter: int) -> None:
    seq = make_sequence_number(partition, counter)
    assert partition_of(seq) == rb.partition_of(seq) == partition
    assert seq & ((1 << 48) - 1) == counter
