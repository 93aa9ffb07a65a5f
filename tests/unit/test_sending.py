"""Sending: sequence numbers per partition, entity placement, and what a sent message carries."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from ray_broker import Message, codec
from ray_broker.engine.delivery import BACKLOG_ROWS_COUNTED
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ray_broker.routing import home_partition, partition_of

from .conftest import Broker


def test_partitioned_sequence_numbers_carry_the_partition_index(make_broker: Callable[..., Broker]) -> None:
    b = make_broker(index=3, partition_count=4)
    b.create_queue("orders", enable_partitioning=True)
    seqs = b.send("orders", "a", "b", "c")
    assert seqs == [(3 << 48) | 1, (3 << 48) | 2, (3 << 48) | 3]
    assert {partition_of(s) for s in seqs} == {3}
    assert [m.partition_index for m in b.receive("orders")] == [3, 3, 3]


def test_sequence_numbers_are_gap_free_across_calls_and_settlements(broker: Broker) -> None:
    broker.create_queue("q")
    first = broker.send("q", "a", "b")
    for msg in broker.receive("q"):
        assert broker.settle("q", "complete", msg) is None
    second = broker.send("q", "c")
    third = broker.send("q", "d", "e")
    assert first + second + third == [1, 2, 3, 4, 5]


def test_non_partitioned_entity_has_zero_top_bits_on_its_home_partition(make_broker: Callable[..., Broker]) -> None:
    home = home_partition("billing", 4)
    b = make_broker(index=home, partition_count=4)
    b.create_queue("billing")
    assert b.send("billing", "x", "y") == [1, 2]


def test_non_partitioned_entity_is_refused_away_from_its_home(make_broker: Callable[..., Broker]) -> None:
    away = (home_partition("billing", 4) + 1) % 4
    b = make_broker(index=away, partition_count=4)
    b.create_queue("billing")
    with pytest.raises(InvalidOperationError, match="not partitioned"):
        b.send("billing", "x")


def test_each_entity_has_its_own_counter(make_broker: Callable[..., Broker]) -> None:
    b = make_broker(index=1, partition_count=2)
    b.create_queue("p1", enable_partitioning=True)
    b.create_queue("p2", enable_partitioning=True)
    assert b.send("p1", "a", "b") == [(1 << 48) | 1, (1 << 48) | 2]
    assert b.send("p2", "c") == [(1 << 48) | 1]


def test_unknown_entity_is_not_found(broker: Broker) -> None:
    with pytest.raises(MessagingEntityNotFoundError, match="nope"):
        broker.send("nope", "x")


def test_entity_names_are_case_insensitive(broker: Broker) -> None:
    broker.create_queue("Orders")
    broker.send("ORDERS", "x")
    assert broker.bodies(broker.receive("orders")) == [b"x"]


def test_received_message_carries_every_sent_field(broker: Broker) -> None:
    broker.create_queue("q")
    sent = Message("héllo", message_id="m1", correlation_id="c1", subject="s", to="t", reply_to="r",
                   reply_to_session_id="rs", content_type="text/plain", partition_key="pk",
                   application_properties={"n": 7, "f": 1.5, "flag": True, "none": None, "raw": b"\x00"})
    broker.send("q", sent)
    (got,) = broker.receive("q")
    assert got.body == "héllo".encode()
    for field in ("message_id", "correlation_id", "subject", "to", "reply_to", "reply_to_session_id",
                  "content_type", "partition_key"):
        assert getattr(got, field) == getattr(sent, field)
    assert got.application_properties == sent.application_properties
    assert got.enqueued_time_utc is not None and got.enqueued_time_utc.timestamp() == broker.clock.now()
    assert got.enqueued_sequence_number == got.sequence_number == 1


def test_session_queue_requires_a_session_id_on_every_message(broker: Broker) -> None:
    broker.create_queue("sq", requires_session=True)
    with pytest.raises(InvalidOperationError, match="session_id"):
        broker.send("sq", Message("a", session_id="s"), Message("b"))
    assert broker.engine.runtime("sq")["active"] == 0
    assert broker.send("sq", Message("a", session_id="s")) == [1]


def test_receive_reports_whether_more_messages_wait(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a", "b", "c")
    first = broker.engine.receive("q", 0, 2)
    assert len(first["messages"]) == 2 and first["more"] is True
    rest = broker.engine.receive("q", 0, 2)
    assert len(rest["messages"]) == 1 and rest["more"] is False


def test_receive_and_delete_on_an_empty_partition_returns_nothing(make_broker) -> None:  # type: ignore[no-untyped-def]
    """A router probes partitions it knows nothing of: an empty fragment answers with no messages."""
    broker = make_broker(index=3, partition_count=16)
    broker.create_queue("q", enable_partitioning=True)
    assert broker.receive("q", 1, mode="receive_and_delete") == []
    assert broker.engine.runtime("q")["size"] == 0


@pytest.mark.parametrize("payload", [b"\x80\x04K\x01.", b"not msgpack", codec.packb(["a list"]),
                                     codec.packb({"body": "text, not bytes"}), None])
def test_a_payload_that_is_not_an_encoded_message_is_refused(broker: Broker, payload: Any) -> None:
    broker.create_queue("q")
    with pytest.raises(InvalidArgumentError, match="message 1 of the batch to 'q' is not an encoded message"):
        broker.engine.send("q", [Message("ok").to_envelope(), {"payload": payload, "size": 10}])
    assert broker.engine.runtime("q")["active"] == 0


def test_receive_says_how_many_messages_are_left_at_least(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", *(f"batch-{i}" for i in range(100)))
    part = broker.engine.receive("q", 0, 30)
    assert len(part["messages"]) == 30 and part["backlog"] == 70, "the rest of the batch's run"
    for i in range(300):
        broker.send("q", f"single-{i}")
    more = broker.engine.receive("q", 0, 70)
    assert more["backlog"] == BACKLOG_ROWS_COUNTED, "single messages counted up to the bound"
    broker.engine.receive("q", 0, 300 - BACKLOG_ROWS_COUNTED)
    last = broker.engine.receive("q", 0, 1000)
    assert len(last["messages"]) == BACKLOG_ROWS_COUNTED and last["backlog"] == 0 and last["more"] is False
