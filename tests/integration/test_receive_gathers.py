"""A receive returns what is there across partitions, in one call, on the direct and the relay path."""
from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

import ray_broker as rb


def send(namespace: rb.Namespace, queue: str, messages: list[rb.Message]) -> None:
    with namespace.get_queue_sender(queue) as sender:
        sender.send_messages(messages)


def receive_one_while(receiver: rb.Receiver, act: Callable[[], None]) -> list[rb.ReceivedMessage]:
    """Start a receive of one message, let it wait a second, `act`, and return what it got."""
    got: list[rb.ReceivedMessage] = []
    thread = threading.Thread(target=lambda: got.extend(receiver.receive_messages(1, max_wait_time=20)))
    thread.start()
    time.sleep(1.0)
    act()
    thread.join(timeout=20)
    return got


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "relay"])
def test_a_receive_of_n_gathers_from_every_partition(namespace: rb.Namespace, queue_name: str, relay: bool) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        for i in range(24):
            sender.send_messages(rb.Message(f"m{i}", partition_key=f"key-{i}"))
    reader = rb.Namespace(namespace.config, relay=relay)
    with reader.get_queue_receiver(queue_name, max_wait_time=5) as receiver:
        first = receiver.receive_messages(10, max_wait_time=5)
        assert len(first) == 10
        assert len({m.partition_index for m in first}) > 1, "gathered from several partitions"
        second = receiver.receive_messages(20, max_wait_time=5)
        assert len(second) == 14
        for message in first + second:
            receiver.complete_message(message)
    assert sorted(m.body for m in first + second) == sorted(f"m{i}".encode() for i in range(24))
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0


def test_waits_under_way_end_when_the_receiver_closes(namespace: rb.Namespace, queue_name: str) -> None:
    """A receiver woken by one partition still waits on the others; closing it ends those waits at
    once and releases whatever they locked, so nothing is held and no delivery is counted."""
    namespace.create_queue(queue_name, enable_partitioning=True)
    waiting = namespace.get_queue_receiver(queue_name, max_wait_time=20)
    got = receive_one_while(waiting, lambda: send(namespace, queue_name, [rb.Message("first", partition_key="a")]))
    assert [m.body for m in got] == [b"first"]
    began = time.monotonic()
    waiting.complete_message(got[0])
    waiting.close()
    assert time.monotonic() - began < 3.0, "closing ended the waits still under way"
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"later-{i}", partition_key=f"k{i}") for i in range(20)])
    with namespace.get_queue_receiver(queue_name, max_wait_time=5) as receiver:
        later = receiver.receive_messages(20, max_wait_time=5)
        while len(later) < 20:
            more = receiver.receive_messages(20 - len(later), max_wait_time=5)
            assert more, f"only {len(later)} of 20 came back"
            later.extend(more)
        assert all(m.delivery_count == 1 for m in later), "no delivery was counted by the closed receiver"
        for message in later:
            receiver.complete_message(message)


def test_a_wait_locks_only_what_the_receive_wants(namespace: rb.Namespace, queue_name: str) -> None:
    """On an entity's only partition, the wake-up brings what the waiting receive asked for and no
    more: the other messages stay free for other receivers at once."""
    namespace.create_queue(queue_name)
    waiting = namespace.get_queue_receiver(queue_name, max_wait_time=20)
    got = receive_one_while(waiting, lambda: send(namespace, queue_name, [rb.Message(f"m{i}") for i in range(3)]))
    assert len(got) == 1
    with namespace.get_queue_receiver(queue_name, max_wait_time=5) as other:
        rest = other.receive_messages(5, max_wait_time=5)
        assert sorted(m.body for m in rest) == sorted({b"m0", b"m1", b"m2"} - {got[0].body})
        assert all(m.delivery_count == 1 for m in rest)
        for message in rest:
            other.complete_message(message)
    waiting.complete_message(got[0])
    waiting.close()
