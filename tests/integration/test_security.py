"""Message content is msgpack, never pickle: a body or application property holding a pickle that
would run code when unpickled travels through send, peek, receive, dead-lettering, a topic's SQL
filter and rule action (on the direct path and through the gateway) as inert bytes, and a payload
that is not msgpack, put straight into a partition, is refused by the decoder instead of run."""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import ray

import ray_broker as rb
from ray_broker.config import RAY_NAMESPACE
from ray_broker.engine.partition import MAIN, PEEK_LOCK
from ray_broker.wire import Receive, Send, encode

BOTH_PATHS = True


class _WritesMarker:
    """Unpickling this object opens (so creates) the file `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (str(self.path), "w")


def booby_trapped(marker: Path) -> bytes:
    """A pickle that creates `marker` when it is unpickled."""
    return pickle.dumps(_WritesMarker(marker))


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where a booby-trapped pickle would write; the payload is proven live on a twin path."""
    twin = tmp_path / "twin-marker"
    pickle.loads(booby_trapped(twin)).close()
    assert twin.exists()
    return tmp_path / "marker"


def trapped_message(marker: Path, **fields: Any) -> rb.Message:
    """A message whose body and property "blob" are the booby-trapped pickle."""
    payload = booby_trapped(marker)
    return rb.Message(payload, application_properties={"blob": payload, "kind": "pickle"}, **fields)


def test_a_pickled_body_and_property_pass_through_a_queue_as_bytes(namespace: rb.Namespace, queue_name: str,
                                                                    marker: Path) -> None:
    payload = booby_trapped(marker)
    namespace.create_queue(queue_name, enable_partitioning=True)
    try:
        with namespace.get_queue_sender(queue_name) as sender:
            sender.send_messages(trapped_message(marker, partition_key="k"))
        with namespace.get_queue_receiver(queue_name, max_wait_time=10) as receiver:
            [peeked] = receiver.peek_messages(1)
            [received] = receiver.receive_messages(1, max_wait_time=10)
            receiver.dead_letter_message(received, reason="pickled", error_description="pickle payload")
        with namespace.get_queue_receiver(queue_name, sub_queue=rb.SubQueue.DEAD_LETTER,
                                          max_wait_time=10) as receiver:
            [dead] = receiver.receive_messages(1, max_wait_time=10)
            receiver.complete_message(dead)
        for message in (peeked, received, dead):
            assert message.body == payload
            assert message.application_properties["blob"] == payload
        assert dead.dead_letter_reason == "pickled"
        assert not marker.exists()
    finally:
        namespace.delete_queue(queue_name)


def test_a_pickled_message_passes_a_topics_sql_filter_and_action_as_bytes(namespace: rb.Namespace, queue_name: str,
                                                                         marker: Path) -> None:
    topic = f"t-{queue_name}"
    payload = booby_trapped(marker)
    namespace.create_topic(topic, enable_partitioning=True)
    try:
        namespace.create_subscription(topic, "pickles",
                                      rule=rb.SqlFilter("user.kind = 'pickle' AND user.blob IS NOT NULL"))
        namespace.create_rule(topic, "pickles", "tag", filter=rb.SqlFilter("sys.label = 'order'"),
                              action=rb.SqlRuleAction("SET user.seen = 'yes'"))
        namespace.create_subscription(topic, "others", rule=rb.SqlFilter("user.kind <> 'pickle'"))
        with namespace.get_topic_sender(topic) as sender:
            sender.send_messages(trapped_message(marker, subject="order", partition_key="k"))
        with namespace.get_subscription_receiver(topic, "pickles", max_wait_time=10) as receiver:
            received = receiver.receive_messages(2, max_wait_time=10)
            for message in received:
                receiver.complete_message(message)
        with namespace.get_subscription_receiver(topic, "others", max_wait_time=1) as receiver:
            assert receiver.receive_messages(1, max_wait_time=1) == []
        assert len(received) == 2
        assert all(m.body == payload and m.application_properties["blob"] == payload for m in received)
        assert sorted(m.application_properties.get("seen", "-") for m in received) == ["-", "yes"]
        assert not marker.exists()
    finally:
        namespace.delete_topic(topic)


def test_python_objects_are_refused_before_they_are_sent(marker: Path) -> None:
    with pytest.raises(TypeError, match="body"):
        rb.Message(_WritesMarker(marker))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="trap"):
        rb.Message("x", application_properties={"trap": _WritesMarker(marker)})
    assert not marker.exists()


def test_a_partition_refuses_a_raw_payload_without_unpickling_it(namespace: rb.Namespace, queue_name: str,
                                                                  marker: Path) -> None:
    """A payload that bypasses the client (straight into partition 0) and is not an encoded message
    is refused with a typed error, on a queue and on a topic alike, and never unpickled: nothing
    is stored that a receiver could not decode."""
    payload = booby_trapped(marker)
    partition = ray.get_actor(namespace.config.partition_name(0), namespace=RAY_NAMESPACE)
    envelope = {"payload": payload, "size": len(payload)}
    topic = f"t-{queue_name}"
    namespace.create_queue(queue_name, enable_partitioning=True)
    namespace.create_topic(topic, enable_partitioning=True)
    try:
        namespace.create_subscription(topic, "pickles", rule=rb.SqlFilter("user.kind = 'pickle'"))
        for entity in (queue_name, topic):
            with pytest.raises(rb.errors.InvalidArgumentError, match="not an encoded message"):
                ray.get(partition.run.remote(*encode(Send(entity, [envelope]))))
        result = ray.get(partition.run.remote(*encode(Receive(queue_name, MAIN, 1, PEEK_LOCK))))
        assert result["messages"] == []
        assert not marker.exists()
    finally:
        namespace.delete_queue(queue_name)
        namespace.delete_topic(topic)
