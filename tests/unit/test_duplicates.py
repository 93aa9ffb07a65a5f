"""Duplicate detection: MessageId (plus partition key when partitioned) within a time window."""
from __future__ import annotations

from typing import Callable

from ray_broker import Message

from .conftest import Broker

WINDOW = 60.0


def dedup_rows(broker: Broker) -> int:
    """How many message ids the partition remembers."""
    return int(broker.engine.db.execute("SELECT COUNT(*) FROM dedup").fetchone()[0])


def test_a_duplicate_is_accepted_and_dropped(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True, duplicate_detection_history_time_window=WINDOW)
    assert broker.send("q", Message("a", message_id="m1")) == [1]
    assert broker.send("q", Message("a again", message_id="m1")) == [None]
    assert broker.send("q", Message("b", message_id="m2"), Message("b again", message_id="m2")) == [2, None]
    assert broker.bodies(broker.receive("q")) == [b"a", b"b"]


def test_duplicates_consume_no_sequence_numbers(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    assert broker.send("q", Message("a", message_id="m"), Message("a", message_id="m"), Message("b")) == [1, None, 2]
    assert broker.engine.runtime("q")["active"] == 2


def test_an_id_is_accepted_again_after_the_window(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True, duplicate_detection_history_time_window=WINDOW)
    broker.send("q", Message("a", message_id="m"))
    broker.clock.advance(WINDOW - 1)
    assert broker.send("q", Message("a", message_id="m")) == [None]
    broker.clock.advance(1)
    assert broker.send("q", Message("a", message_id="m")) == [2]


def test_the_window_counts_from_the_first_accepted_copy(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True, duplicate_detection_history_time_window=WINDOW)
    broker.send("q", Message("a", message_id="m"))
    broker.clock.advance(WINDOW / 2)
    broker.send("q", Message("a", message_id="m"))
    broker.clock.advance(WINDOW / 2)
    assert broker.send("q", Message("a", message_id="m")) == [2]


def test_completing_a_message_does_not_forget_its_id(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    broker.send("q", Message("a", message_id="m"))
    (msg,) = broker.receive("q")
    broker.settle("q", "complete", msg)
    assert broker.send("q", Message("a", message_id="m")) == [None]


def test_messages_without_an_id_are_never_duplicates(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    assert broker.send("q", "a", "a") == [1, 2]


def test_without_duplicate_detection_every_copy_is_kept(broker: Broker) -> None:
    broker.create_queue("q")
    assert broker.send("q", Message("a", message_id="m"), Message("a", message_id="m")) == [1, 2]
    assert dedup_rows(broker) == 0


def test_scheduled_messages_take_part(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    envelope = {**Message("later", message_id="m").to_envelope(), "scheduled": broker.clock.now() + 30}
    assert broker.engine.send("q", [envelope]) == [1]
    assert broker.send("q", Message("now", message_id="m")) == [None]


def test_non_partitioned_entities_compare_message_id_only(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    assert broker.send("q", Message("a", message_id="m", partition_key="k1")) == [1]
    assert broker.send("q", Message("b", message_id="m", partition_key="k2")) == [None]


def test_partitioned_entities_compare_message_id_and_partition_key(make_broker: Callable[..., Broker]) -> None:
    b = make_broker(index=1, partition_count=2)
    b.create_queue("q", enable_partitioning=True, requires_duplicate_detection=True)
    base = 1 << 48
    assert b.send("q", Message("a", message_id="m", partition_key="k1")) == [base | 1]
    assert b.send("q", Message("b", message_id="m", partition_key="k2")) == [base | 2]
    assert b.send("q", Message("c", message_id="m", partition_key="k1")) == [None]
    assert b.send("q", Message("d", message_id="m")) == [base | 3]


def test_partitioned_session_messages_use_the_session_id_as_partition_key(make_broker: Callable[..., Broker]) -> None:
    b = make_broker(index=1, partition_count=2)
    b.create_queue("q", enable_partitioning=True, requires_session=True, requires_duplicate_detection=True)
    assert b.send("q", Message("a", message_id="m", session_id="s1")) == [(1 << 48) | 1]
    assert b.send("q", Message("b", message_id="m", session_id="s2")) == [(1 << 48) | 2]
    assert b.send("q", Message("c", message_id="m", session_id="s1", partition_key="s1")) == [None]


def test_housekeeping_prunes_expired_ids(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True, duplicate_detection_history_time_window=WINDOW)
    broker.send("q", Message("a", message_id="m1"), Message("b", message_id="m2"))
    broker.clock.advance(WINDOW / 2)
    broker.send("q", Message("c", message_id="m3"))
    broker.engine.housekeeping()
    assert dedup_rows(broker) == 3
    broker.clock.advance(WINDOW / 2)
    broker.engine.housekeeping()
    assert dedup_rows(broker) == 1
    broker.clock.advance(WINDOW / 2)
    broker.engine.housekeeping()
    assert dedup_rows(broker) == 0
