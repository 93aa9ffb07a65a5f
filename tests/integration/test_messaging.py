"""Messaging through the gateway on a partitioned queue: caches, waiting, peek, defer, DLQ, sessions."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

import ray_broker as rb
from ray_broker.client.receiver import abandon_held

from .helpers import drain

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


def test_closing_a_receiver_releases_cached_messages_without_counting_a_delivery(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}") for i in range(40)])
    with namespace.get_queue_receiver(queue_name, prefetch_count=30) as receiver:
        first = receiver.receive_messages(1, max_wait_time=5)
        assert len(first) == 1 and first[0].delivery_count == 1
        receiver.complete_message(first[0])
    with namespace.get_queue_receiver(queue_name) as receiver:
        rest = drain(receiver, expected=39)
    assert len(rest) == 39
    assert all(m.delivery_count == 1 for m in rest), [m.delivery_count for m in rest]
    namespace.delete_queue(queue_name)


def test_a_waiting_receive_is_woken_by_a_send(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    received: list[rb.ReceivedMessage] = []
    with namespace.get_queue_receiver(queue_name) as receiver:
        receiver.receive_messages(1, max_wait_time=0)
        waiter = threading.Thread(target=lambda: received.extend(receiver.receive_messages(1, max_wait_time=60)))
        started = time.monotonic()
        waiter.start()
        time.sleep(1.0)
        with namespace.get_queue_sender(queue_name) as sender:
            sender.send_messages(rb.Message(b"wake up", partition_key="k"))
        waiter.join(90)
        elapsed = time.monotonic() - started
        assert [m.body for m in received] == [b"wake up"]
        assert elapsed < 60, "the receive ran out its wait instead of being woken"
        receiver.complete_message(received[0])
    namespace.delete_queue(queue_name)


def test_peek_browses_all_partitions_in_sequence_order(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        for i in range(16):
            sender.send_messages([rb.Message(f"{i}-{j}") for j in range(3)])
    with namespace.get_queue_receiver(queue_name) as receiver:
        pages = [receiver.peek_messages(10) for _ in range(6)]
    seqs = [m.sequence_number for page in pages for m in page]
    assert len(seqs) == 48 and seqs == sorted(seqs)
    assert all(m.lock_token is None and m.locked_until_utc is None for page in pages for m in page)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 48
    namespace.delete_queue(queue_name)


def test_peek_up_to_a_partitions_next_sequence_number_sees_what_it_held(namespace: rb.Namespace,
                                                                        queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key="k") for i in range(5)])
        held = next(p for p in namespace.get_queue_runtime_properties(queue_name).partitions
                    if p.active_message_count)
        sender.send_messages([rb.Message(f"later{i}", partition_key="k") for i in range(5)])
    start = rb.partition_of(held.next_sequence_number) << 48
    with namespace.get_queue_receiver(queue_name) as receiver:
        first = receiver.peek_messages(3, sequence_number=start, end_sequence_number=held.next_sequence_number)
        rest = receiver.peek_messages(10, end_sequence_number=held.next_sequence_number)
        with pytest.raises(rb.errors.InvalidArgumentError):
            receiver.peek_messages(1, end_sequence_number=-1)
    assert [m.body for m in first + rest] == [f"m{i}".encode() for i in range(5)]
    assert {rb.partition_of(m.sequence_number) for m in first + rest} == {held.index}
    namespace.delete_queue(queue_name)


def test_receivers_sharing_out_the_partitions_each_get_only_their_own(namespace: rb.Namespace,
                                                                      queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key=f"k{i}") for i in range(64)])
    count = namespace.partition_count
    got: list[list[rb.ReceivedMessage]] = []
    for share in (range(0, count, 2), range(1, count, 2)):
        with namespace.get_queue_receiver(queue_name, partitions=share, max_wait_time=1) as receiver:
            mine = drain(receiver, expected=None)
            assert {rb.partition_of(m.sequence_number) for m in mine} <= set(share)
            got.append(mine)
    assert sorted(m.body for part in got for m in part) == sorted(f"m{i}".encode() for i in range(64))
    with pytest.raises(rb.errors.InvalidArgumentError, match="partitions"):
        namespace.get_queue_receiver(queue_name, partitions=[count])
    namespace.delete_queue(queue_name)


def test_defer_and_receive_deferred_across_partitions(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key=f"k{i}") for i in range(12)])
    with namespace.get_queue_receiver(queue_name) as receiver:
        got = drain_without_completing(receiver, 12)
        for message in got:
            receiver.defer_message(message)
        assert receiver.receive_messages(10, max_wait_time=1) == []
        deferred = receiver.receive_deferred_messages([m.sequence_number for m in got])
        assert sorted(m.sequence_number for m in deferred) == sorted(m.sequence_number for m in got)
        assert len({rb.partition_of(m.sequence_number) for m in deferred}) > 1
        assert all(m.state == rb.MessageState.DEFERRED for m in deferred)
        for message in deferred:
            receiver.complete_message(message)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0
    namespace.delete_queue(queue_name)


def drain_without_completing(receiver: rb.Receiver, count: int) -> list[rb.ReceivedMessage]:
    got: list[rb.ReceivedMessage] = []
    while len(got) < count:
        batch = receiver.receive_messages(count - len(got), max_wait_time=5)
        assert batch, f"only {len(got)} of {count} arrived"
        got.extend(batch)
    return got


def test_dead_letter_queue_by_path_and_sub_queue(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"bad{i}") for i in range(5)])
    with namespace.get_queue_receiver(queue_name) as receiver:
        for message in drain_without_completing(receiver, 5):
            receiver.dead_letter_message(message, reason="Invalid", error_description="bad payload")
    runtime = namespace.get_queue_runtime_properties(queue_name)
    assert runtime.dead_letter_message_count == 5 and runtime.active_message_count == 0
    with namespace.get_queue_receiver(f"{queue_name}/$deadletterqueue") as dlq:
        dead = drain_without_completing(dlq, 3)
        assert all(m.dead_letter_reason == "Invalid" and m.dead_letter_error_description == "bad payload" for m in dead)
        for message in dead:
            dlq.complete_message(message)
    with namespace.get_queue_receiver(queue_name, sub_queue=rb.SubQueue.DEAD_LETTER) as dlq:
        assert len(drain(dlq)) == 2
    assert namespace.get_queue_runtime_properties(queue_name).total_message_count == 0
    namespace.delete_queue(queue_name)


def test_receive_and_delete_and_settling_rules(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}") for i in range(6)])
    with namespace.get_queue_receiver(queue_name, receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE) as receiver:
        taken = drain_without_completing(receiver, 2)
        with pytest.raises(rb.errors.MessageAlreadySettled):
            receiver.complete_message(taken[0])
    with namespace.get_queue_receiver(queue_name) as first, namespace.get_queue_receiver(queue_name) as second:
        message = first.receive_messages(1, max_wait_time=5)[0]
        with pytest.raises(rb.errors.InvalidOperationError):
            second.complete_message(message)
        first.complete_message(message)
        with pytest.raises(rb.errors.MessageAlreadySettled):
            first.complete_message(message)
        with pytest.raises(rb.errors.MessageAlreadySettled):
            first.abandon_message(message)
        other = first.receive_messages(1, max_wait_time=5)[0]
        until = first.renew_message_lock(other)
        assert until > datetime.now(timezone.utc) + timedelta(seconds=50)
        first.abandon_message(other)
        again = first.receive_messages(1, max_wait_time=5)[0]
        while again.sequence_number != other.sequence_number:
            first.complete_message(again)
            again = first.receive_messages(1, max_wait_time=5)[0]
        assert again.delivery_count == 2
        first.complete_message(again)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count <= 2
    namespace.delete_queue(queue_name)


def test_lost_lock_raises(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True, lock_duration=timedelta(seconds=1))
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages(rb.Message(b"slow"))
    with namespace.get_queue_receiver(queue_name) as receiver:
        message = receiver.receive_messages(1, max_wait_time=5)[0]
        time.sleep(1.5)
        with pytest.raises(rb.errors.MessageLockLostError):
            receiver.complete_message(message)
        again = receiver.receive_messages(1, max_wait_time=5)[0]
        assert again.sequence_number == message.sequence_number and again.delivery_count == 2
        receiver.complete_message(again)
    namespace.delete_queue(queue_name)


def test_abandon_held_passes_over_a_lapsed_lock_and_abandons_the_rest(namespace: rb.Namespace,
                                                                     queue_name: str) -> None:
    """What `receive --no-complete` and resubmitting do at their end: a held message whose lock lapsed
    is back on the queue already; the others held are abandoned, one delivery counted."""
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=1))
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(b"lapsed"), rb.Message(b"renewed")])
    with namespace.get_queue_receiver(queue_name) as receiver:
        held = receiver.receive_messages(2, max_wait_time=5)
        assert [m.body for m in held] == [b"lapsed", b"renewed"]
        renewed = held[1]
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # keep one lock, let the other lapse
            receiver.renew_message_lock(renewed)
            time.sleep(0.3)
        abandon_held(receiver, held)
        with pytest.raises(rb.errors.MessageAlreadySettled):  # abandoned, though the lapsed one came first
            receiver.complete_message(renewed)
        back = {m.body: m.delivery_count for m in drain(receiver, expected=2, wait=5)}
    namespace.delete_queue(queue_name)
    assert back == {b"lapsed": 2, b"renewed": 2}


def test_scheduled_messages_and_cancel(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with namespace.get_queue_sender(queue_name) as sender:
        seqs = sender.schedule_messages([rb.Message(f"s{i}") for i in range(3)], later)
        sender.schedule_messages(rb.Message(b"soon"), soon)
        assert namespace.get_queue_runtime_properties(queue_name).scheduled_message_count == 4
        sender.cancel_scheduled_messages(seqs)
        with pytest.raises(rb.errors.MessageNotFoundError):
            sender.cancel_scheduled_messages(seqs[0])
    with namespace.get_queue_receiver(queue_name) as receiver:
        got = receiver.receive_messages(1, max_wait_time=30)
        assert [m.body for m in got] == [b"soon"]
        receiver.complete_message(got[0])
    assert namespace.get_queue_runtime_properties(queue_name).total_message_count == 0
    namespace.delete_queue(queue_name)


def test_sessions_on_a_partitioned_queue(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True, requires_session=True)
    sessions = [f"session-{i}" for i in range(4)]
    with namespace.get_queue_sender(queue_name) as sender:
        for n in range(5):
            sender.send_messages([rb.Message(f"{s}:{n}", session_id=s) for s in sessions])
    with namespace.get_queue_receiver(queue_name, session_id="session-2") as receiver:
        assert receiver.session is not None and receiver.session.session_id == "session-2"
        with pytest.raises(rb.errors.SessionCannotBeLockedError):
            with namespace.get_queue_receiver(queue_name, session_id="session-2", max_wait_time=1):
                pass
        bodies = [m.body for m in drain(receiver)]
        assert bodies == [f"session-2:{n}".encode() for n in range(5)]
        receiver.session.set_state(b"checkpoint")
        assert receiver.session.get_state() == b"checkpoint"
        assert receiver.session.renew_lock() > datetime.now(timezone.utc)
    seen = set()
    for _ in range(3):
        with namespace.get_queue_receiver(queue_name, session_id=rb.NEXT_AVAILABLE_SESSION, max_wait_time=5) as receiver:
            assert receiver.session is not None
            seen.add(receiver.session.session_id)
            assert [m.body for m in drain(receiver)] == [f"{receiver.session.session_id}:{n}".encode() for n in range(5)]
    assert seen == {"session-0", "session-1", "session-3"}
    with pytest.raises(rb.errors.OperationTimeoutError):
        with namespace.get_queue_receiver(queue_name, session_id=rb.NEXT_AVAILABLE_SESSION, max_wait_time=1):
            pass
    with pytest.raises(rb.errors.InvalidOperationError):
        with namespace.get_queue_receiver(queue_name) as plain:
            plain.receive_messages(1, max_wait_time=0)
    namespace.delete_queue(queue_name)


def test_duplicate_detection_through_the_gateway(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True, requires_duplicate_detection=True)
    with namespace.get_queue_sender(queue_name) as sender:
        for _ in range(3):
            sender.send_messages([rb.Message(f"m{i}", message_id=f"id-{i}") for i in range(10)])
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 10
    namespace.delete_queue(queue_name)
