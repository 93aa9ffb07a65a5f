"""Runs: a large plain batch shares one row and one body until its messages must differ."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message
from ray_broker.engine.messages import RUN_MAX, RUN_MIN
from ray_broker.engine.partition import DEAD_LETTER, MAIN, RECEIVE_AND_DELETE
from ray_broker.errors import MessageLockLostError
from ray_broker.message import ReceivedMessage
from ray_broker.wire import Settlement

from .conftest import Broker

BATCH = 2 * RUN_MIN


@pytest.fixture
def layout() -> str:
    """These tests are about runs as the engine forms them (from `RUN_MIN` messages on)."""
    return "rows"


def send_batch(broker: Broker, count: int = BATCH, entity: str = "q", **fields: Any) -> list[int | None]:
    """Send `count` messages with bodies "0", "1", ... in one call."""
    return broker.engine.send(entity, [Message(str(i), **fields).to_envelope() for i in range(count)])


def rows(broker: Broker, table: str = "messages") -> int:
    """How many rows a table of the store holds."""
    return int(broker.engine.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def complete(broker: Broker, messages: list[ReceivedMessage]) -> list[Any]:
    """Complete messages in one settle call."""
    assert all(m.lock_token is not None for m in messages)
    return broker.engine.settle("q", MAIN, [Settlement("complete", m.sequence_number, m.lock_token.bytes)  # type: ignore[union-attr]
                                            for m in messages])


def assert_sound(broker: Broker) -> None:
    """The store and the engine's figures agree."""
    assert broker.engine.integrity_check() == {"ok": True, "problems": []}


def test_a_large_plain_batch_is_one_row_and_one_body(broker: Broker) -> None:
    broker.create_queue("q")
    assert send_batch(broker) == list(range(1, BATCH + 1))
    assert (rows(broker), rows(broker, "bodies")) == (1, 1)
    assert broker.engine.runtime("q")["active"] == BATCH
    got = broker.receive("q", BATCH)
    assert broker.bodies(got) == [str(i).encode() for i in range(BATCH)]
    assert [m.sequence_number for m in got] == list(range(1, BATCH + 1))
    assert len({m.lock_token for m in got}) == BATCH
    assert complete(broker, got) == [None] * BATCH
    assert (rows(broker), rows(broker, "bodies")) == (0, 0)
    assert broker.engine.runtime("q")["size"] == 0
    assert_sound(broker)


def test_small_batches_sessions_and_schedules_stay_rows(broker: Broker) -> None:
    broker.create_queue("q")
    broker.create_queue("s", requires_session=True)
    send_batch(broker, RUN_MIN - 1)
    send_batch(broker, BATCH, "s", session_id="a")
    broker.engine.send("q", [{**Message(str(i)).to_envelope(), "scheduled": broker.clock.now() + 60}
                             for i in range(BATCH)])
    assert rows(broker) == RUN_MIN - 1 + 2 * BATCH


def test_a_receive_of_part_of_a_run_cuts_it(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker)
    first = broker.receive("q", 5)
    assert broker.bodies(first) == [b"0", b"1", b"2", b"3", b"4"]
    rest = broker.receive("q", BATCH)
    assert broker.bodies(rest) == [str(i).encode() for i in range(5, BATCH)]
    assert complete(broker, rest) == [None] * (BATCH - 5)
    assert complete(broker, first) == [None] * 5
    assert (rows(broker), rows(broker, "bodies")) == (0, 0)
    assert_sound(broker)


def test_settling_some_messages_of_a_run_leaves_the_others_locked(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=30)
    send_batch(broker)
    got = broker.receive("q", BATCH)
    assert complete(broker, got[3:6]) == [None] * 3
    assert broker.settle("q", "abandon", got[10]) is None
    assert broker.settle("q", "defer", got[11]) is None
    assert broker.settle("q", "dead_letter", got[12], reason="bad") is None
    assert isinstance(broker.settle("q", "renew", got[13]), float)
    assert broker.bodies(broker.receive("q")) == [b"10"]
    assert broker.engine.runtime("q")["dead_letter"] == 1
    assert broker.bodies(broker.receive("q", subq=DEAD_LETTER)) == [b"12"]
    (deferred,) = broker.engine.receive_deferred("q", MAIN, [got[11].sequence_number])
    assert ReceivedMessage(deferred).body == b"11"
    left = [m for i, m in enumerate(got) if i not in (3, 4, 5, 10, 11, 12)]
    assert complete(broker, left) == [None] * len(left)
    assert broker.engine.runtime("q")["active"] == 2
    assert_sound(broker)


