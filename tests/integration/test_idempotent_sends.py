"""Sends are idempotent across retries: a batch sent again with its producer tag (a retry after a
lost reply, through a restarted gateway or to a restarted partition) is stored once, alone or
with other batches in one call."""
from __future__ import annotations

import pytest

import ray_broker as rb
from ray_broker.client.core import envelopes_for_send
from ray_broker.router_requests import SendBatchesRequest, SendRequest

from .helpers import kill_partition, wait_partition_back

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


def test_a_repeated_batch_is_answered_with_its_first_sequence_numbers(namespace: rb.Namespace,
                                                                       queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    keyed = [rb.Message(f"k{i}", partition_key=f"key-{i % 5}") for i in range(20)]
    unkeyed = [rb.Message(f"u{i}") for i in range(20)]
    envelopes = envelopes_for_send(namespace.sku, keyed + unkeyed)
    tag = ("producer-under-test", 7)
    first = namespace._link.route(SendRequest(queue_name, envelopes, 30.0, tag), timeout=30.0)
    again = namespace._link.route(SendRequest(queue_name, envelopes, 30.0, tag), timeout=30.0)
    assert again == first and len(set(first)) == 40
    assert len({rb.partition_of(s) for s in first[20:]}) == 1, "the unkeyed part went to one partition"
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 40
    other = namespace._link.route(SendRequest(queue_name, envelopes, 30.0, ("producer-under-test", 8)), timeout=30.0)
    assert not set(other) & set(first)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 80
    namespace.delete_queue(queue_name)


def test_a_restarted_partition_still_recognizes_the_batch(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    envelopes = envelopes_for_send(namespace.sku, [rb.Message(f"m{i}", partition_key="same") for i in range(10)])
    tag = ("restart-producer", 1)
    first = namespace._link.route(SendRequest(queue_name, envelopes, 30.0, tag), timeout=30.0)
    index = rb.partition_of(first[0])
    old = kill_partition(namespace, index)
    wait_partition_back(namespace, index, old)
    assert namespace._link.route(SendRequest(queue_name, envelopes, 60.0, tag), timeout=60.0) == first
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 10
    namespace.delete_queue(queue_name)


def test_a_named_producer_stores_each_batch_once(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    batch = [rb.Message(f"k{i}", partition_key=f"key-{i % 7}") for i in range(30)] + \
        [rb.Message(f"u{i}") for i in range(30)]
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_idempotent(batch, producer_id="sink-under-test", batch_number=3)
    with namespace.get_queue_sender(queue_name) as replaying:
        replaying.send_idempotent(batch, producer_id="sink-under-test", batch_number=3)
        assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 60
        replaying.send_idempotent(batch[:5], producer_id="sink-under-test", batch_number=4)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 65
    namespace.delete_queue(queue_name)


def test_batches_sent_together_are_each_stored_once_across_a_partition_restart(namespace: rb.Namespace,
                                                                              queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    parts = [(envelopes_for_send(namespace.sku, [rb.Message(f"b{b}-{i}", partition_key="same") for i in range(10)]),
              ("together-producer", b)) for b in range(3)]
    first = namespace._link.route(SendBatchesRequest(queue_name, parts, 30.0), timeout=30.0)
    index = rb.partition_of(first[0][0])
    assert {rb.partition_of(s) for batch in first for s in batch} == {index}
    old = kill_partition(namespace, index)
    wait_partition_back(namespace, index, old)
    assert namespace._link.route(SendBatchesRequest(queue_name, parts[1:], 60.0), timeout=60.0) == first[1:]
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 30
    namespace.delete_queue(queue_name)


def test_a_sender_sends_several_batches_in_one_call(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        batches = []
        for b in range(4):
            batch = sender.create_message_batch()
            for i in range(25):
                batch.add_message(rb.Message(f"{b * 25 + i}", partition_key=f"key-{i % 3}"))
            batches.append(batch)
        sender.send_message_batches(batches + [[rb.Message("unkeyed")], rb.Message("single")])
        with pytest.raises(rb.errors.InvalidArgumentError, match="list of batches"):
            sender.send_message_batches(batches[0])
        with pytest.raises(rb.errors.MessageSizeExceededError):
            sender.send_message_batches([[rb.Message("fits")], [rb.Message(b"x" * 200_000)] * 2])
    with namespace.get_queue_receiver(queue_name, receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE,
                                      max_wait_time=2) as receiver:
        got = [str(m) for m in receiver]
    assert sorted(got) == sorted([str(n) for n in range(100)] + ["unkeyed", "single"])
    for key in range(3):
        ordered = [int(body) for body in got if body.isdigit() and int(body) % 25 % 3 == key]
        assert ordered == sorted(ordered), "each key's messages arrive in the order sent"
    namespace.delete_queue(queue_name)
