"""A receive returns what is there across partitions, in one call, on the direct and the relay path."""
from __future__ import annotations

import pytest

import ray_broker as rb


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
