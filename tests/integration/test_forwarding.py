"""Auto-forwarding on a real Ray: destinations checked at create and update, keyed messages kept on
the partition their key selects, a chain that dead-letters at the fifth hop, subscriptions and
dead-letter queues forwarding, and a destination partition killed while messages wait."""
from __future__ import annotations

import pytest

import ray_broker as rb
from ray_broker.routing import partition_for_key

from .helpers import drain, kill_partition, wait_partition_back, wait_until


def names(base: str, *suffixes: str) -> list[str]:
    return [f"{base}-{s}" for s in suffixes]


def test_destinations_are_checked_at_create_and_update(namespace: rb.Namespace, queue_name: str) -> None:
    with pytest.raises(rb.errors.MessagingEntityNotFoundError, match="does not exist"):
        namespace.create_queue(queue_name, forward_to=f"{queue_name}-nowhere")
    target, sessions = names(queue_name, "target", "sessions")
    namespace.create_queue(target)
    with pytest.raises(rb.errors.InvalidOperationError, match="requires sessions"):
        namespace.create_queue(sessions, requires_session=True, forward_to=target)
    with pytest.raises(rb.errors.InvalidOperationError, match="itself"):
        namespace.create_queue(queue_name, forward_to=queue_name.upper())
    namespace.create_queue(queue_name)
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.update_queue(queue_name, forward_dead_lettered_messages_to=f"{queue_name}-nowhere")
    properties = namespace.update_queue(queue_name, forward_to=target)
    assert properties.forward_to == target
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages(rb.Message("via update"))
    with namespace.get_queue_receiver(target, max_wait_time=10) as receiver:
        assert [m.body for m in drain(receiver, expected=1, wait=10)] == [b"via update"]
    with pytest.raises(rb.errors.InvalidOperationError, match="forwards its messages"):
        namespace.get_queue_receiver(queue_name).receive_messages(1, max_wait_time=1)
    namespace.delete_queue(queue_name)
    namespace.delete_queue(target)


def test_keyed_messages_keep_their_partition_and_a_chain_stops_at_the_fifth_hop(namespace: rb.Namespace,
                                                                               queue_name: str) -> None:
    chain = names(queue_name, "a", "b", "c", "d", "e", "f")
    namespace.create_queue(chain[-1], enable_partitioning=True)
    for name, nxt in reversed(list(zip(chain, chain[1:]))):
        namespace.create_queue(name, enable_partitioning=True, forward_to=nxt)
    keys = [f"key-{i}" for i in range(8)]
    with namespace.get_queue_sender(chain[1]) as sender:
        sender.send_messages([rb.Message(k, partition_key=k) for k in keys])
    with namespace.get_queue_sender(chain[0]) as sender:
        sender.send_messages(rb.Message("five hops", partition_key="far"))
    with namespace.get_queue_receiver(chain[-1], max_wait_time=15) as receiver:
        arrived = drain(receiver, expected=len(keys), wait=15)
    assert sorted(m.body.decode() for m in arrived) == sorted(keys), "from b: four hops to f"
    for message in arrived:
        assert rb.partition_of(message.sequence_number) == partition_for_key(message.partition_key, 16)
    with namespace.get_queue_receiver(chain[4], sub_queue=rb.SubQueue.DEAD_LETTER, max_wait_time=15) as receiver:
        (dead,) = drain(receiver, expected=1, wait=15)
    assert (dead.body, dead.dead_letter_reason) == (b"five hops", "MaxTransferHopCountExceeded")
    assert rb.partition_of(dead.sequence_number) == partition_for_key("far", 16)
    for name in chain:
        namespace.delete_queue(name)


def test_subscriptions_and_dead_letter_queues_forward(namespace: rb.Namespace, queue_name: str) -> None:
    topic, inbox, poison = names(queue_name, "topic", "inbox", "poison")
    namespace.create_queue(inbox)
    namespace.create_queue(poison)
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "all", forward_to=inbox)
    namespace.create_queue(queue_name, forward_dead_lettered_messages_to=poison)
    with namespace.get_topic_sender(topic) as sender:
        sender.send_messages(rb.Message("published"))
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages(rb.Message("bad"))
    with namespace.get_queue_receiver(queue_name, max_wait_time=5) as receiver:
        (message,) = receiver.receive_messages(1, max_wait_time=5)
        receiver.dead_letter_message(message, reason="unparsable", error_description="not JSON")
    with namespace.get_queue_receiver(inbox, max_wait_time=10) as receiver:
        assert [m.body for m in drain(receiver, expected=1, wait=10)] == [b"published"]
    with namespace.get_queue_receiver(poison, max_wait_time=10) as receiver:
        (dead,) = drain(receiver, expected=1, wait=10)
    assert (dead.body, dead.dead_letter_source, dead.dead_letter_reason) == (b"bad", queue_name, "unparsable")
    # the subscription's copy leaves its outbox once the inbox acknowledged it, just after it arrived
    wait_until(lambda: namespace.get_topic_runtime_properties(topic).size_in_bytes == 0, timeout=10.0)
    namespace.delete_topic(topic)
    for name in (inbox, poison, queue_name):
        namespace.delete_queue(name)


def test_messages_wait_for_a_killed_destination_partition(namespace: rb.Namespace, queue_name: str) -> None:
    source, target = names(queue_name, "src", "dst")
    namespace.create_queue(target)
    namespace.create_queue(source, enable_partitioning=True, forward_to=target)
    home = partition_for_key(f"entity:{target}".lower(), 16)
    old = kill_partition(namespace, home)
    with namespace.get_queue_sender(source) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key=f"k{i}") for i in range(20)])
    wait_partition_back(namespace, home, old)
    with namespace.get_queue_receiver(target, max_wait_time=15) as receiver:
        arrived = drain(receiver, expected=20, wait=15)
    assert sorted(m.body for m in arrived) == sorted(f"m{i}".encode() for i in range(20))
    wait_until(lambda: namespace.get_queue_runtime_properties(source).transfer_message_count == 0, timeout=30)
    namespace.delete_queue(source)
    namespace.delete_queue(target)


def test_a_deleted_destination_sends_messages_to_the_transfer_dead_letter_queue(namespace: rb.Namespace,
                                                                                 queue_name: str) -> None:
    source, target = names(queue_name, "src", "dst")
    namespace.create_queue(target)
    namespace.create_queue(source, forward_to=target)
    namespace.delete_queue(target)
    with namespace.get_queue_sender(source) as sender:
        sender.send_messages(rb.Message("orphan"))
    with namespace.get_queue_receiver(source, sub_queue=rb.SubQueue.TRANSFER_DEAD_LETTER,
                                      max_wait_time=15) as receiver:
        (dead,) = drain(receiver, expected=1, wait=15)
    assert dead.body == b"orphan" and dead.dead_letter_reason == "MessagingEntityNotFound"
    assert namespace.get_queue_runtime_properties(source).transfer_dead_letter_message_count == 0
    namespace.delete_queue(source)
