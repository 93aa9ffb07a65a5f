"""`ray_broker.testing.advance_clock`: a namespace's clock moved forward delivers scheduled
messages, expires messages past their time to live and lapses locks at once, on a namespace of its
own (the shared one keeps the wall clock)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest

import ray_broker as rb
from ray_broker.testing import advance_clock


@pytest.fixture(scope="module")
def ns(ray_instance: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[rb.Namespace]:
    namespace = rb.start("clocked", sku="premium", partitions=2, data_dir=str(tmp_path_factory.mktemp("clocked")),
                         durability="normal")
    yield namespace
    rb.stop("clocked", delete_data=True)


def test_a_message_scheduled_an_hour_ahead_is_delivered_once_the_clock_gets_there(ns: rb.Namespace) -> None:
    ns.create_queue("later", enable_partitioning=True)
    with ns.get_queue_sender("later") as sender:
        sender.schedule_messages(rb.Message("in an hour"), datetime.now(timezone.utc) + timedelta(hours=1))
    with ns.get_queue_receiver("later", max_wait_time=1) as receiver:
        assert receiver.receive_messages(max_wait_time=1) == [], "not yet due"
        advance_clock(ns, timedelta(hours=1, seconds=1))
        received = receiver.receive_messages(max_wait_time=5)
        assert [str(m) for m in received] == ["in an hour"]
        receiver.complete_message(received[0])


def test_a_message_past_its_time_to_live_expires_to_the_dead_letter_queue(ns: rb.Namespace) -> None:
    ns.create_queue("perishable", default_message_time_to_live=timedelta(hours=1),
                    dead_lettering_on_message_expiration=True)
    with ns.get_queue_sender("perishable") as sender:
        sender.send_messages(rb.Message("milk"))
    advance_clock(ns, 7200)
    with ns.get_queue_receiver("perishable", max_wait_time=1) as receiver:
        assert receiver.receive_messages(max_wait_time=1) == []
    with ns.get_queue_receiver("perishable", sub_queue=rb.SubQueue.DEAD_LETTER, max_wait_time=5) as dead:
        expired = dead.receive_messages(max_wait_time=5)
        assert [str(m) for m in expired] == ["milk"]
        dead.complete_message(expired[0])


def test_a_lock_lapses_when_the_clock_passes_it(ns: rb.Namespace) -> None:
    ns.create_queue("locked", lock_duration=timedelta(seconds=30))
    with ns.get_queue_sender("locked") as sender:
        sender.send_messages(rb.Message("held"))
    with pytest.raises(rb.errors.MessageLockLostError):  # the buffered completion's failure, by the close
        with ns.get_queue_receiver("locked", max_wait_time=5) as receiver:
            first = receiver.receive_messages(max_wait_time=5)
            assert len(first) == 1
            advance_clock(ns, 31)
            receiver.complete_message(first[0])
    with ns.get_queue_receiver("locked", max_wait_time=5) as receiver:
        again = receiver.receive_messages(max_wait_time=5)
        assert [(str(m), m.delivery_count) for m in again] == [("held", 2)]
        receiver.complete_message(again[0])


@pytest.mark.parametrize("by", [-1, float("nan"), "1h", True])
def test_the_clock_moves_forward_only(ns: rb.Namespace, by: object) -> None:
    with pytest.raises(rb.errors.InvalidArgumentError, match="moves forward"):
        advance_clock(ns, by)  # type: ignore[arg-type]
