"""Code written for the azure-servicebus SDK (7.x) runs with only its imports changed: keyword
names, the namespace as a context manager, and the SDK's queue property fields."""
from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

import ray_broker as rb


def test_the_sdk_send_and_receive_samples_run_as_written(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    servicebus_client = rb.connect(namespace.name)
    with servicebus_client:
        sender = servicebus_client.get_queue_sender(queue_name=queue_name)
        with sender:
            sender.send_messages(rb.Message("Single Message"))
            sender.send_messages([rb.Message("Message in list") for _ in range(10)])
            batch_message = sender.create_message_batch()
            for _ in range(10):
                batch_message.add_message(rb.Message("Message inside a ServiceBusMessageBatch"))
            sender.send_messages(batch_message)

        received: list[str] = []
        receiver = servicebus_client.get_queue_receiver(queue_name=queue_name, max_wait_time=5)
        with receiver:
            while len(received) < 21:
                received_msgs = receiver.receive_messages(max_message_count=10, max_wait_time=5)
                assert received_msgs, f"only {len(received)} of 21 messages came back"
                for msg in received_msgs:
                    received.append(str(msg))
                    receiver.complete_message(msg)

    assert sorted(received) == sorted(["Single Message"] + ["Message in list"] * 10
                                      + ["Message inside a ServiceBusMessageBatch"] * 10)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0
    namespace.delete_queue(queue_name)


def test_the_sdk_management_sample_runs_with_keyword_queue_name(namespace: rb.Namespace, queue_name: str) -> None:
    with rb.connect(namespace.name) as servicebus_mgmt_client:
        servicebus_mgmt_client.create_queue(queue_name=queue_name, max_delivery_count=10,
                                            dead_lettering_on_message_expiration=True)
        queue_properties = servicebus_mgmt_client.get_queue(queue_name=queue_name)
        assert queue_properties.dead_lettering_on_message_expiration is True
        runtime = servicebus_mgmt_client.get_queue_runtime_properties(queue_name=queue_name)
        assert (runtime.name, runtime.total_message_count) == (queue_name, 0)
        queue_properties.max_delivery_count = 11
        servicebus_mgmt_client.update_queue(queue_properties)
        assert servicebus_mgmt_client.get_queue(queue_name).max_delivery_count == 11
        servicebus_mgmt_client.delete_queue(queue_name=queue_name)
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_queue(queue_name)


def test_queue_properties_carry_the_sdk_fields_through_create_get_update(
        namespace: rb.Namespace, queue_name: str) -> None:
    created = namespace.create_queue(queue_name, user_metadata="owner: billing", max_delivery_count=7)
    assert created.user_metadata == "owner: billing"
    assert created.auto_delete_on_idle == timedelta.max
    assert created.max_message_size_in_kilobytes == 256
    assert created.enable_batched_operations is True
    assert created.availability_status == "Available"
    assert namespace.get_queue(queue_name) == created
    assert [q for q in namespace.list_queues() if q.name == queue_name] == [created]

    unchanged = namespace.update_queue(namespace.get_queue(queue_name))
    assert (unchanged.user_metadata, unchanged.max_delivery_count) == ("owner: billing", 7)

    properties = namespace.get_queue(queue_name)
    properties.user_metadata = "owner: payments"
    properties.lock_duration = timedelta(seconds=30)
    updated = namespace.update_queue(properties)
    assert (updated.user_metadata, updated.lock_duration, updated.max_delivery_count) == (
        "owner: payments", timedelta(seconds=30), 7)
    assert namespace.get_queue(queue_name) == updated

    assert namespace.update_queue(queue_name, user_metadata=None).user_metadata is None
    assert namespace.get_queue(queue_name).user_metadata is None

    properties = namespace.get_queue(queue_name)
    properties.max_message_size_in_kilobytes = 1024
    properties.max_delivery_count = 3
    with pytest.raises(rb.errors.InvalidOperationError, match="max_message_size_in_kilobytes"):
        namespace.update_queue(properties)
    assert namespace.get_queue(queue_name).max_delivery_count == 7
    properties = namespace.get_queue(queue_name)
    properties.auto_delete_on_idle = timedelta(hours=1)
    assert namespace.update_queue(properties).auto_delete_on_idle == timedelta(hours=1)

    with pytest.raises(rb.errors.InvalidArgumentError, match="user_metadata"):
        namespace.update_queue(queue_name, user_metadata="m" * 1025)
    namespace.delete_queue(queue_name)
    with pytest.raises(rb.errors.InvalidArgumentError, match="user_metadata"):
        namespace.create_queue(queue_name, user_metadata=42)  # type: ignore[arg-type]
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_queue(queue_name)


def test_closing_the_namespace_handle_closes_its_senders_and_receivers(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    ns = rb.connect(namespace.name)
    sender = ns.get_queue_sender(queue_name)
    sender.send_messages([rb.Message(f"m{i}") for i in range(3)])
    receiver = ns.get_queue_receiver(queue_name, prefetch_count=10)
    first = receiver.receive_messages(max_message_count=1, max_wait_time=5)
    assert len(first) == 1
    with rb.connect(namespace.name) as other, other.get_queue_receiver(queue_name) as probe:
        assert probe.receive_messages(max_message_count=10, max_wait_time=1) == [], \
            "the receiver's prefetch should hold the two other messages"

    ns.close()
    ns.close()
    with pytest.raises(rb.errors.InvalidOperationError, match="sender .* is closed"):
        sender.send_messages(rb.Message("after close"))
    with pytest.raises(rb.errors.InvalidOperationError, match="receiver .* is closed"):
        receiver.receive_messages(max_wait_time=1)

    with ns, ns.get_queue_receiver(queue_name) as again:  # a closed handle opens again on its next use
        released = again.receive_messages(max_message_count=10, max_wait_time=5)
        assert sorted(str(m) for m in released) == sorted({"m0", "m1", "m2"} - {str(first[0])})
        assert all(m.delivery_count == 1 for m in released), [m.delivery_count for m in released]
        for message in released:
            again.complete_message(message)
    namespace.delete_queue(queue_name)


def test_one_client_serves_several_with_blocks_as_the_sdk_samples_use_it(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    servicebus_client = rb.connect(namespace.name)
    with servicebus_client:
        with servicebus_client.get_queue_sender(queue_name=queue_name) as sender:
            sender.send_messages(rb.Message("first block"))
    held = servicebus_client.get_queue_receiver(queue_name=queue_name, max_wait_time=5)
    with servicebus_client:
        with servicebus_client.get_queue_sender(queue_name=queue_name) as sender:
            sender.send_messages(rb.Message("second block"))
        got = held.receive_messages(max_message_count=2, max_wait_time=5)
        while len(got) < 2:
            more = held.receive_messages(max_message_count=2 - len(got), max_wait_time=5)
            assert more, f"only {len(got)} of 2 messages came back"
            got.extend(more)
        for message in got:
            held.complete_message(message)
    assert sorted(str(m) for m in got) == ["first block", "second block"]
    with pytest.raises(rb.errors.InvalidOperationError, match="receiver .* is closed"):
        held.receive_messages(max_wait_time=1)  # leaving the second block closed what it made
    namespace.delete_queue(queue_name)


def test_leaving_with_releases_a_session_receivers_lock(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, requires_session=True)
    with rb.connect(namespace.name) as ns:
        holder = ns.get_queue_receiver(queue_name, session_id="s1")
        assert holder.session is not None and holder.session.session_id == "s1"
        with pytest.raises(rb.errors.SessionCannotBeLockedError):
            with namespace.get_queue_receiver(queue_name, session_id="s1"):
                pass
    with namespace.get_queue_receiver(queue_name, session_id="s1", max_wait_time=5) as taker:
        assert taker.session is not None and taker.session.session_id == "s1"
    namespace.delete_queue(queue_name)


def test_the_namespace_keeps_running_after_close_and_a_pickled_handle_is_open(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    ns = rb.connect(namespace.name)
    with ns:
        pass
    revived = pickle.loads(pickle.dumps(ns))
    with revived, revived.get_queue_sender(queue_name=queue_name) as sender:
        sender.send_messages(rb.Message("from a pickled handle"))
    with rb.connect(namespace.name) as ns2, ns2.get_queue_receiver(queue_name=queue_name) as receiver:
        got = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert [str(m) for m in got] == ["from a pickled handle"]
        receiver.complete_message(got[0])
    namespace.delete_queue(queue_name)
