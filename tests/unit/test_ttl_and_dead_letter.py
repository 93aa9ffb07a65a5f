"""Time to live, expiry and the dead-letter sub-queue."""
from __future__ import annotations

from datetime import timedelta

from ray_broker import Message
from ray_broker.engine.partition import DEAD_LETTER, RECEIVE_AND_DELETE
from ray_broker.errors import InvalidOperationError, MessageLockLostError

from .conftest import Broker


def ttl_message(body: str, seconds: float) -> Message:
    """A message with a time to live."""
    return Message(body, time_to_live=timedelta(seconds=seconds))


def test_expires_at_is_enqueued_time_plus_ttl(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", ttl_message("a", 60), "b")
    a, b = broker.peek("q")
    assert a.expires_at_utc is not None and a.enqueued_time_utc is not None
    assert a.expires_at_utc - a.enqueued_time_utc == timedelta(seconds=60)
    assert b.expires_at_utc is None


def test_entity_default_ttl_applies_and_caps_longer_ttls(broker: Broker) -> None:
    broker.create_queue("q", default_message_time_to_live=timedelta(seconds=100))
    broker.send("q", "default", ttl_message("longer", 1000), ttl_message("shorter", 10))
    now = broker.clock.now()
    assert [m.expires_at_utc.timestamp() for m in broker.peek("q")] == [now + 100, now + 100, now + 10]  # type: ignore[union-attr]


def test_expired_message_is_removed_without_dead_lettering(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", ttl_message("a", 10), "b")
    broker.clock.advance(10)
    assert broker.bodies(broker.receive("q")) == [b"b"]
    assert broker.peek("q", subq=DEAD_LETTER) == []
    assert broker.engine.runtime("q")["active"] == 1


def test_a_receive_skips_expired_messages_and_returns_each_message_once(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", ttl_message("x1", 5), "a", ttl_message("x2", 5), "b", ttl_message("x3", 5), "c")
    broker.clock.advance(5)
    got = broker.receive("q", 3)
    assert broker.bodies(got) == [b"a", b"b", b"c"]
    assert len({m.sequence_number for m in got}) == 3


def test_expired_message_is_dead_lettered_when_enabled(broker: Broker) -> None:
    broker.create_queue("q", dead_lettering_on_message_expiration=True)
    broker.send("q", ttl_message("a", 10))
    broker.clock.advance(11)
    assert broker.receive("q") == []
    (dead,) = broker.receive("q", subq=DEAD_LETTER)
    assert dead.body == b"a"
    assert dead.dead_letter_reason == "TTLExpiredException"


def test_housekeeping_expires_messages_nobody_receives(broker: Broker) -> None:
    broker.create_queue("dl", dead_lettering_on_message_expiration=True)
    broker.create_queue("drop")
    broker.send("dl", ttl_message("a", 5))
    broker.send("drop", ttl_message("b", 5))
    assert broker.engine.housekeeping() is False
    broker.clock.advance(5)
    assert broker.engine.housekeeping() is True
    assert broker.engine.runtime("dl")["dead_letter"] == 1
    dropped = broker.engine.runtime("drop")
    assert (dropped["active"], dropped["dead_letter"], dropped["size"]) == (0, 0, 0)


def test_a_locked_message_does_not_expire_while_locked(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=60, dead_lettering_on_message_expiration=True)
    broker.send("q", ttl_message("a", 10), ttl_message("b", 10))
    first, second = broker.receive("q")
    broker.clock.advance(30)
    broker.engine.housekeeping()
    assert broker.engine.runtime("q")["dead_letter"] == 0
    assert broker.settle("q", "complete", first) is None
    assert broker.settle("q", "abandon", second) is None
    broker.engine.housekeeping()
    assert broker.engine.runtime("q")["active"] == 0
    assert broker.bodies(broker.receive("q", subq=DEAD_LETTER)) == [b"b"]


def test_message_expires_once_its_lock_lapses(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=60)
    broker.send("q", ttl_message("a", 10))
    broker.receive("q")
    broker.clock.advance(60)
    assert broker.receive("q") == []
    assert broker.engine.runtime("q")["active"] == 0


def test_deferred_messages_never_expire_to_the_dead_letter_queue(broker: Broker) -> None:
    broker.create_queue("q", dead_lettering_on_message_expiration=True)
    broker.send("q", ttl_message("a", 10))
    (msg,) = broker.receive("q")
    broker.settle("q", "defer", msg)
    broker.clock.advance(3600)
    broker.engine.housekeeping()
    assert broker.receive("q") == []
    counts = broker.engine.runtime("q")
    assert (counts["active"], counts["dead_letter"]) == (1, 0)
    assert broker.engine.receive_deferred("q", 0, [msg.sequence_number])[0]["sequence_number"] == msg.sequence_number


def test_dead_letter_queue_can_be_received_settled_and_peeked(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=30)
    broker.send("q", "a", "b", "c")
    for msg in broker.receive("q"):
        broker.settle("q", "dead_letter", msg, reason=f"r-{msg.body.decode()}")
    peeked = broker.peek("q", subq=DEAD_LETTER)
    assert [m.dead_letter_reason for m in peeked] == ["r-a", "r-b", "r-c"]
    assert all(m.lock_token is None for m in peeked)
    a, b = broker.receive("q", 2, subq=DEAD_LETTER)
    assert broker.settle("q", "complete", a, subq=DEAD_LETTER) is None
    assert broker.settle("q", "abandon", b, subq=DEAD_LETTER) is None
    assert broker.bodies(broker.receive("q", mode=RECEIVE_AND_DELETE, subq=DEAD_LETTER)) == [b"b", b"c"]
    assert broker.engine.runtime("q")["dead_letter"] == 0


def test_a_dead_letter_settlement_needs_the_right_sub_queue(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a")
    (msg,) = broker.receive("q")
    broker.settle("q", "dead_letter", msg)
    (dead,) = broker.receive("q", subq=DEAD_LETTER)
    assert isinstance(broker.settle("q", "complete", dead), MessageLockLostError)
    assert broker.settle("q", "complete", dead, subq=DEAD_LETTER) is None


def test_no_dead_lettering_from_the_dead_letter_queue(broker: Broker) -> None:
    broker.create_queue("q", max_delivery_count=1, lock_duration=10)
    broker.send("q", "a")
    (msg,) = broker.receive("q")
    broker.settle("q", "dead_letter", msg)
    (dead,) = broker.receive("q", subq=DEAD_LETTER)
    assert isinstance(broker.settle("q", "dead_letter", dead, subq=DEAD_LETTER), InvalidOperationError)
    for _ in range(3):
        broker.clock.advance(10)
        (dead,) = broker.receive("q", subq=DEAD_LETTER)
        assert broker.settle("q", "abandon", dead, subq=DEAD_LETTER) is None
    assert dead.delivery_count == 5
    assert broker.engine.runtime("q")["dead_letter"] == 1


def test_ttl_does_not_apply_in_the_dead_letter_queue(broker: Broker) -> None:
    broker.create_queue("q", dead_lettering_on_message_expiration=True)
    broker.send("q", ttl_message("a", 10))
    broker.clock.advance(10)
    broker.engine.housekeeping()
    broker.clock.advance(10 * 24 * 3600)
    broker.engine.housekeeping()
    assert broker.bodies(broker.receive("q", subq=DEAD_LETTER)) == [b"a"]
