"""Restarts: a new engine over the same file store keeps counters, messages, locks and sessions."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from ray_broker import Message
from ray_broker.errors import MessageLockLostError, SessionCannotBeLockedError
from ray_broker.wire import SessionRef

from .conftest import Broker


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the partition's store lives."""
    return tmp_path / "partition-0.sqlite"


@pytest.mark.parametrize("durability", ["normal", "fsync"])
def test_sequence_counter_survives_a_restart(make_broker: Callable[..., Broker], db_path: Path,
                                             durability: str) -> None:
    first = make_broker(index=5, partition_count=8, path=db_path, durability=durability)
    first.create_queue("q", enable_partitioning=True)
    first.send("q", "a", "b", "c")
    for msg in first.receive("q"):
        first.settle("q", "complete", msg)
    first.engine.store.close()
    second = make_broker(index=5, partition_count=8, path=db_path, durability=durability)
    assert second.send("q", "d") == [(5 << 48) | 4]
    assert second.engine.integrity_check() == {"ok": True, "problems": []}


def test_messages_definitions_and_sizes_survive_a_restart(make_broker: Callable[..., Broker], db_path: Path) -> None:
    first = make_broker(path=db_path)
    first.create_queue("q", max_delivery_count=4)
    first.send("q", "a", "b")
    size = first.engine.runtime("q")["size"]
    first.engine.store.close()
    second = make_broker(path=db_path)
    assert second.engine.get_entity("q")["options"]["max_delivery_count"] == 4
    assert second.engine.runtime("q")["size"] == size
    assert second.bodies(second.receive("q")) == [b"a", b"b"]


def test_memory_durability_keeps_nothing(make_broker: Callable[..., Broker], db_path: Path) -> None:
    first = make_broker(path=db_path, durability="memory")
    first.create_queue("q")
    first.engine.store.close()
    assert not db_path.exists()
    assert make_broker(path=db_path, durability="memory").engine.list_entities() == []


def test_a_lock_token_is_honoured_after_a_restart_until_it_expires(make_broker: Callable[..., Broker],
                                                                     db_path: Path) -> None:
    first = make_broker(path=db_path)
    first.create_queue("q", lock_duration=30)
    first.send("q", "a", "b")
    done, late = first.receive("q")
    first.engine.store.close()
    second = make_broker(path=db_path)
    assert second.receive("q") == []
    assert second.settle("q", "complete", done) is None
    second.clock.advance(30)
    assert isinstance(second.settle("q", "complete", late), MessageLockLostError)
    assert [m.sequence_number for m in second.receive("q")] == [late.sequence_number]


def test_a_renewed_lock_survives_a_restart(make_broker: Callable[..., Broker], db_path: Path) -> None:
    first = make_broker(path=db_path)
    first.create_queue("q", lock_duration=30)
    first.send("q", "a")
    (msg,) = first.receive("q")
    first.clock.advance(20)
    first.settle("q", "renew", msg)
    first.engine.store.close()
    second = make_broker(path=db_path)
    second.clock.advance(20)
    assert second.settle("q", "renew", msg) == second.clock.now() + 30


def test_session_lock_and_state_survive_a_restart(make_broker: Callable[..., Broker], db_path: Path) -> None:
    first = make_broker(path=db_path)
    first.create_queue("sq", requires_session=True, lock_duration=30)
    first.send("sq", Message("a1", session_id="a"), Message("a2", session_id="a"))
    got = first.engine.accept_session("sq", "a")
    assert got is not None
    session = SessionRef(got["session_id"], got["lock_token"])
    first.engine.set_session_state("sq", *session, b"state")
    (msg,) = first.receive("sq", 1, session=session)
    first.engine.store.close()
    second = make_broker(path=db_path)
    with pytest.raises(SessionCannotBeLockedError):
        second.engine.accept_session("sq", "a")
    assert second.engine.get_session_state("sq", *session) == b"state"
    assert second.settle("sq", "complete", msg, session=session) is None
    assert second.bodies(second.receive("sq", session=session)) == [b"a2"]
    second.clock.advance(30)
    again = second.engine.accept_session("sq", None)
    assert again is not None
    assert again["session_id"] == "a" and again["lock_token"] != session.lock_token


def test_scheduled_messages_and_duplicate_ids_survive_a_restart(make_broker: Callable[..., Broker],
                                                                db_path: Path) -> None:
    first = make_broker(path=db_path)
    first.create_queue("q", requires_duplicate_detection=True)
    envelope = {**Message("later", message_id="m").to_envelope(), "scheduled": first.clock.now() + 10}
    first.engine.send("q", [envelope])
    first.engine.store.close()
    second = make_broker(path=db_path)
    assert second.send("q", Message("dup", message_id="m")) == [None]
    second.clock.advance(10)
    assert [(m.body, m.sequence_number) for m in second.receive("q")] == [(b"later", 2)]
