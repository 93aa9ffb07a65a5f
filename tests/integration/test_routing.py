"""Routing on a real namespace: keys pin partitions, unkeyed batches go round robin over the
partitions (runs of `sticky_batches` when a sender asks for them), sessions agree with keys."""
from __future__ import annotations

import pytest
import ray

import ray_broker as rb
from ray_broker.routing import partition_for_key

from .helpers import drain

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


def test_same_key_always_lands_on_the_same_partition(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    keys = [f"customer-{i}" for i in range(20)]
    with namespace.get_queue_sender(queue_name) as sender:
        for round_ in range(3):
            sender.send_messages([rb.Message(f"{k}/{round_}", partition_key=k) for k in keys])
    with namespace.get_queue_receiver(queue_name) as receiver:
        got = drain(receiver, expected=60)
    assert len(got) == 60
    seen: dict[str, set[int]] = {}
    for message in got:
        seen.setdefault(message.partition_key, set()).add(rb.partition_of(message.sequence_number))
    for key, partitions in seen.items():
        assert partitions == {partition_for_key(key, 16)}
    assert len({p for ps in seen.values() for p in ps}) > 1
    namespace.delete_queue(queue_name)


def partition_counts(namespace: rb.Namespace, queue_name: str) -> list[int]:
    runtime = namespace.get_queue_runtime_properties(queue_name)
    assert runtime.availability == "Available" and [p.index for p in runtime.partitions] == list(range(16))
    return [p.active_message_count for p in runtime.partitions]


def test_unkeyed_sends_go_round_robin_over_all_16_partitions(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        for n in range(16):
            sender.send_messages(rb.Message(f"single-{n}"))
        assert partition_counts(namespace, queue_name) == [1] * 16, "16 single sends, 16 partitions"
        for batch in range(64):
            sender.send_messages([rb.Message(f"{batch}-{i}") for i in range(2)])
        assert partition_counts(namespace, queue_name) == [9] * 16, "64 sends, 4 on each partition"
        sender.send_message_batches([[rb.Message(f"b{b}-{i}") for i in range(3)] for b in range(16)])
    assert partition_counts(namespace, queue_name) == [12] * 16, "one call's 16 batches, one on each"
    namespace.delete_queue(queue_name)


def test_a_sticky_sender_sends_runs_of_batches_to_one_partition(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name, sticky_batches=4) as sender:
        for n in range(4):
            sender.send_messages(rb.Message(f"first-{n}"))
        assert sorted(partition_counts(namespace, queue_name)) == [0] * 15 + [4], "4 sends, one partition"
        for n in range(60):
            sender.send_messages(rb.Message(f"more-{n}"))
    assert partition_counts(namespace, queue_name) == [4] * 16, "runs of 4 went round all 16"
    with pytest.raises(rb.errors.InvalidArgumentError, match="sticky_batches"):
        namespace.get_topic_sender(queue_name, sticky_batches=0)
    namespace.delete_queue(queue_name)


def test_one_batch_is_one_partition_call(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(str(i)) for i in range(50)])
    counts = [p.active_message_count for p in namespace.get_queue_runtime_properties(queue_name).partitions]
    assert sorted(counts)[-1] == 50 and sum(counts) == 50
    namespace.delete_queue(queue_name)


def test_session_id_with_a_different_partition_key_is_invalid(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True, requires_session=True)
    with pytest.raises(rb.errors.InvalidOperationError):
        rb.Message(b"x", session_id="s1", partition_key="other")
    message = rb.Message(b"x", session_id="s1")
    message.partition_key = "other"
    with namespace.get_queue_sender(queue_name) as sender:
        with pytest.raises(rb.errors.InvalidOperationError):
            sender.send_messages(message)
        sender.send_messages(rb.Message(b"ok", session_id="s1", partition_key="s1"))
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 1
    namespace.delete_queue(queue_name)


def test_non_partitioned_queue_lives_on_one_partition(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    with namespace.get_queue_sender(queue_name) as sender:
        for i in range(4):
            sender.send_messages([rb.Message(f"{i}-{j}") for j in range(5)])
    runtime = namespace.get_queue_runtime_properties(queue_name)
    assert len(runtime.partitions) == 1 and runtime.active_message_count == 20
    with namespace.get_queue_receiver(queue_name) as receiver:
        got = drain(receiver, expected=20)
    assert [m.sequence_number for m in got] == list(range(1, 21))
    namespace.delete_queue(queue_name)


@ray.remote
def _send_from_task(ns: rb.Namespace, queue: str, count: int) -> int:
    with ns.get_queue_sender(queue) as sender:
        sender.send_messages([rb.Message(f"task-{i}") for i in range(count)])
    return count


def test_namespace_handle_travels_into_tasks(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    sent = sum(ray.get([_send_from_task.remote(namespace, queue_name, 25) for _ in range(4)]))
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == sent == 100
    again = rb.connect(namespace.name)
    assert again.partition_count == 16 and again.name == namespace.name
    assert rb.start(namespace.name).config == namespace.config
    namespace.delete_queue(queue_name)
