"""AMQP over WebSocket: which requests switch, the handshake's checks and refusals, the byte
stream the binary messages carry (reads across message boundaries, pings, the closing handshake
from either end, binding violations), and the port serving it over plain TCP and inside TLS beside
the management API. In-memory streams and real sockets on 127.0.0.1 (websocket-client as the
client), no Ray."""
from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import AsyncIterator

import pytest
import websocket
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, TextMessage

from ray_broker.amqp import websocket as binding
from ray_broker.amqp.streams import ByteReader, ByteWriter, ReplayReader
from ray_broker.amqp.websocket import (
    SUBPROTOCOL,
    WEBSOCKET_PATH,
    WebSocketStream,
    WebSocketUpgradeError,
    accept_upgrade,
    asks_websocket,
)
from ray_broker.management_http.certificate import ensure_certificate, server_context
from ray_broker.management_http.http import serve_http
from ray_broker.management_http.listener import SniffingListener
from ray_broker.management_http.service import Reply, Request
from ray_broker.management_http.sniff import WireProtocol

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
"""The sample key of RFC 6455, section 1.3."""
HANDSHAKE = {"host": "localhost:5672", "upgrade": "websocket", "connection": "Upgrade", "sec-websocket-key": KEY,
             "sec-websocket-version": "13", "sec-websocket-protocol": SUBPROTOCOL}


@pytest.mark.parametrize("headers, switches", [
    ({"upgrade": "websocket"}, True), ({"upgrade": "WebSocket"}, True), ({"upgrade": "h2c, websocket"}, True),
    ({"upgrade": "h2c"}, False), ({}, False), ({"connection": "Upgrade"}, False),
])
def test_which_requests_ask_for_a_websocket(headers: dict[str, str], switches: bool) -> None:
    assert asks_websocket(headers) is switches


