"""Sessions: session locks (named and next available), FIFO per session, renewal, state and release."""
from __future__ import annotations

import pytest

from ray_broker import Message
from ray_broker.engine.partition import DEAD_LETTER, MAIN, PEEK_LOCK
from ray_broker.message import ReceivedMessage
from ray_broker.wire import SessionRef
from ray_broker.errors import (
    InvalidOperationError,
    MessageNotFoundError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from .conftest import Broker

LOCK = 30.0


@pytest.fixture
def sq(broker: Broker) -> str:
    """A session queue with a 30 s lock."""
    return broker.create_queue("sq", requires_session=True, lock_duration=LOCK)


def send_to(broker: Broker, entity: str, *pairs: tuple[str, str]) -> list[int | None]:
    """Send (session id, body) pairs in one call."""
    return broker.send(entity, *(Message(body, session_id=sid) for sid, body in pairs))


def accept(broker: Broker, entity: str, session_id: str | None) -> SessionRef:
    """Lock a session and return the lock receivers pass along."""
    got = broker.engine.accept_session(entity, session_id)
    assert got is not None
    return SessionRef(got["session_id"], got["lock_token"])


def test_accepting_a_session_locks_it_for_the_lock_duration(broker: Broker, sq: str) -> None:
    got = broker.engine.accept_session(sq, "s1")
    assert got is not None
    assert got["session_id"] == "s1"
    assert isinstance(got["lock_token"], bytes) and len(got["lock_token"]) == 16
    assert got["locked_until"] == broker.clock.now() + LOCK


def test_session_queue_needs_a_session_receiver(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("s1", "a"))
    with pytest.raises(InvalidOperationError, match="requires sessions"):
        broker.receive(sq)


def test_plain_queue_refuses_sessions(broker: Broker) -> None:
    broker.create_queue("q")
    with pytest.raises(InvalidOperationError, match="does not require sessions"):
        broker.engine.accept_session("q", "s1")
    with pytest.raises(InvalidOperationError, match="does not require sessions"):
        broker.receive("q", session=SessionRef("s1", b"\x00" * 16))


def test_a_session_receiver_gets_only_its_session_in_order(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3"))
    session_a = accept(broker, sq, "a")
    got = broker.receive(sq, session=session_a)
    assert broker.bodies(got) == [b"a1", b"a2", b"a3"]
    assert all(m.session_id == "a" for m in got)
    assert [m.locked_until_utc.timestamp() for m in got] == [broker.clock.now() + LOCK] * 3  # type: ignore[union-attr]
    session_b = accept(broker, sq, "b")
    assert broker.bodies(broker.receive(sq, 1, session=session_b)) == [b"b1"]
    assert broker.bodies(broker.receive(sq, 1, session=session_b)) == [b"b2"]


def test_next_available_session_skips_locked_and_empty_sessions(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("b", "b1"), ("a", "a2"))
    assert accept(broker, sq, None)[0] == "a"
    assert accept(broker, sq, None)[0] == "b"
    assert broker.engine.accept_session(sq, None) is None


def test_a_held_session_cannot_be_locked_again(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    accept(broker, sq, "a")
    with pytest.raises(SessionCannotBeLockedError, match="'a'"):
        broker.engine.accept_session(sq, "a")
    send_to(broker, sq, ("a", "a2"))
    assert broker.engine.accept_session(sq, None) is None


def test_an_expired_session_lock_frees_the_session(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    old = accept(broker, sq, "a")
    (first,) = broker.receive(sq, session=old)
    assert first.delivery_count == 1
    broker.clock.advance(LOCK)
    new = accept(broker, sq, None)
    assert new[0] == "a" and new[1] != old[1]
    (again,) = broker.receive(sq, session=new)
    assert again.sequence_number == first.sequence_number
    assert again.delivery_count == 2


def test_an_expired_session_lock_is_lost(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    session = accept(broker, sq, "a")
    (msg,) = broker.receive(sq, session=session)
    broker.clock.advance(LOCK)
    with pytest.raises(SessionLockLostError):
        broker.receive(sq, session=session)
    with pytest.raises(SessionLockLostError):
        broker.engine.renew_session(sq, *session)
    with pytest.raises(SessionLockLostError):
        broker.engine.get_session_state(sq, *session)
    with pytest.raises(SessionLockLostError):
        broker.engine.set_session_state(sq, *session, b"x")
    assert isinstance(broker.settle(sq, "complete", msg, session=session), SessionLockLostError)


def test_a_wrong_session_token_is_refused(broker: Broker, sq: str) -> None:
    accept(broker, sq, "a")
    with pytest.raises(SessionLockLostError):
        broker.receive(sq, session=SessionRef("a", b"\x01" * 16))


def test_renewing_a_session_extends_its_messages_locks(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("a", "a2"))
    session = accept(broker, sq, "a")
    first, second = broker.receive(sq, session=session)
    broker.clock.advance(LOCK - 5)
    assert broker.engine.renew_session(sq, *session) == broker.clock.now() + LOCK
    broker.clock.advance(LOCK - 5)
    assert broker.settle(sq, "complete", first, session=session) is None
    assert broker.settle(sq, "complete", second, session=session) is None
    assert broker.engine.runtime(sq)["active"] == 0


def test_message_locks_in_a_session_are_renewed_through_the_session(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    session = accept(broker, sq, "a")
    (msg,) = broker.receive(sq, session=session)
    assert isinstance(broker.settle(sq, "renew", msg, session=session), InvalidOperationError)


def test_messages_arriving_later_go_to_the_session_holder(broker: Broker, sq: str) -> None:
    session = accept(broker, sq, "a")
    assert broker.receive(sq, session=session) == []
    send_to(broker, sq, ("a", "late"))
    assert broker.bodies(broker.receive(sq, session=session)) == [b"late"]


def test_session_state_get_set_and_clear(broker: Broker, sq: str) -> None:
    session = accept(broker, sq, "a")
    assert broker.engine.get_session_state(sq, *session) is None
    broker.engine.set_session_state(sq, *session, b"step-1")
    assert broker.engine.get_session_state(sq, *session) == b"step-1"
    broker.engine.set_session_state(sq, *session, None)
    assert broker.engine.get_session_state(sq, *session) is None


def test_session_state_outlives_the_lock_and_the_messages(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    first = accept(broker, sq, "a")
    broker.engine.set_session_state(sq, *first, b"kept")
    (msg,) = broker.receive(sq, session=first)
    broker.settle(sq, "complete", msg, session=first)
    broker.engine.release_session(sq, *first)
    second = accept(broker, sq, "a")
    assert broker.engine.get_session_state(sq, *second) == b"kept"


def test_listing_the_sessions_whose_state_was_set_after_a_time(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("b", "b1"))
    old = accept(broker, sq, "a")
    broker.engine.set_session_state(sq, *old, b"old")
    broker.clock.advance(5)
    cutoff = broker.clock.now()
    broker.clock.advance(5)
    new = accept(broker, sq, "b")
    broker.engine.set_session_state(sq, *new, b"new")
    assert broker.engine.list_sessions(sq) == ["a", "b"]
    assert broker.engine.list_sessions(sq, cutoff) == ["b"]
    broker.clock.advance(5)
    broker.engine.set_session_state(sq, *old, None)  # cleared: an update too
    assert broker.engine.list_sessions(sq, cutoff) == ["a", "b"]
    assert broker.engine.list_sessions(sq, broker.clock.now()) == []


def test_releasing_a_session_returns_its_messages_and_their_next_delivery_counts_higher(
        broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("a", "a2"))
    first = accept(broker, sq, "a")
    assert [m.delivery_count for m in broker.receive(sq, session=first)] == [1, 1]
    broker.engine.release_session(sq, *first)
    with pytest.raises(SessionLockLostError):
        broker.receive(sq, session=first)
    second = accept(broker, sq, None)
    got = broker.receive(sq, session=second)
    assert [(m.body, m.delivery_count) for m in got] == [(b"a1", 2), (b"a2", 2)]


def test_a_session_receive_hands_out_again_what_its_receiver_never_got(broker: Broker, sq: str) -> None:
    """A reply lost between lock and receiver (a crash): the next receive, told the highest sequence
    number its receiver has, returns the lost messages first, so session order holds."""
    send_to(broker, sq, *[("a", f"a{i}") for i in range(6)])
    held = accept(broker, sq, "a")
    first = broker.engine.receive(sq, MAIN, 2, PEEK_LOCK, held, session_seen=0)["messages"]
    broker.engine.receive(sq, MAIN, 2, PEEK_LOCK, held, session_seen=first[-1]["sequence_number"])
    again = broker.engine.receive(sq, MAIN, 3, PEEK_LOCK, held, session_seen=first[-1]["sequence_number"])
    bodies = [ReceivedMessage(r).body for r in again["messages"]]
    assert bodies == [b"a2", b"a3", b"a4"]
    assert [r["delivery_count"] for r in again["messages"]] == [1, 1, 1]


def test_releasing_with_a_stale_token_changes_nothing(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    old = accept(broker, sq, "a")
    broker.clock.advance(LOCK)
    new = accept(broker, sq, "a")
    broker.receive(sq, session=new)
    broker.engine.release_session(sq, *old)
    with pytest.raises(SessionCannotBeLockedError):
        broker.engine.accept_session(sq, "a")


def test_release_op_in_a_session_does_not_count_a_delivery(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    session = accept(broker, sq, "a")
    (msg,) = broker.receive(sq, session=session)
    assert broker.settle(sq, "release", msg, session=session) is None
    assert broker.receive(sq, session=session)[0].delivery_count == 1


def test_deferred_session_messages_are_received_within_their_session(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"), ("b", "b1"))
    session_a = accept(broker, sq, "a")
    (msg,) = broker.receive(sq, session=session_a)
    broker.settle(sq, "defer", msg, session=session_a)
    session_b = accept(broker, sq, "b")
    with pytest.raises(MessageNotFoundError, match="session 'b'"):
        broker.engine.receive_deferred(sq, MAIN, [msg.sequence_number], session=session_b)
    (record,) = broker.engine.receive_deferred(sq, MAIN, [msg.sequence_number], session=session_a)
    assert record["locked_until"] == broker.clock.now() + LOCK


def test_the_dead_letter_queue_of_a_session_queue_needs_no_session(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("a", "a1"))
    session = accept(broker, sq, "a")
    (msg,) = broker.receive(sq, session=session)
    broker.settle(sq, "dead_letter", msg, session=session, reason="r")
    (dead,) = broker.receive(sq, subq=DEAD_LETTER)
    assert (dead.body, dead.session_id, dead.dead_letter_reason) == (b"a1", "a", "r")
    with pytest.raises(InvalidOperationError):
        broker.receive(sq, subq=DEAD_LETTER, session=session)


def test_the_sessions_listed_are_those_with_active_messages_or_a_state(broker: Broker, sq: str) -> None:
    send_to(broker, sq, ("c", "c1"), ("a", "a1"), ("b", "b1"), ("d", "d1"))
    assert broker.engine.list_sessions(sq) == ["a", "b", "c", "d"]
    for session_id, action in (("b", "complete"), ("c", "defer"), ("d", "dead_letter")):
        session = accept(broker, sq, session_id)
        [msg] = broker.receive(sq, session=session)
        broker.settle(sq, action, msg, session=session, reason="r" if action == "dead_letter" else None)
        if session_id == "d":
            broker.engine.set_session_state(sq, "d", session.lock_token, b"kept")
        broker.engine.release_session(sq, session_id, session.lock_token)
    assert broker.engine.list_sessions(sq) == ["a", "d"]  # b: completed; c: only deferred; d: its state


def test_a_queue_without_sessions_has_none_to_list(broker: Broker) -> None:
    broker.create_queue("q")
    with pytest.raises(InvalidOperationError, match="does not require sessions"):
        broker.engine.list_sessions("q")
