"""Scheduled messages, cancelling them, and peeking from a sequence number."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable

import pytest

from ray_broker import Message
from ray_broker.errors import MessageNotFoundError
from ray_broker.message import MessageState
from ray_broker.routing import home_partition

from .conftest import Broker


def at(broker: Broker, seconds_from_now: float) -> datetime:
    """An aware UTC datetime relative to the broker's clock."""
    return datetime.fromtimestamp(broker.clock.now() + seconds_from_now, tz=timezone.utc)


def scheduled_envelope(body: str, when: float) -> dict[str, object]:
    """An envelope scheduled for epoch time `when`."""
    return {**Message(body).to_envelope(), "scheduled": when}


def test_scheduled_message_stays_hidden_until_its_time(broker: Broker) -> None:
    broker.create_queue("q")
    (seq,) = broker.engine.send("q", [scheduled_envelope("later", broker.clock.now() + 60)])
    assert broker.receive("q") == []
    assert broker.engine.runtime("q")["scheduled"] == 1
    broker.clock.advance(59)
    assert broker.receive("q") == []
    broker.clock.advance(1)
    (msg,) = broker.receive("q")
    assert msg.body == b"later"
    assert broker.engine.runtime("q")["scheduled"] == 0


def test_scheduled_enqueue_time_on_the_message_schedules_it(broker: Broker) -> None:
    broker.create_queue("q")
    when = at(broker, 30)
    broker.send("q", Message("later", scheduled_enqueue_time_utc=when))
    assert broker.receive("q") == []
    broker.clock.advance(30)
    (msg,) = broker.receive("q")
    assert msg.scheduled_enqueue_time_utc == when
    assert msg.enqueued_time_utc == when


def test_a_scheduled_time_in_the_past_enqueues_at_once(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", Message("now", scheduled_enqueue_time_utc=at(broker, -5)))
    assert broker.engine.runtime("q")["scheduled"] == 0
    assert broker.bodies(broker.receive("q")) == [b"now"]


def test_scheduled_message_gets_a_new_sequence_number_when_it_becomes_active(
        make_broker: Callable[..., Broker]) -> None:
    b = make_broker(index=2, partition_count=4)
    b.create_queue("q", enable_partitioning=True)
    (scheduled_seq,) = b.engine.send("q", [scheduled_envelope("later", b.clock.now() + 10)])
    (plain_seq,) = b.send("q", "now")
    assert (scheduled_seq, plain_seq) == ((2 << 48) | 1, (2 << 48) | 2)
    b.clock.advance(10)
    assert [(m.body, m.sequence_number) for m in b.receive("q")] == [(b"now", plain_seq), (b"later", (2 << 48) | 3)]
    assert b.send("q", "after") == [(2 << 48) | 4]
    assert b.engine.integrity_check()["ok"]


def test_scheduled_messages_activate_in_time_order(broker: Broker) -> None:
    broker.create_queue("q")
    now = broker.clock.now()
    broker.engine.send("q", [scheduled_envelope("second", now + 20), scheduled_envelope("first", now + 10)])
    broker.clock.advance(30)
    assert broker.engine.housekeeping() is True
    assert [(m.body, m.sequence_number) for m in broker.receive("q")] == [(b"first", 3), (b"second", 4)]


def test_ttl_of_a_scheduled_message_counts_from_activation(broker: Broker) -> None:
    broker.create_queue("q")
    when = at(broker, 100)
    broker.send("q", Message("later", scheduled_enqueue_time_utc=when, time_to_live=timedelta(seconds=10)))
    broker.clock.advance(100)
    broker.engine.housekeeping()
    broker.clock.advance(5)
    (msg,) = broker.receive("q")
    assert msg.enqueued_time_utc == when
    assert msg.expires_at_utc == when + timedelta(seconds=10)


def test_cancel_removes_scheduled_messages(broker: Broker) -> None:
    broker.create_queue("q")
    now = broker.clock.now()
    seqs = broker.engine.send("q", [scheduled_envelope("a", now + 10), scheduled_envelope("b", now + 10)])
    broker.engine.cancel_scheduled("q", [seqs[0]])
    assert broker.engine.runtime("q")["scheduled"] == 1
    broker.clock.advance(10)
    assert broker.bodies(broker.receive("q")) == [b"b"]


def test_cancelling_a_missing_message_cancels_nothing(broker: Broker) -> None:
    broker.create_queue("q")
    (seq,) = broker.engine.send("q", [scheduled_envelope("a", broker.clock.now() + 10)])
    with pytest.raises(MessageNotFoundError, match="12345"):
        broker.engine.cancel_scheduled("q", [seq, 12345])
    assert broker.engine.runtime("q")["scheduled"] == 1
    broker.engine.cancel_scheduled("q", [seq])
    with pytest.raises(MessageNotFoundError):
        broker.engine.cancel_scheduled("q", [seq])
    assert broker.engine.runtime("q")["size"] == 0


def test_an_enqueued_message_cannot_be_cancelled(broker: Broker) -> None:
    broker.create_queue("q")
    (seq,) = broker.engine.send("q", [scheduled_envelope("a", broker.clock.now() + 10)])
    broker.clock.advance(10)
    broker.engine.housekeeping()
    with pytest.raises(MessageNotFoundError):
        broker.engine.cancel_scheduled("q", [seq])


def test_peek_shows_active_deferred_and_scheduled_without_lock_fields(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "active", "deferred", "locked")
    broker.engine.send("q", [scheduled_envelope("scheduled", broker.clock.now() + 60)])
    _, deferred, _ = broker.receive("q", 3)
    broker.settle("q", "defer", deferred)
    records = broker.engine.peek("q", 0, 0, 10)
    assert [r["sequence_number"] for r in records] == [1, 2, 3, 4]
    assert all("lock_token" not in r and "locked_until" not in r for r in records)
    peeked = broker.peek("q")
    assert [m.state for m in peeked] == [MessageState.ACTIVE, MessageState.DEFERRED, MessageState.ACTIVE,
                                         MessageState.SCHEDULED]
    assert all(m.lock_token is None and m.locked_until_utc is None for m in peeked)


def test_peek_starts_from_a_sequence_number_and_does_not_lock(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a", "b", "c", "d")
    assert broker.bodies(broker.peek("q", 2, 2)) == [b"b", b"c"]
    assert broker.bodies(broker.peek("q", 4)) == [b"d"]
    assert broker.peek("q", 5) == []
    assert len(broker.receive("q")) == 4


def test_housekeeping_works_beside_entities_homed_on_other_partitions(make_broker: Callable[..., Broker]) -> None:
    names = [f"q{i}" for i in range(20)]
    here = next(n for n in names if home_partition(n, 2) == 0)
    elsewhere = next(n for n in names if home_partition(n, 2) == 1)
    broker = make_broker(index=0, partition_count=2)
    broker.create_queue(here, default_message_time_to_live=10)
    broker.create_queue(elsewhere)
    broker.engine.send(here, [scheduled_envelope("later", broker.clock.now() + 5)])
    broker.send(here, "expiring")
    broker.clock.advance(6)
    assert broker.engine.housekeeping() is True
    broker.clock.advance(10)
    assert broker.engine.housekeeping() is True
    assert broker.engine.runtime(here) == {"active": 0, "dead_letter": 0, "scheduled": 0, "transfer": 0,
                                           "transfer_dead_letter": 0, "size": 0, "next_sequence": 4,
                                           "accessed_at": broker.clock.now() - 16}