def test_a_proper_handshake_is_accepted_with_the_amqp_subprotocol() -> None:
    handshake = accept_upgrade("GET", WEBSOCKET_PATH + "?x=1", {**HANDSHAKE, "sec-websocket-protocol": "a, AMQPWSB10"})
    answer = handshake.send(AcceptConnection(subprotocol=SUBPROTOCOL))
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert b"Sec-WebSocket-Protocol: AMQPWSB10\r\n" in answer
    expected = base64.b64encode(hashlib.sha1((KEY + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert b"Sec-WebSocket-Accept: " + expected + b"\r\n" in answer
    assert handshake.state is ConnectionState.OPEN


@pytest.mark.parametrize("method, target, changes, status, message, headers", [
    ("POST", WEBSOCKET_PATH, {}, 405, "opened with GET, not POST", (("Allow", "GET"),)),
    ("GET", "/q1", {}, 404, "no WebSocket at '/q1'", ()),
    ("GET", "/$servicebus/websocket/extra", {}, 404, "AMQP over WebSocket is at /\\$servicebus/websocket", ()),
    ("GET", WEBSOCKET_PATH, {"sec-websocket-protocol": None}, 400, "subprotocol AMQPWSB10 .*offered: none", ()),
    ("GET", WEBSOCKET_PATH, {"sec-websocket-protocol": "mqtt, amqp"}, 400, "offered: mqtt, amqp", ()),
    ("GET", WEBSOCKET_PATH, {"sec-websocket-key": None}, 400, "Sec-WebSocket-Key", ()),
    ("GET", WEBSOCKET_PATH, {"connection": "keep-alive"}, 400, "Connection: Upgrade", ()),
    ("GET", WEBSOCKET_PATH, {"sec-websocket-version": "8"}, 426, "Sec-WebSocket-Version",
     (("Sec-WebSocket-Version", "13"),)),
    ("GET", WEBSOCKET_PATH + "?\u00e9", {}, 400, "not a WebSocket handshake", ()),
])
def test_a_request_that_cannot_switch_is_refused_with_its_status(
        method: str, target: str, changes: dict[str, str | None], status: int, message: str,
        headers: tuple[tuple[str, str], ...]) -> None:
    sent = {name: value for name, value in {**HANDSHAKE, **changes}.items() if value is not None}
    with pytest.raises(WebSocketUpgradeError, match=message) as refused:
        accept_upgrade(method, target, sent)
    assert (refused.value.status, refused.value.headers) == (status, headers)


class Sink:
    """A writer that keeps what is written."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


class Client:
    """The client end of a WebSocket (frames masked, as a client's are), reading what the server wrote."""

    def __init__(self, sink: Sink) -> None:
        self.connection = Connection(ConnectionType.CLIENT)
        self._sink = sink

    def frames(self, *events: object) -> bytes:
        return b"".join(self.connection.send(event) for event in events)  # type: ignore[arg-type]

    def received(self) -> list[object]:
        self.connection.receive_data(bytes(self._sink.data))
        self._sink.data.clear()
        return list(self.connection.events())


def opened(reader: asyncio.StreamReader, received: bytes = b"") -> tuple[WebSocketStream, Sink, Client]:
    """A stream over an accepted handshake, the writer it writes to, and a client of it."""
    handshake = accept_upgrade("GET", WEBSOCKET_PATH, HANDSHAKE)
    handshake.send(AcceptConnection(subprotocol=SUBPROTOCOL))
    sink = Sink()
    return WebSocketStream(handshake, reader, sink, received), sink, Client(sink)


async def test_reads_give_the_bytes_of_binary_messages_whatever_their_boundaries() -> None:
    reader = asyncio.StreamReader()
    sent_with_the_request = Connection(ConnectionType.CLIENT).send(BytesMessage(data=b"AM"))
    stream, _, client = opened(reader, sent_with_the_request)
    reader.feed_data(client.frames(BytesMessage(data=b"QP\x00"), Ping(payload=b"hi"), BytesMessage(data=b"\x01")))
    assert await stream.read(1) == b"A"
    assert await stream.read(3) == b"M", "what there is, without waiting for more"
    assert await stream.read(100) == b"QP\x00\x01"
    assert client.received() == [Pong(payload=b"hi")]
    stream.write(b"answer")
    await stream.drain()
    assert client.received() == [BytesMessage(data=b"answer", frame_finished=True, message_finished=True)]
    with pytest.raises(ValueError, match="positive byte count"):
        await stream.read(0)


async def test_a_close_from_the_client_is_answered_and_ends_the_stream() -> None:
    reader = asyncio.StreamReader()
    stream, sink, client = opened(reader)
    reader.feed_data(client.frames(BytesMessage(data=b"last"), CloseConnection(code=1000, reason="bye")))
    assert await stream.read(100) == b"last"
    assert await stream.read(100) == b""
    assert client.received() == [CloseConnection(code=1000, reason="bye")]
    assert stream.is_closing()
    with pytest.raises(ConnectionResetError, match="closed"):
        stream.write(b"late")
    stream.close()
    await stream.closed()
    assert sink.data == b"", "nothing more after the closing handshake"


async def test_a_connection_that_goes_ends_the_stream() -> None:
    reader = asyncio.StreamReader()
    stream, _, _ = opened(reader)
    reader.feed_eof()
    assert await stream.read(100) == b""
    assert await stream.read(100) == b""


async def test_closing_sends_a_close_and_waits_for_the_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = asyncio.StreamReader()
    stream, sink, client = opened(reader)
    in_flight = client.frames(BytesMessage(data=b"sent before the Close came"))
    stream.close()
    assert client.received() == [CloseConnection(code=1000, reason="")]
    assert stream.is_closing() and not sink.closing, "the connection itself is closed by its owner"
    answer = in_flight + client.frames(CloseConnection(code=1000))
    asyncio.get_running_loop().call_later(0.05, reader.feed_data, answer)
    await asyncio.wait_for(stream.closed(), 2)
    assert await stream.read(100) == b"", "what came meanwhile is dropped"
    monkeypatch.setattr(binding, "CLOSE_WAIT_S", 0.05)
    silent, _, _ = opened(asyncio.StreamReader())
    silent.close()
    await asyncio.wait_for(silent.closed(), 2)  # the client never answers: closed all the same


@pytest.mark.parametrize("frames, code", [
    (lambda client: client.frames(TextMessage(data="AMQP")), 1003),
    (lambda client: Connection(ConnectionType.SERVER).send(BytesMessage(data=b"unmasked")), 1002),
])
async def test_a_client_that_breaks_the_binding_gets_a_close_saying_why(frames: object, code: int) -> None:
    reader = asyncio.StreamReader()
    stream, _, client = opened(reader)
    reader.feed_data(frames(client))  # type: ignore[operator]
    assert await stream.read(100) == b""
    [close] = client.received()
    assert isinstance(close, CloseConnection) and close.code == code and close.reason
    await asyncio.wait_for(stream.closed(), 1)  # its Close is not waited for


async def answer(request: Request, host: str) -> Reply:
    """The management handler the tests serve: says what it got."""
    return Reply(200, "text/plain", f"{request.method} {request.target}".encode())


async def shout(reader: ByteReader, writer: ByteWriter) -> None:
    """What the tests serve over WebSocket: answers each read in capitals, and ends after "END"."""
    while data := await reader.read(1024):
        writer.write(data.upper())
        await writer.drain()
        if data == b"end":
            return
    writer.close()


@pytest.fixture
async def port_and_ca(tmp_path: Path) -> AsyncIterator[tuple[int, str]]:
    """A port serving HTTP with `answer` and `shout` over WebSocket, with TLS; and the CA file."""
    async def http(reader: ByteReader, writer: ByteWriter) -> None:
        await serve_http(reader, writer, answer, "localhost:0", websocket=shout)

    cert, key = ensure_certificate(str(tmp_path), "ns", ())
    served = SniffingListener({WireProtocol.HTTP: http}, server_context(cert, key))
    yield await served.listen("127.0.0.1", 0), cert
    served.close()


@pytest.mark.parametrize("scheme", ["ws", "wss"])
async def test_a_websocket_client_reaches_the_stream_over_tcp_and_inside_tls(
        port_and_ca: tuple[int, str], scheme: str) -> None:
    port, ca = port_and_ca

    def client() -> list[object]:
        ws = websocket.create_connection(f"{scheme}://localhost:{port}{WEBSOCKET_PATH}", subprotocols=[SUBPROTOCOL],
                                         sslopt={"ca_certs": ca} if scheme == "wss" else None, timeout=10)
        got: list[object] = [ws.subprotocol]
        ws.ping(b"still there?")
        for data in (b"amqp", b"end"):
            ws.send_binary(data)
            got.append(ws.recv())
        frame = ws.recv_frame()  # the server's Close, once what it serves has ended
        got.append((frame.opcode, int.from_bytes(frame.data[:2], "big")))
        ws.send_close()
        ws.shutdown()
        return got

    assert await asyncio.to_thread(client) == [SUBPROTOCOL.lower(), b"AMQP", b"END",
                                               (websocket.ABNF.OPCODE_CLOSE, 1000)]


async def test_a_refused_switch_leaves_the_connection_to_http(port_and_ca: tuple[int, str]) -> None:
    port, _ = port_and_ca
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    upgrade = (f"GET /q1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n")
    writer.write(upgrade.encode() + b"GET /$namespaceinfo HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    got = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    refusal, _, then = got.partition(b"HTTP/1.1 200 OK")
    assert refusal.startswith(b"HTTP/1.1 404 ") and b"no WebSocket at '/q1'" in refusal
    assert then.endswith(b"GET /$namespaceinfo"), "the next request on the connection is answered"


async def test_without_a_websocket_handler_a_switch_is_an_ordinary_request(tmp_path: Path) -> None:
    async def http(reader: ByteReader, writer: ByteWriter) -> None:
        await serve_http(reader, writer, answer, "localhost:0")

    served = SniffingListener({WireProtocol.HTTP: http})
    port = await served.listen("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {WEBSOCKET_PATH} HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n"
                     f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        got = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(f"GET {WEBSOCKET_PATH}".encode())
    finally:
        served.close()


async def test_a_replayed_reader_takes_positive_counts_only() -> None:
    with pytest.raises(ValueError, match="positive byte count"):
        await ReplayReader(b"x", asyncio.StreamReader()).read(-1)
