"""Entity management on a partition, runtime counts, entity status, size quota and integrity."""
from __future__ import annotations

from datetime import timedelta

import pytest

from ray_broker import Message
from ray_broker.engine.partition import DEAD_LETTER, MAIN
from ray_broker.entities import normalize_queue_options
from ray_broker.errors import (
    MessagingEntityAlreadyExistsError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    QuotaExceededError,
)

from .conftest import Broker, queue_definition


def set_status(broker: Broker, name: str, status: str) -> None:
    """Update a queue's status as the gateway would."""
    definition = dict(broker.engine.get_entity(name))
    definition["options"] = normalize_queue_options({"status": status}, base=definition["options"])
    broker.engine.update_entity(definition)


def test_runtime_counts_every_kind_of_message(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "active", "deferred", "dead", "locked")
    broker.engine.send("q", [{**Message("scheduled").to_envelope(), "scheduled": broker.clock.now() + 60}])
    _, deferred, dead, _ = broker.receive("q")
    broker.settle("q", "defer", deferred)
    broker.settle("q", "dead_letter", dead)
    counts = broker.engine.runtime("q")
    expected_size = sum(int(r[0]) for r in broker.engine.db.execute("SELECT size FROM messages"))
    assert counts == {"active": 3, "dead_letter": 1, "scheduled": 1, "transfer": 0, "transfer_dead_letter": 0,
                      "size": expected_size, "next_sequence": 6, "accessed_at": broker.clock.now()}


def test_size_follows_sends_and_removals(broker: Broker) -> None:
    broker.create_queue("q")
    envelope = Message(b"x" * 1000).to_envelope()
    broker.engine.send("q", [envelope, envelope])
    assert broker.engine.runtime("q")["size"] == 2 * envelope["size"]
    (msg, _) = broker.receive("q")
    broker.settle("q", "complete", msg)
    assert broker.engine.runtime("q")["size"] == envelope["size"]


def test_send_disabled_refuses_sends_but_allows_receives(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a")
    set_status(broker, "q", "SendDisabled")
    with pytest.raises(MessagingEntityDisabledError, match="SendDisabled"):
        broker.send("q", "b")
    assert broker.bodies(broker.receive("q")) == [b"a"]


def test_receive_disabled_refuses_receives_but_allows_sends(broker: Broker) -> None:
    broker.create_queue("q")
    broker.create_queue("sq", requires_session=True)
    set_status(broker, "q", "ReceiveDisabled")
    set_status(broker, "sq", "ReceiveDisabled")
    assert broker.send("q", "a") == [1]
    with pytest.raises(MessagingEntityDisabledError, match="ReceiveDisabled"):
        broker.receive("q")
    with pytest.raises(MessagingEntityDisabledError):
        broker.engine.receive_deferred("q", MAIN, [1])
    with pytest.raises(MessagingEntityDisabledError):
        broker.engine.accept_session("sq", None)
    set_status(broker, "q", "Active")
    assert broker.bodies(broker.receive("q")) == [b"a"]


def test_disabled_refuses_sends_and_receives(broker: Broker) -> None:
    broker.create_queue("q", status="Disabled")
    with pytest.raises(MessagingEntityDisabledError):
        broker.send("q", "a")
    with pytest.raises(MessagingEntityDisabledError):
        broker.receive("q", subq=DEAD_LETTER)


def test_max_size_is_a_quota(broker: Broker) -> None:
    broker.create_queue("q", max_size_in_megabytes=1)
    half = Message(b"x" * (512 * 1024 - 100)).to_envelope()
    assert broker.engine.send("q", [half]) == [1]
    with pytest.raises(QuotaExceededError, match="max_size_in_megabytes"):
        broker.engine.send("q", [half, half])
    assert broker.engine.send("q", [half]) == [2]
    with pytest.raises(QuotaExceededError):
        broker.engine.send("q", [half])
    (msg, _) = broker.receive("q")
    broker.settle("q", "complete", msg)
    assert broker.engine.send("q", [half]) == [3]


def test_integrity_check_is_ok_after_mixed_work(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True, default_message_time_to_live=timedelta(seconds=30))
    broker.send("q", *(Message(str(i), message_id=str(i % 7)) for i in range(20)))
    msgs = broker.receive("q", 5)
    for action, msg in zip(("complete", "abandon", "defer", "dead_letter", "complete"), msgs):
        broker.settle("q", action, msg)
    broker.clock.advance(30)
    broker.engine.housekeeping()
    assert broker.engine.integrity_check() == {"ok": True, "problems": []}


def test_create_is_idempotent_for_the_same_incarnation(broker: Broker) -> None:
    definition = queue_definition("Orders")
    assert broker.engine.create_entity(definition) == definition
    assert broker.engine.create_entity(dict(definition)) == definition
    with pytest.raises(MessagingEntityAlreadyExistsError, match="Orders"):
        broker.engine.create_entity({**queue_definition("orders"), "incarnation": "other"})
    assert [d["name"] for d in broker.engine.list_entities()] == ["Orders"]


def test_update_replaces_the_definition(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=10)
    broker.engine.update_entity(queue_definition("q", lock_duration=20))
    broker.send("q", "a")
    (msg,) = broker.receive("q")
    assert msg.locked_until_utc is not None and msg.locked_until_utc.timestamp() == broker.clock.now() + 20
    with pytest.raises(MessagingEntityNotFoundError):
        broker.engine.update_entity(queue_definition("missing"))


def test_delete_removes_the_entity_and_its_messages(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a")
    assert broker.engine.delete_entity("Q") is True
    assert broker.engine.delete_entity("q") is False
    with pytest.raises(MessagingEntityNotFoundError):
        broker.engine.get_entity("q")
    assert broker.engine.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    broker.create_queue("q")
    assert broker.send("q", "fresh") == [1]


def test_has_available_tracks_what_a_receive_could_get(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=10)
    broker.create_queue("sq", requires_session=True)
    assert broker.engine.has_available("q", MAIN) is False
    broker.send("q", "a")
    assert broker.engine.has_available("q", MAIN) is True
    broker.receive("q")
    assert broker.engine.has_available("q", MAIN) is False
    broker.clock.advance(10)
    assert broker.engine.has_available("q", MAIN) is True
    broker.send("sq", Message("s", session_id="s1"))
    assert broker.engine.has_available("sq", MAIN, free_session=True) is True
    broker.engine.accept_session("sq", "s1")
    assert broker.engine.has_available("sq", MAIN, free_session=True) is False
    assert broker.engine.has_available("sq", MAIN, session_id="s1") is True


@pytest.mark.rows_only
def test_integrity_check_reports_broken_invariants(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a", "b")
    broker.engine.db.execute("UPDATE messages SET size = size + 1 WHERE seq = 1")
    broker.engine.db.execute("UPDATE messages SET seq = 99 WHERE seq = 2")
    report = broker.engine.integrity_check()
    assert report["ok"] is False
    assert any("size counter" in p for p in report["problems"])
    assert any("sequence 99 not below counter 3" in p for p in report["problems"])
