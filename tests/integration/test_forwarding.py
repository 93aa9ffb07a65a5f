"""Auto-forwarding on a real Ray: destinations checked at create and update, keyed messages kept on
the partition their key selects, a chain that dead-letters at the fifth hop, a queue forwarding to
itself, a session-enabled queue forwarding, subscriptions and dead-letter queues forwarding, and a
destination partition killed while messages wait."""
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
    (target,) = names(queue_name, "target")
    namespace.create_queue(target)
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


def test_a_queue_forwarding_to_itself_dead_letters_each_message_after_the_hops(namespace: rb.Namespace,
                                                                               queue_name: str) -> None:
    looping, both = names(queue_name, "loop", "both")
    properties = namespace.create_queue(looping, enable_partitioning=True, forward_to=looping.upper())
    assert properties.forward_to == looping.upper()
    namespace.create_queue(both)
    namespace.update_queue(both, forward_to=both, forward_dead_lettered_messages_to=both)
    sent = [f"m{i}" for i in range(10)]
    for name in (looping, both):
        with namespace.get_queue_sender(name) as sender:
            sender.send_messages([rb.Message(body, partition_key=body) for body in sent])
    with namespace.get_queue_receiver(looping, sub_queue=rb.SubQueue.DEAD_LETTER, max_wait_time=15) as receiver:
        dead = drain(receiver, expected=len(sent), wait=15)
    assert sorted(m.body.decode() for m in dead) == sent
    assert {m.dead_letter_reason for m in dead} == {"MaxTransferHopCountExceeded"}
    with namespace.get_queue_receiver(both, sub_queue=rb.SubQueue.TRANSFER_DEAD_LETTER,
                                      max_wait_time=15) as receiver:
        dead = drain(receiver, expected=len(sent), wait=15)
    assert sorted(m.body.decode() for m in dead) == sent, "its dead-letter queue cannot forward them once more"
    assert {m.dead_letter_reason for m in dead} == {"MaxTransferHopCountExceeded"}
    for name in (looping, both):
        wait_until(lambda: namespace.get_queue_runtime_properties(name).total_message_count == 0, timeout=15)
        assert namespace.get_queue_runtime_properties(name).size_in_bytes == 0, "nothing left looping"
        namespace.delete_queue(name)


def test_a_session_enabled_queue_forwards_each_message_with_its_session(namespace: rb.Namespace,
                                                                        queue_name: str) -> None:
    source, target = names(queue_name, "src", "dst")
    namespace.create_queue(target, requires_session=True)
    properties = namespace.create_queue(source, requires_session=True, enable_partitioning=True, forward_to=target)
    assert (properties.requires_session, properties.forward_to) == (True, target)
    with namespace.get_queue_sender(source) as sender:
        sender.send_messages([rb.Message(f"{session}-{i}", session_id=session) for i in range(5)
                              for session in ("s1", "s2")])
    with pytest.raises(rb.errors.InvalidOperationError, match="forwards its messages"):
        namespace.get_queue_receiver(source, session_id="s1").receive_messages(1, max_wait_time=1)
    for session in ("s1", "s2"):
        with namespace.get_queue_receiver(target, session_id=session, max_wait_time=15) as receiver:
            arrived = drain(receiver, expected=5, wait=15)
        assert [(m.body.decode(), m.session_id) for m in arrived] == [(f"{session}-{i}", session) for i in range(5)]
    wait_until(lambda: namespace.get_queue_runtime_properties(source).total_message_count == 0, timeout=15)
    namespace.delete_queue(source)
    namespace.delete_queue(target)


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
