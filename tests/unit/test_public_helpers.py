"""The public helpers bulk writers and partition-aware readers use (the Spark bridge among them):
`rb.encode_messages`, `rb.partition_key_of`, `rb.partition_for_key`, `rb.sequence_number`, a
`rb.MessageBatch` made from another's size, and `rb.init_ray`; no Ray is started."""
from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

import ray_broker as rb
from ray_broker import codec
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessageSizeExceededError
from ray_broker.protocol import partition_for_key as routing_hash
from ray_broker.routing import resolve_partition_key


def payloads(envelopes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [codec.unpackb(e["payload"]) for e in envelopes]


# ---------------------------------------------------------------------- encode_messages

def test_encoded_messages_are_the_envelopes_of_the_same_messages_byte_for_byte() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    envelopes = rb.encode_messages(
        [b"a", "\u00e9t\u00e9", bytearray(b"c"), b""],
        message_ids=["m1", None, "m3", "m4"], session_ids=[None, "s2", None, "s4"],
        partition_keys=["p1", "s2", None, None], content_type="application/json",
        application_properties=[{"n": 1, "when": when, "id": uuid.UUID(int=5)}, None, {}, {"flag": True}])
    assert envelopes == [
        rb.Message(b"a", message_id="m1", partition_key="p1", content_type="application/json",
                   application_properties={"n": 1, "when": when, "id": uuid.UUID(int=5)}).to_envelope(),
        rb.Message("\u00e9t\u00e9", session_id="s2", partition_key="s2", content_type="application/json").to_envelope(),
        rb.Message(b"c", message_id="m3", content_type="application/json").to_envelope(),
        rb.Message(b"", message_id="m4", session_id="s4", content_type="application/json",
                   application_properties={"flag": True}).to_envelope()]


def test_fields_left_out_are_unset() -> None:
    envelopes = rb.encode_messages([b"x", b"y"])
    assert payloads(envelopes) == [{"body": b"x"}, {"body": b"y"}]
    assert all(set(e) == {"payload", "size"} and e["size"] == len(e["payload"]) for e in envelopes)
    assert rb.encode_messages([]) == []


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"partition_keys": ["k", "k" * 129]}, "row 1 does not make a valid message: partition_key is 129 characters long"),
    ({"message_ids": ["m", ""]}, "row 1 .* message_id must not be empty"),
    ({"session_ids": ["s", 7]}, "row 1 .* session_id must be a str or None, not int"),
    ({"session_ids": ["a", "b"], "partition_keys": ["a", "c"]}, "row 1 .* partition_key 'c' differs from session_id 'b'"),
    ({"application_properties": [None, {"big": 1 << 63}]}, "row 1 .* does not fit in a signed 64-bit integer"),
    ({"application_properties": [{"k": [1]}, None]}, r"row 0 .* application_properties\['k'\] has type list"),
    ({"application_properties": [{1: "v"}, None]}, "row 0 .* keys must be str"),
    ({"message_ids": ["m"]}, "message_ids has 1 values for 2 bodies"),
    ({"application_properties": [None]}, "application_properties has 1 values for 2 bodies"),
    ({"partition_keys": ["ok", "\udc80"]}, "row 1 .* cannot be encoded"),
    ({"content_type": 5}, "content_type must be a str or None"),
])
def test_a_row_that_makes_no_valid_message_is_an_argument_error_naming_it(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidArgumentError, match=error):
        rb.encode_messages([b"x", b"y"], **kwargs)


def test_a_body_must_be_bytes_or_text() -> None:
    with pytest.raises(InvalidArgumentError, match="row 1 .* body must be bytes or str, not int"):
        rb.encode_messages([b"x", 5])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="row 0 .* body is not valid Unicode text"):
        rb.encode_messages(["\udc80"])


# ---------------------------------------------------------------------- batches of envelopes

def test_envelopes_fill_batches_made_from_another_batchs_size() -> None:
    envelopes = rb.encode_messages([b"x" * 100] * 5)
    first = rb.MessageBatch(2 * envelopes[0]["size"])
    batch = rb.MessageBatch(first.max_size_in_bytes)
    batch.add_envelope(envelopes[0])
    batch.add_envelope(envelopes[1])
    with pytest.raises(MessageSizeExceededError):
        batch.add_envelope(envelopes[2])
    assert len(batch) == 2 and batch.size_in_bytes == 2 * envelopes[0]["size"]


# ---------------------------------------------------------------------- partitions

def test_the_partition_key_is_the_session_then_the_partition_key_then_the_id_with_duplicate_detection() -> None:
    assert rb.partition_key_of(rb.Message(b"x", session_id="s", partition_key="s", message_id="m")) == "s"
    assert rb.partition_key_of(rb.Message(b"x", partition_key="p", message_id="m")) == "p"
    assert rb.partition_key_of(rb.Message(b"x", message_id="m")) is None
    assert rb.partition_key_of(rb.Message(b"x", message_id="m"), duplicate_detection=True) == "m"
    assert rb.partition_key_of(rb.Message(b"x"), duplicate_detection=True) is None


