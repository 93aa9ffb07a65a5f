"""Peek-lock and receive-and-delete, lock tokens and renewal, settlements and delivery counts."""
from __future__ import annotations

import uuid

import pytest

from ray_broker.engine.partition import DEAD_LETTER, MAIN, RECEIVE_AND_DELETE
from ray_broker.errors import InvalidOperationError, MessageLockLostError, MessageNotFoundError
from ray_broker.message import MessageState
from ray_broker.wire import Settlement

from .conftest import Broker


@pytest.fixture
def q(broker: Broker) -> str:
    """A queue with a 30 s lock and the default max delivery count."""
    return broker.create_queue("q", lock_duration=30)


def test_peek_lock_hides_the_message_until_the_lock_expires(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    assert isinstance(msg.lock_token, uuid.UUID)
    assert msg.locked_until_utc is not None
    assert msg.locked_until_utc.timestamp() == broker.clock.now() + 30
    assert msg.delivery_count == 1
    assert broker.receive(q) == []
    broker.clock.advance(29.9)
    assert broker.receive(q) == []
    broker.clock.advance(0.1)
    (again,) = broker.receive(q)
    assert again.sequence_number == msg.sequence_number
    assert again.lock_token != msg.lock_token
    assert again.delivery_count == 2


def test_each_receive_hands_out_a_distinct_lock_token(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b", "c")
    tokens = {m.lock_token for m in broker.receive(q)}
    assert len(tokens) == 3 and None not in tokens


def test_receive_and_delete_removes_messages_without_a_lock(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b")
    got = broker.receive(q, mode=RECEIVE_AND_DELETE)
    assert broker.bodies(got) == [b"a", b"b"]
    assert all(m.lock_token is None and m.locked_until_utc is None for m in got)
    assert [m.delivery_count for m in got] == [1, 1]
    broker.clock.advance(3600)
    assert broker.receive(q) == []
    assert broker.engine.runtime(q)["size"] == 0


def test_complete_removes_the_message(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b")
    first, second = broker.receive(q)
    assert broker.settle(q, "complete", first) is None
    broker.clock.advance(31)
    assert [m.sequence_number for m in broker.receive(q)] == [second.sequence_number]


def test_abandon_releases_at_once_and_counts_a_delivery(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    assert broker.settle(q, "abandon", msg) is None
    (again,) = broker.receive(q)
    assert again.delivery_count == 2
    assert broker.settle(q, "abandon", again) is None
    assert broker.receive(q)[0].delivery_count == 3


def test_release_returns_a_message_without_counting_a_delivery(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    assert broker.settle(q, "release", msg) is None
    assert broker.peek(q)[0].delivery_count == 0
    assert broker.receive(q)[0].delivery_count == 1


def test_renew_extends_the_lock_by_the_lock_duration(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    broker.clock.advance(20)
    until = broker.settle(q, "renew", msg)
    assert until == broker.clock.now() + 30
    broker.clock.advance(25)
    assert broker.receive(q) == []
    assert broker.settle(q, "complete", msg) is None


def test_lock_duration_is_per_entity(broker: Broker) -> None:
    broker.create_queue("short", lock_duration=5)
    broker.create_queue("long", lock_duration=300)
    broker.send("short", "a")
    broker.send("long", "b")
    now = broker.clock.now()
    assert broker.receive("short")[0].locked_until_utc.timestamp() == now + 5  # type: ignore[union-attr]
    assert broker.receive("long")[0].locked_until_utc.timestamp() == now + 300  # type: ignore[union-attr]


def test_settling_with_a_wrong_token_loses_the_lock(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    ops = [Settlement("complete", msg.sequence_number, uuid.uuid4().bytes)]
    (result,) = broker.engine.settle(q, MAIN, ops)
    assert isinstance(result, MessageLockLostError)
    assert broker.settle(q, "complete", msg) is None


def test_settling_after_the_lock_expired_loses_the_lock(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    broker.clock.advance(30)
    for action in ("complete", "abandon", "defer", "dead_letter", "renew"):
        assert isinstance(broker.settle(q, action, msg), MessageLockLostError)
    assert broker.receive(q)[0].sequence_number == msg.sequence_number


def test_a_repeated_settlement_is_idempotent_and_a_different_one_loses_the_lock(broker: Broker, q: str) -> None:
    """A retry of the same settlement (a reply lost on the way) succeeds; anything else after it fails."""
    broker.send(q, "a", "b")
    first, second = broker.receive(q)
    assert broker.settle(q, "complete", first) is None
    assert broker.settle(q, "complete", first) is None
    assert isinstance(broker.settle(q, "abandon", first), MessageLockLostError)
    assert broker.settle(q, "abandon", second) is None
    assert isinstance(broker.settle(q, "complete", second), MessageLockLostError)
    assert broker.engine.runtime(q)["active"] == 1


def test_an_old_token_is_refused_after_redelivery(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (old,) = broker.receive(q)
    broker.clock.advance(30)
    (new,) = broker.receive(q)
    assert isinstance(broker.settle(q, "complete", old), MessageLockLostError)
    assert broker.settle(q, "complete", new) is None


def test_one_failed_op_does_not_stop_the_others(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b")
    first, second = broker.receive(q)
    assert first.lock_token is not None and second.lock_token is not None
    results = broker.engine.settle(q, MAIN, [
        Settlement("complete", first.sequence_number, b"\x00" * 16),
        Settlement("complete", second.sequence_number, second.lock_token.bytes),
        Settlement("bogus", first.sequence_number, first.lock_token.bytes),
    ])
    assert isinstance(results[0], MessageLockLostError)
    assert results[1] is None
    assert isinstance(results[2], InvalidOperationError)
    assert [m.sequence_number for m in broker.peek(q)] == [first.sequence_number]


def test_dead_letter_keeps_reason_and_description(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    assert broker.settle(q, "dead_letter", msg, reason="bad", description="could not parse") is None
    assert broker.receive(q) == []
    (dead,) = broker.receive(q, subq=DEAD_LETTER)
    assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("bad", "could not parse")
    assert dead.sequence_number == msg.sequence_number


def test_max_delivery_count_on_abandon_dead_letters(broker: Broker) -> None:
    broker.create_queue("q", max_delivery_count=3)
    broker.send("q", "a")
    for attempt in (1, 2, 3):
        (msg,) = broker.receive("q")
        assert msg.delivery_count == attempt
        assert broker.settle("q", "abandon", msg) is None
    assert broker.receive("q") == []
    (dead,) = broker.receive("q", subq=DEAD_LETTER)
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert "3 delivery attempts" in (dead.dead_letter_error_description or "")


def test_max_delivery_count_on_lock_expiry_dead_letters(broker: Broker) -> None:
    broker.create_queue("q", max_delivery_count=2, lock_duration=10)
    broker.send("q", "a", "b")
    for attempt in (1, 2):
        got = broker.receive("q", 1)
        assert [(m.body, m.delivery_count) for m in got] == [(b"a", attempt)]
        broker.clock.advance(10)
    (next_msg,) = broker.receive("q", 1)
    assert next_msg.body == b"b"
    (dead,) = broker.peek("q", subq=DEAD_LETTER)
    assert (dead.body, dead.dead_letter_reason) == (b"a", "MaxDeliveryCountExceeded")


def test_defer_then_receive_by_sequence_number(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b")
    first, _ = broker.receive(q)
    assert broker.settle(q, "defer", first) is None
    broker.clock.advance(60)
    assert broker.bodies(broker.receive(q)) == [b"b"]
    (deferred,) = [m for m in broker.peek(q) if m.sequence_number == first.sequence_number]
    assert deferred.state is MessageState.DEFERRED
    (record,) = broker.engine.receive_deferred(q, MAIN, [first.sequence_number])
    assert record["delivery_count"] == 2 and record["lock_token"] != first.lock_token
    assert record["locked_until"] == broker.clock.now() + 30
    ops = [Settlement("complete", first.sequence_number, record["lock_token"])]
    assert broker.engine.settle(q, MAIN, ops) == [None]
    assert [m.body for m in broker.peek(q)] == [b"b"]


def test_abandoned_deferred_message_stays_deferred(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    broker.settle(q, "defer", msg)
    (record,) = broker.engine.receive_deferred(q, MAIN, [msg.sequence_number])
    assert broker.engine.settle(q, MAIN, [Settlement("abandon", msg.sequence_number, record["lock_token"])]) == [None]
    assert broker.receive(q) == []
    assert broker.engine.receive_deferred(q, MAIN, [msg.sequence_number])[0]["delivery_count"] == 3


def test_receive_deferred_in_receive_and_delete_mode(broker: Broker, q: str) -> None:
    broker.send(q, "a")
    (msg,) = broker.receive(q)
    broker.settle(q, "defer", msg)
    (record,) = broker.engine.receive_deferred(q, MAIN, [msg.sequence_number], RECEIVE_AND_DELETE)
    assert "lock_token" not in record
    assert broker.peek(q) == []
    assert broker.engine.runtime(q)["size"] == 0


def test_receive_deferred_refuses_missing_active_and_locked_messages(broker: Broker, q: str) -> None:
    broker.send(q, "a", "b")
    first, second = broker.receive(q)
    broker.settle(q, "abandon", second)
    broker.settle(q, "defer", first)
    with pytest.raises(MessageNotFoundError):
        broker.engine.receive_deferred(q, MAIN, [999])
    with pytest.raises(MessageNotFoundError):
        broker.engine.receive_deferred(q, MAIN, [second.sequence_number])
    broker.engine.receive_deferred(q, MAIN, [first.sequence_number])
    with pytest.raises(MessageNotFoundError):
        broker.engine.receive_deferred(q, MAIN, [first.sequence_number])
