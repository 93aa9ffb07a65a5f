"""The official azure-servicebus SDK, unmodified, reaching a namespace's AMQP port over a WebSocket
(`TransportType.AmqpOverWebsocket`: plain with the emulator's connection string, and inside TLS),
and over AMQP inside TLS, each pointed at the port with `custom_endpoint_address` and trusting the
namespace's certificate with `connection_verify`; and the port's answers to WebSocket requests it
refuses, its management API unchanged beside them.

All tests share one namespace that serves AMQP on a free port."""
from __future__ import annotations

import socket
import time
import uuid
from typing import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

import ray_broker as rb
from ray_broker.amqp.websocket import SUBPROTOCOL, WEBSOCKET_PATH
from ray_broker.management_http.certificate import certificate_path

WAIT_S = 5
COUNT = 3


@pytest.fixture
def queue(amqp_namespace: rb.Namespace) -> Iterator[str]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(name)
    yield name
    amqp_namespace.delete_queue(name)


@pytest.fixture(scope="module")
def tls_conn_str(amqp_namespace: rb.Namespace) -> str:
    """A connection string without `UseDevelopmentEmulator=true`, so the SDK speaks TLS (the port
    comes from `custom_endpoint_address`)."""
    key = amqp_namespace.config.shared_access_keys()[0]
    return f"Endpoint=sb://localhost;SharedAccessKeyName={key.name};SharedAccessKey={key.key}"


@pytest.fixture(scope="module")
def ca_file(amqp_namespace: rb.Namespace) -> str:
    """The namespace's certificate, which the SDK trusts through `connection_verify`."""
    return certificate_path(amqp_namespace.config.name, amqp_namespace.config.data_dir)


def assert_emptied(ns: rb.Namespace, queue: str) -> None:
    """The queue holds nothing once the SDK's settlements reach its partitions (within 50 ms of
    their answer)."""
    deadline = time.monotonic() + WAIT_S
    while (left := ns.get_queue_runtime_properties(queue).total_message_count) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == 0, f"{left} message(s) still in {queue} after their settlement"


def round_trip(client: ServiceBusClient, queue: str) -> list[str]:
    """Send `COUNT` messages, then receive and complete them; their bodies."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(COUNT)])
    got: list[str] = []
    with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
        deadline = time.monotonic() + 4 * WAIT_S
        while len(got) < COUNT and time.monotonic() < deadline:
            for message in receiver.receive_messages(max_message_count=COUNT - len(got), max_wait_time=WAIT_S):
                receiver.complete_message(message)
                got.append(str(message))
    return sorted(got)


def test_the_sync_sdk_over_a_websocket_with_the_emulator_connection_string(
        amqp_namespace: rb.Namespace, conn_str: str, port: int, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str, transport_type=TransportType.AmqpOverWebsocket,
                                                 custom_endpoint_address=f"sb://localhost:{port}") as client:
        assert round_trip(client, queue) == [f"m{i}" for i in range(COUNT)]
    assert_emptied(amqp_namespace, queue)


async def test_the_async_sdk_over_a_websocket_inside_tls(amqp_namespace: rb.Namespace, tls_conn_str: str,
                                                         port: int, ca_file: str, queue: str) -> None:
    async with AsyncServiceBusClient.from_connection_string(
            tls_conn_str, transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"sb://localhost:{port}", connection_verify=ca_file) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(COUNT)])
        got: list[str] = []
        async with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            deadline = time.monotonic() + 4 * WAIT_S
            while len(got) < COUNT and time.monotonic() < deadline:
                for message in await receiver.receive_messages(max_message_count=COUNT - len(got),
                                                               max_wait_time=WAIT_S):
                    await receiver.complete_message(message)
                    got.append(str(message))
    assert sorted(got) == [f"m{i}" for i in range(COUNT)]
    assert_emptied(amqp_namespace, queue)


def test_the_sync_sdk_over_amqp_inside_tls(amqp_namespace: rb.Namespace, tls_conn_str: str, port: int,
                                           ca_file: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(tls_conn_str, transport_type=TransportType.Amqp,
                                                 custom_endpoint_address=f"sb://localhost:{port}",
                                                 connection_verify=ca_file) as client:
        assert round_trip(client, queue) == [f"m{i}" for i in range(COUNT)]
    assert_emptied(amqp_namespace, queue)


def exchange(port: int, request: bytes) -> bytes:
    """Send `request` on a new connection to the port and read its answer: the head, and as many
    bytes of body as its `Content-Length` says (none without one: a 101)."""
    with socket.create_connection(("localhost", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            if b"\r\n\r\n" in answer and len(body) >= (length or 0):
                break
        return answer


def upgrade(path: str, subprotocol: str | None) -> bytes:
    """A request to switch to a WebSocket at `path`, offering `subprotocol` (if any)."""
    offer = f"Sec-WebSocket-Protocol: {subprotocol}\r\n" if subprotocol else ""
    return (f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n").encode()


def test_refused_websocket_requests_get_http_errors_and_the_management_api_still_answers(port: int) -> None:
    assert exchange(port, upgrade("/q1", SUBPROTOCOL)).startswith(b"HTTP/1.1 404 ")
    answer = exchange(port, upgrade(WEBSOCKET_PATH, None))
    assert answer.startswith(b"HTTP/1.1 400 ") and SUBPROTOCOL.encode() in answer
    assert exchange(port, upgrade(WEBSOCKET_PATH, "mqtt")).startswith(b"HTTP/1.1 400 ")
    health = exchange(port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert health.startswith(b"HTTP/1.1 200 ") and b'"healthy"' in health
    accepted = exchange(port, upgrade(WEBSOCKET_PATH, SUBPROTOCOL))
    assert accepted.startswith(b"HTTP/1.1 101 ") and f"Sec-WebSocket-Protocol: {SUBPROTOCOL}".encode() in accepted