def test_an_envelope_and_a_received_message_have_the_key_of_their_message() -> None:
    messages = [rb.Message(b"x", session_id="s"), rb.Message(b"x", partition_key="p", message_id="m"),
                rb.Message(b"x", message_id="m"), rb.Message(b"x")]
    for message in messages:
        for dedup in (False, True):
            key = rb.partition_key_of(message, duplicate_detection=dedup)
            assert rb.partition_key_of(message.to_envelope(), duplicate_detection=dedup) == key
            assert key == resolve_partition_key(message.to_envelope(), duplicate_detection=dedup)
            received = rb.ReceivedMessage({**message.to_wire(), "sequence_number": 1}, peeked=True)
            assert rb.partition_key_of(received, duplicate_detection=dedup) == key


def test_a_partition_key_other_than_the_session_id_is_refused() -> None:
    with pytest.raises(InvalidOperationError, match="differs from session_id"):
        rb.partition_key_of({"session_id": "s", "partition_key": "p"})


def test_a_key_goes_where_the_broker_routes_it_and_always_there() -> None:
    keys = [f"customer-{i}" for i in range(500)]
    assert [rb.partition_for_key(k, 16) for k in keys] == [routing_hash(k, 16) for k in keys]
    assert {rb.partition_for_key(k, 16) for k in keys} == set(range(16))
    assert rb.partition_for_key("customer-1", 1) == 0


@pytest.mark.parametrize(("key", "count"), [(b"bytes", 16), ("k", 0), ("k", True), ("k", 2.0)])
def test_partition_for_key_checks_its_arguments(key: Any, count: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        rb.partition_for_key(key, count)


def test_sequence_numbers_carry_their_partition() -> None:
    assert rb.sequence_number(0) == 0
    assert rb.sequence_number(3) == 3 << 48 and rb.sequence_number(3, 7) == (3 << 48) | 7
    assert rb.partition_of(rb.sequence_number(5, (1 << 48) - 1)) == 5
    assert rb.sequence_number(5, (1 << 48) - 1) + 1 == rb.sequence_number(6)
    assert rb.sequence_number(65535, (1 << 48) - 1) == (1 << 64) - 1


@pytest.mark.parametrize(("partition", "counter"), [(-1, 0), (1 << 16, 0), (0, -1), (0, 1 << 48), (True, 0),
                                                    ("1", 0), (0, 1.0)])
def test_sequence_number_refuses_what_no_sequence_number_holds(partition: Any, counter: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        rb.sequence_number(partition, counter)


# ---------------------------------------------------------------------- init_ray

class RayInits:
    """`ray.init` as the client calls it, recorded."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def init(self, **options: Any) -> None:
        self.calls.append(options)


@pytest.fixture
def inits(monkeypatch: pytest.MonkeyPatch) -> RayInits:
    from ray_broker.client import lifecycle

    recorded = RayInits()
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(lifecycle.ray, "init", recorded.init)
    return recorded


def test_init_ray_starts_a_local_ray_with_the_librarys_settings_and_the_callers(inits: RayInits) -> None:
    from ray_broker.client.lifecycle import LOCAL_RAY_SYSTEM_CONFIG

    rb.init_ray("local", num_cpus=6, system_config={"num_workers_soft_limit": 16})
    [options] = inits.calls
    assert options["address"] == "local" and options["namespace"] == "ray_broker" and options["num_cpus"] == 6
    assert options["_system_config"] == {**LOCAL_RAY_SYSTEM_CONFIG, "num_workers_soft_limit": 16}
    rb.init_ray("local")
    assert "num_cpus" not in inits.calls[1] and inits.calls[1]["_system_config"] == LOCAL_RAY_SYSTEM_CONFIG


def test_init_ray_joins_a_cluster_without_the_local_settings(inits: RayInits, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_broker.client import lifecycle

    monkeypatch.setattr(lifecycle, "local_head_address", lambda: None)
    monkeypatch.setattr(lifecycle, "check_ray_head", lambda probe: None)
    rb.init_ray("10.0.0.7:6379", num_cpus=6, system_config={"num_workers_soft_limit": 16})
    [options] = inits.calls
    assert options["address"] == "10.0.0.7:6379" and options["namespace"] == "ray_broker"
    assert "num_cpus" not in options and "_system_config" not in options


def test_init_ray_does_nothing_once_ray_is_up(inits: RayInits, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_broker.client import lifecycle

    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: True)
    rb.init_ray(num_cpus=6)
    assert inits.calls == []


def test_the_async_init_ray_starts_the_same_local_ray(inits: RayInits) -> None:
    import asyncio

    import ray_broker.aio as rba

    asyncio.run(rba.init_ray("local", num_cpus=6, system_config={"num_workers_soft_limit": 16}))
    [options] = inits.calls
    assert options["address"] == "local" and options["num_cpus"] == 6
    assert options["_system_config"]["num_workers_soft_limit"] == 16
