"""Every bad input gets a typed error with a useful message, and the namespace keeps serving."""
from __future__ import annotations

from datetime import timedelta
from typing import Iterator

import pytest

import ray_broker as rb
from ray_broker import errors

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


@pytest.fixture(scope="module")
def basic(ray_instance: None) -> Iterator[rb.Namespace]:
    ns = rb.start("itest-basic", sku="basic", durability="memory")
    yield ns
    rb.stop("itest-basic")


def test_oversized_message_and_batch(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        with pytest.raises(errors.MessageSizeExceededError, match="256|262144"):
            sender.send_messages(rb.Message(b"x" * (256 * 1024 + 1)))
        with pytest.raises(errors.MessageSizeExceededError):
            sender.send_messages([rb.Message(b"x" * 60_000) for _ in range(5)])
        batch = sender.create_message_batch()
        with pytest.raises(errors.MessageSizeExceededError):
            for _ in range(10):
                batch.add_message(rb.Message(b"y" * 60_000))
        assert len(batch) == 4
        sender.send_messages(batch)
        with pytest.raises(ValueError):
            sender.create_message_batch(max_size_in_bytes=10 * 1024 * 1024)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 4
    namespace.delete_queue(queue_name)


@pytest.mark.parametrize("name", ["", "a" * 261, "bad name", "no$dollar", "/lead", "trail/", "a//b", "ümlaut"])
def test_invalid_entity_names(namespace: rb.Namespace, name: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="name"):
        namespace.create_queue(name)


def test_invalid_ids_and_properties_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="128"):
        rb.Message(b"x", message_id="m" * 129)
    with pytest.raises(ValueError, match="128"):
        rb.Message(b"x", session_id="s" * 129)
    with pytest.raises(TypeError, match="application_properties"):
        rb.Message(b"x", application_properties={"k": [1, 2]})
    with pytest.raises(TypeError):
        rb.Message(b"x", application_properties={"k": object()})
    with pytest.raises(ValueError, match="64-bit"):
        rb.Message(b"x", application_properties={"k": 2**70})
    with pytest.raises(TypeError, match="body"):
        rb.Message(12345)  # type: ignore[arg-type]


def test_unknown_and_existing_entities(namespace: rb.Namespace, queue_name: str) -> None:
    with pytest.raises(errors.MessagingEntityNotFoundError, match=queue_name):
        namespace.get_queue(queue_name)
    with pytest.raises(errors.MessagingEntityNotFoundError):
        namespace.get_queue_sender(queue_name).send_messages(rb.Message(b"x"))
    with pytest.raises(errors.MessagingEntityNotFoundError):
        namespace.get_queue_receiver(queue_name).receive_messages(1, max_wait_time=0)
    namespace.create_queue(queue_name)
    with pytest.raises(errors.MessagingEntityAlreadyExistsError):
        namespace.create_queue(queue_name.upper())
    namespace.delete_queue(queue_name)
    with pytest.raises(errors.MessagingEntityNotFoundError):
        namespace.delete_queue(queue_name)


def test_out_of_range_settings(namespace: rb.Namespace, queue_name: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="lock_duration"):
        namespace.create_queue(queue_name, lock_duration=timedelta(minutes=6))
    with pytest.raises(errors.InvalidArgumentError, match="duplicate_detection_history_time_window"):
        namespace.create_queue(queue_name, duplicate_detection_history_time_window=timedelta(seconds=5))
    with pytest.raises(errors.InvalidArgumentError, match="max_delivery_count"):
        namespace.create_queue(queue_name, max_delivery_count=0)
    with pytest.raises(errors.InvalidArgumentError):
        namespace.get_queue_receiver("q", max_wait_time=-1)
    namespace.create_queue(queue_name, enable_partitioning=True)
    with pytest.raises(errors.InvalidOperationError, match="enable_partitioning"):
        namespace.update_queue(queue_name, enable_partitioning=False)
    updated = namespace.update_queue(queue_name, max_delivery_count=3, lock_duration=timedelta(seconds=30))
    assert updated.max_delivery_count == 3 and updated.lock_duration == timedelta(seconds=30)
    props = namespace.get_queue(queue_name)
    props.status = "SendDisabled"
    namespace.update_queue(props)
    with pytest.raises(errors.MessagingEntityDisabledError):
        namespace.get_queue_sender(queue_name).send_messages(rb.Message(b"x"))
    namespace.delete_queue(queue_name)


def test_basic_tier_lacks_advanced_features_and_quota_applies(basic: rb.Namespace) -> None:
    for feature in ({"requires_session": True}, {"requires_duplicate_detection": True}):
        with pytest.raises(errors.InvalidOperationError, match="basic"):
            basic.create_queue("feature-q", **feature)
    for i in range(100):
        basic.create_queue(f"p{i:03d}", enable_partitioning=True)
    with pytest.raises(errors.QuotaExceededError, match="100"):
        basic.create_queue("p100", enable_partitioning=True)
    basic.create_queue("not-partitioned")
    assert len(basic.list_queues()) == 101
    with basic.get_queue_sender("p000") as sender:
        sender.send_messages(rb.Message(b"still serving"))
    with basic.get_queue_receiver("p000") as receiver:
        assert [m.body for m in receiver.receive_messages(1, max_wait_time=5)] == [b"still serving"]


def test_namespace_arguments(ray_instance: None) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="sku"):
        rb.start("bad-sku", sku="gold")
    with pytest.raises(errors.InvalidArgumentError, match="16 partitions"):
        rb.start("bad-parts", partitions=4)
    with pytest.raises(errors.InvalidArgumentError, match="premium"):
        rb.start("bad-premium", sku="premium", partitions=65)
    with pytest.raises(errors.InvalidArgumentError):
        rb.start("bad name")
    with pytest.raises(errors.MessagingEntityNotFoundError):
        rb.connect("never-started")
