"""Listing sessions by when their state was last set (`state_updated_after`): the Python client,
and the official SDK's `list_queue_sessions` / `list_subscription_sessions` through the AMQP front
end's `$management` node (`last-updated-time`)."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

from azure.servicebus import ServiceBusClient, ServiceBusMessage

import ray_broker as rb

WAIT_S = 5


def set_states(ns: rb.Namespace, conn_str: str, queue: str, session_ids: list[str]) -> None:
    """Through the SDK: a message to each session, then each session's state set, in order."""
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage("m", session_id=sid) for sid in session_ids])
        for sid in session_ids:
            with client.get_queue_receiver(queue, session_id=sid, max_wait_time=WAIT_S) as receiver:
                receiver.session.set_state(f"state of {sid}")


def test_sessions_whose_state_was_set_after_a_time(amqp_namespace: rb.Namespace, conn_str: str) -> None:
    queue, topic = f"sq-{uuid.uuid4().hex[:8]}", f"st-{uuid.uuid4().hex[:8]}"
    amqp_namespace.create_queue(queue, requires_session=True)
    try:
        set_states(amqp_namespace, conn_str, queue, ["old"])
        time.sleep(1.5)
        cutoff = datetime.now(timezone.utc)
        time.sleep(1.5)
        set_states(amqp_namespace, conn_str, queue, ["new"])
        assert amqp_namespace.list_queue_sessions(queue) == ["new", "old"]
        assert amqp_namespace.list_queue_sessions(queue, state_updated_after=cutoff) == ["new"]
        with ServiceBusClient.from_connection_string(conn_str) as client:
            assert sorted(client.list_queue_sessions(queue)) == ["new", "old"]
            assert list(client.list_queue_sessions(queue, state_updated_after=cutoff)) == ["new"]
            assert list(client.list_queue_sessions(queue, state_updated_after=datetime.now(timezone.utc))) == []

        amqp_namespace.create_topic(topic)
        amqp_namespace.create_subscription(topic, "s", requires_session=True)
        assert amqp_namespace.list_subscription_sessions(topic, "s", state_updated_after=cutoff) == []
    finally:
        amqp_namespace.delete_queue(queue)
        if topic in {t.name for t in amqp_namespace.list_topics()}:
            amqp_namespace.delete_topic(topic)
