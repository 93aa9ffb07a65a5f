"""Connections to the AMQP front end that end or misbehave: a connection dropped while it holds
peek-locked messages loses none, a client that vanishes (or aborts) mid-transfer leaves nothing
stored, a transfer past the tier's message size is refused, and hundreds of connections are
served at once. A raw proton client (tests/amqp_raw_client.py) does what the SDKs never do on
purpose; the Python client checks what the broker holds. One namespace for the module."""
from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from proton import Link

import ray_broker as rb
from ray_broker.keys.sas import SasKey
from tests.amqp_raw_client import ACCEPTED, REJECTED, RawAmqpClient, encoded

from .helpers import amqp_connection_string, drain

pytestmark = pytest.mark.ray
LOCK_S = 4.0
CONNECTIONS = 300
ABORTS = 120


@pytest.fixture(scope="module")
def key(amqp_namespace: rb.Namespace) -> SasKey:
    return amqp_namespace.config.shared_access_keys()[0]


@pytest.fixture
def queue(amqp_namespace: rb.Namespace) -> Iterator[str]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(name, lock_duration=LOCK_S, max_delivery_count=5)
    yield name
    amqp_namespace.delete_queue(name)


def sender_on(port: int, key: SasKey, queue: str) -> tuple[RawAmqpClient, Link]:
    """A raw connection allowed to send to `queue`, and its link to it."""
    client = RawAmqpClient(port)
    client.authorize(queue, key)
    return client, client.sender(queue)


def stored(ns: rb.Namespace, queue: str, count: int) -> list[str]:
    """The bodies of the `count` messages `queue` holds (received and completed); the queue is then empty."""
    with ns.get_queue_receiver(queue) as receiver:
        bodies = sorted(str(m) for m in drain(receiver, expected=count, wait=1))
    assert ns.get_queue_runtime_properties(queue).total_message_count == 0
    return bodies


def test_a_dropped_connection_loses_no_peek_locked_message(amqp_namespace: rb.Namespace, port: int, key: SasKey,
                                                           queue: str) -> None:
    with amqp_namespace.get_queue_sender(queue) as sender:
        sender.send_messages([rb.Message(f"m{i}") for i in range(6)])
    client = RawAmqpClient(port)
    client.authorize(queue, key)
    held = client.received(client.receiver(queue, credit=4), 4)
    client.drop()
    dropped_at = time.monotonic()
    with amqp_namespace.get_queue_receiver(queue, max_wait_time=1) as receiver:
        # the two messages never delivered are there at once; the four delivered ones keep their locks
        free = drain(receiver, expected=2, wait=1)
        assert time.monotonic() - dropped_at < LOCK_S
        back = drain(receiver, expected=4, wait=LOCK_S + 5)
        assert time.monotonic() - dropped_at >= LOCK_S - 0.5  # only once the locks expired
        assert sorted(m.delivery_count for m in back) == [2, 2, 2, 2]
    assert len(held) == 4
    assert sorted(str(m) for m in free + back) == [f"m{i}" for i in range(6)]
    assert amqp_namespace.get_queue_runtime_properties(queue).total_message_count == 0


def test_a_client_gone_mid_transfer_stores_nothing_and_the_server_serves_on(
        amqp_namespace: rb.Namespace, port: int, key: SasKey, queue: str) -> None:
    client, link = sender_on(port, key, queue)
    payload = encoded(b"x" * 200_000)
    link.delivery(b"cut")
    link.send(payload[:100_000])
    client.flush()  # a first transfer frame, more to come
    link.send(payload[100_000:])
    link.advance()
    half = client.transport.pending() // 2
    client.flush_part(half)  # the last frame cut in the middle
    client.drop()
    client, link = sender_on(port, key, queue)
    assert client.send(link, encoded(b"whole")) == (ACCEPTED, None)
    client.drop()
    assert stored(amqp_namespace, queue, 1) == ["whole"]


def test_aborted_transfers_store_nothing_and_their_link_goes_on(amqp_namespace: rb.Namespace, port: int,
                                                                 key: SasKey, queue: str) -> None:
    client, link = sender_on(port, key, queue)
    for attempt in range(ABORTS):  # more than the credit the front end gives at a time
        aborted = link.delivery(f"aborted {attempt}".encode())
        link.send(encoded(b"y" * 100_000)[:50_000])
        client.pump(lambda: client.transport.pending() == 0)
        aborted.abort()
    assert client.send(link, encoded(b"after the abort")) == (ACCEPTED, None)
    client.drop()
    assert stored(amqp_namespace, queue, 1) == ["after the abort"]


def test_a_transfer_past_the_tier_limit_is_refused_as_too_large_and_the_link_goes_on(
        amqp_namespace: rb.Namespace, port: int, key: SasKey, queue: str) -> None:
    client, link = sender_on(port, key, queue)
    assert link.remote_max_message_size == 256 * 1024
    payload = encoded(b"z" * 300_000)
    too_large = link.delivery(b"too-large")
    for start in range(0, len(payload), 100_000):  # frames under the frame size, the message over its limit
        link.send(payload[start:start + 100_000])
        client.flush()
    link.advance()
    assert client.outcome(too_large) == (REJECTED, "amqp:link:message-size-exceeded")
    description = too_large.remote.condition.description
    assert "the transfer has at least" in description  # refused before the rest of it was held
    assert "the standard tier allows 262144 bytes" in description
    assert client.send(link, encoded(b"small")) == (ACCEPTED, None)
    client.drop()
    assert stored(amqp_namespace, queue, 1) == ["small"]


def test_hundreds_of_connections_at_once(amqp_namespace: rb.Namespace, port: int, key: SasKey, queue: str) -> None:
    clients = []
    try:
        for _ in range(CONNECTIONS):
            client = RawAmqpClient(port)
            client.wait_open()
            clients.append(client)
        assert all(c.transport.remote_max_frame_size == 256 * 1024 for c in clients)
        for index in (0, CONNECTIONS // 2, CONNECTIONS - 1):  # connections opened early and late both work
            clients[index].authorize(queue, key)
            link = clients[index].sender(queue)
            assert clients[index].send(link, encoded(f"from {index}".encode())) == (ACCEPTED, None)
        with ServiceBusClient.from_connection_string(amqp_connection_string(amqp_namespace)) as sdk:
            with sdk.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("from the SDK"))
    finally:
        for client in clients:
            client.drop()
    assert stored(amqp_namespace, queue, 4) == \
        sorted(["from 0", f"from {CONNECTIONS // 2}", f"from {CONNECTIONS - 1}", "from the SDK"])