def test_a_stale_token_inside_a_run_is_refused(broker: Broker) -> None:
    broker.create_queue("q", lock_duration=10)
    send_batch(broker)
    got = broker.receive("q", BATCH)
    broker.clock.advance(10)
    again = broker.receive("q", BATCH)
    assert [m.delivery_count for m in again] == [2] * BATCH
    results = complete(broker, got[:2])
    assert all(isinstance(r, MessageLockLostError) for r in results)
    assert complete(broker, again) == [None] * BATCH
    assert complete(broker, again[:1]) == [None]
    assert rows(broker) == 0


def test_receive_and_delete_takes_runs_whole_or_in_part(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker)
    first = broker.receive("q", 3, mode=RECEIVE_AND_DELETE)
    rest = broker.receive("q", BATCH, mode=RECEIVE_AND_DELETE)
    assert broker.bodies(first + rest) == [str(i).encode() for i in range(BATCH)]
    assert (rows(broker), rows(broker, "bodies")) == (0, 0)
    assert_sound(broker)


def test_peek_reads_into_a_run_without_cutting_it(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker)
    peeked = broker.peek("q", from_sequence=7, max_count=3)
    assert [m.sequence_number for m in peeked] == [7, 8, 9]
    assert broker.bodies(peeked) == [b"6", b"7", b"8"]
    assert all(m.lock_token is None for m in peeked)
    assert rows(broker) == 1


def test_peek_stops_before_its_end_inside_a_run(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker)
    end = broker.engine.runtime("q")["next_sequence"]
    send_batch(broker)
    assert [m.sequence_number for m in broker.peek("q", from_sequence=5, to_sequence=9)] == [5, 6, 7, 8]
    assert [m.sequence_number for m in broker.peek("q", from_sequence=1, to_sequence=end)] == list(range(1, end))
    assert broker.peek("q", from_sequence=end, to_sequence=end) == []
    assert len(broker.peek("q", from_sequence=1, max_count=3 * BATCH)) == 2 * BATCH


def test_a_run_expires_whole(broker: Broker) -> None:
    broker.create_queue("q", default_message_time_to_live=60)
    broker.create_queue("dl", default_message_time_to_live=60, dead_lettering_on_message_expiration=True)
    send_batch(broker)
    send_batch(broker, entity="dl")
    broker.clock.advance(61)
    assert broker.engine.housekeeping() is True
    assert broker.engine.runtime("q")["active"] == 0
    assert broker.engine.runtime("dl")["dead_letter"] == BATCH
    got = broker.receive("dl", 5, subq=DEAD_LETTER)
    assert [m.dead_letter_reason for m in got] == ["TTLExpiredException"] * 5
    assert_sound(broker)


def test_a_run_over_its_delivery_count_is_dead_lettered(broker: Broker) -> None:
    broker.create_queue("q", max_delivery_count=1, lock_duration=5)
    send_batch(broker)
    broker.receive("q", BATCH)
    broker.clock.advance(5)
    assert broker.receive("q", BATCH) == []
    assert broker.engine.runtime("q")["dead_letter"] == BATCH


def test_a_locked_run_survives_a_restart(make_broker: Callable[..., Broker], tmp_path: Path) -> None:
    path = tmp_path / "partition-0.sqlite"
    first = make_broker(path=path)
    first.create_queue("q", lock_duration=30)
    send_batch(first)
    got = first.receive("q", BATCH)
    first.engine.store.close()
    second = make_broker(path=path)
    ops = [Settlement("complete", m.sequence_number, m.lock_token.bytes) for m in got[::2]]  # type: ignore[union-attr]
    assert second.engine.settle("q", MAIN, ops) == [None] * len(ops)
    assert second.engine.runtime("q")["active"] == BATCH // 2
    assert_sound(second)


def test_a_batch_beyond_the_largest_run_makes_several(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker, RUN_MAX + RUN_MIN)
    assert rows(broker) == 2
    got = broker.receive("q", RUN_MAX + RUN_MIN)
    assert [m.sequence_number for m in got] == list(range(1, RUN_MAX + RUN_MIN + 1))
    assert complete(broker, got) == [None] * len(got)
    assert rows(broker, "bodies") == 0


def test_deleting_an_entity_removes_its_runs(broker: Broker) -> None:
    broker.create_queue("q")
    broker.create_queue("kept")
    send_batch(broker)
    send_batch(broker, entity="kept")
    broker.engine.delete_entity("q")
    assert (rows(broker), rows(broker, "bodies")) == (1, 1)
    assert len(broker.receive("kept", BATCH)) == BATCH


def test_messages_of_a_run_read_like_rows(broker: Broker) -> None:
    broker.create_queue("q")
    send_batch(broker, RUN_MIN, message_id="same")
    (one,) = broker.receive("q", 1)
    assert one.message_id == "same" and one.delivery_count == 1
    assert one.enqueued_sequence_number == one.sequence_number == 1
