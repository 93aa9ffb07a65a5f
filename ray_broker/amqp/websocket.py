"""AMQP over WebSocket (OASIS "AMQP WebSocket Binding (WSB) v1.0"), as the Azure SDKs speak it with
`TransportType.AmqpOverWebsocket`: an HTTP/1.1 request to switch to a WebSocket at
`/$servicebus/websocket` offering the subprotocol `AMQPWSB10` is checked (`accept_upgrade`) and
answered 101 with that subprotocol; from then on the binary messages of the WebSocket carry the
AMQP byte stream, which `WebSocketStream` unwraps for whatever serves the connection (the AMQP
engine, unchanged) and into which it wraps every write (`serve_websocket`). Pings are answered, a
Close from the client is answered and ends the stream, and when the AMQP connection ends the
WebSocket is closed with a Close of its own. The framing and the handshake are wsproto's.
"""
from __future__ import annotations

import asyncio
from typing import Mapping
from urllib.parse import urlsplit

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import ProtocolError, RemoteProtocolError

from .streams import ByteReader, ByteWriter, StreamHandler

WEBSOCKET_PATH = "/$servicebus/websocket"
"""Where the SDKs open AMQP over WebSocket (the path of Service Bus's own endpoint)."""
SUBPROTOCOL = "AMQPWSB10"
"""The WebSocket subprotocol of the AMQP WebSocket Binding 1.0."""
READ_BYTES = 64 * 1024
CLOSE_WAIT_S = 5.0
"""How long a WebSocket this end closes waits for the client's Close before its connection is closed."""


class WebSocketUpgradeError(ValueError):
    """A request to switch to AMQP over WebSocket that is refused: `status` is the HTTP status it
    is answered with, `headers` any headers the answer must carry (name, value), the message why.
    """

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def asks_websocket(headers: Mapping[str, str]) -> bool:
    """Whether a request with `headers` (names in lower case) asks to switch its connection to a
    WebSocket (`Upgrade: websocket`); a request that asks for another protocol, or none, is an
    ordinary HTTP request.

    >>> asks_websocket({"upgrade": "WebSocket", "connection": "Upgrade"}), asks_websocket({"upgrade": "h2c"})
    (True, False)
    """
    return any(token.strip().lower() == "websocket" for token in headers.get("upgrade", "").split(","))


def accept_upgrade(method: str, target: str, headers: Mapping[str, str]) -> WSConnection:
    """The server end of the WebSocket a request (`headers`' names in lower case) switches to, its
    handshake checked and ready to be accepted. Raises `WebSocketUpgradeError`: 405 for a method
    other than GET, 404 for a path other than `WEBSOCKET_PATH`, 400 for a request that is no
    WebSocket handshake (426 for a WebSocket version other than 13) or that does not offer the
    subprotocol `SUBPROTOCOL`.
    """
    if method != "GET":
        raise WebSocketUpgradeError(405, f"a WebSocket is opened with GET, not {method}", (("Allow", "GET"),))
    path = urlsplit(target).path
    if path != WEBSOCKET_PATH:
        raise WebSocketUpgradeError(404, f"there is no WebSocket at {path!r}: AMQP over WebSocket is at {WEBSOCKET_PATH}")
    handshake = WSConnection(ConnectionType.SERVER)
    try:
        handshake.initiate_upgrade_connection(
            [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()], target)
    except (ProtocolError, h11.ProtocolError, UnicodeError) as exc:
        hint = exc.event_hint if isinstance(exc, RemoteProtocolError) else None
        if isinstance(hint, RejectConnection):
            raise WebSocketUpgradeError(hint.status_code, f"not a WebSocket handshake: {exc}", tuple(
                (name.decode("latin-1"), value.decode("latin-1")) for name, value in hint.headers)) from None
        raise WebSocketUpgradeError(400, f"not a WebSocket handshake: {exc}") from None
    request = next(event for event in handshake.events() if isinstance(event, Request))
    if SUBPROTOCOL not in request.subprotocols:
        offered = ", ".join(request.subprotocols) or "none"
        raise WebSocketUpgradeError(400, f"AMQP over WebSocket needs the subprotocol {SUBPROTOCOL} in "
                                         f"Sec-WebSocket-Protocol (offered: {offered})")
    return handshake


class WebSocketStream:
    """The byte stream carried by the binary messages of an open WebSocket (server end), read and
    written as the connection's own streams are (`ByteReader`, `ByteWriter`).

    Reading gives the bytes of the client's binary messages in order, whatever their boundaries,
    and b"" once the client has closed the WebSocket (its Close is answered), broken its framing or
    sent a text message (both answered with a Close saying why), or once the connection has gone.
    Pings are answered as they are read. Each write goes out as one binary message.

    Args:
        websocket: the server end, its handshake accepted.
        reader, writer: the connection's streams.
        received: bytes of the connection already read after the handshake.
    """

    def __init__(self, websocket: WSConnection, reader: ByteReader, writer: ByteWriter, received: bytes = b"") -> None:
        self._websocket = websocket
        self._reader = reader
        self._writer = writer
        self._buffer = bytearray()
        """Bytes of the client's messages not read yet."""
        self._ended = False
        """Whether the client's stream has ended (nothing more is taken from it)."""
        self._broken = False
        """Whether the client broke the binding (bad framing, a text message): its Close is not waited for."""
        if received:
            self._take(received)

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes of the client's stream, waiting for a message if none are left; b"" once it ended."""
        if n <= 0:
            raise ValueError(f"a read takes a positive byte count, not {n}")
        while not self._buffer and not self._ended:
            self._take(await self._reader.read(READ_BYTES))
        taken = bytes(self._buffer[:n])
        del self._buffer[:n]
        return taken

    def write(self, data: bytes) -> None:
        """Send `data` as one binary message; raises `ConnectionResetError` once the WebSocket is closing."""
        if self._websocket.state is not ConnectionState.OPEN:
            raise ConnectionResetError(f"the WebSocket is {self._websocket.state.name.lower()}: nothing more can be sent")
        self._writer.write(self._websocket.send(BytesMessage(data=data)))

    async def drain(self) -> None:
        """Wait until the connection can take more."""
        await self._writer.drain()

    def is_closing(self) -> bool:
        """Whether nothing more can be sent: the WebSocket is closing or closed, or its connection is."""
        return self._websocket.state is not ConnectionState.OPEN or self._writer.is_closing()

    def close(self) -> None:
        """Start closing the WebSocket (a Close, 1000) if neither end has, and end the client's
        stream here (what it sends from now on is dropped); `closed` waits for the client's answer."""
        self._ended = True
        self._buffer.clear()
        if self._websocket.state is ConnectionState.OPEN:
            self._send(CloseConnection(code=CloseReason.NORMAL_CLOSURE))

    async def closed(self) -> None:
        """After `close`: wait, at most `CLOSE_WAIT_S`, for the client's Close, unless the client
        broke the binding or the connection has gone."""
        async def answered() -> None:
            while self._websocket.state is ConnectionState.LOCAL_CLOSING and not self._broken:
                self._take(await self._reader.read(READ_BYTES))

        try:
            await self._writer.drain()
            await asyncio.wait_for(answered(), CLOSE_WAIT_S)
        except (asyncio.TimeoutError, OSError):  # no answer in time, or the connection went
            return

    def _take(self, data: bytes) -> None:
        """Feed bytes read from the connection (b"": it closed) to the WebSocket and handle what they carry."""
        if self._websocket.state is ConnectionState.CLOSED:
            self._ended = True
            return
        self._websocket.receive_data(data or None)
        for event in self._websocket.events():
            self._handle(event)

    def _handle(self, event: Event) -> None:
        if isinstance(event, BytesMessage):
            if not self._ended:
                self._buffer += event.data
        elif isinstance(event, TextMessage):
            self._fail(CloseReason.UNSUPPORTED_DATA, "AMQP over WebSocket takes binary messages only")
        elif isinstance(event, Ping):
            if self._websocket.state is ConnectionState.OPEN:
                self._send(event.response())
        elif isinstance(event, CloseConnection):
            self._ended = True
            if self._websocket.state is ConnectionState.REMOTE_CLOSING:
                self._send(event.response())
            elif self._websocket.state is ConnectionState.OPEN:  # wsproto reports broken framing as a Close
                self._fail(event.code, event.reason)

    def _fail(self, code: int, reason: str | None) -> None:
        """End the client's stream for breaking the binding, closing the WebSocket with `code` and `reason`."""
        self._ended = self._broken = True
        if self._websocket.state is ConnectionState.OPEN:
            self._send(CloseConnection(code=code, reason=reason))

    def _send(self, event: Event) -> None:
        if not self._writer.is_closing():
            self._writer.write(self._websocket.send(event))


async def serve_websocket(websocket: WSConnection, received: bytes, reader: ByteReader, writer: ByteWriter,
                          serve: StreamHandler) -> None:
    """Accept a checked handshake (`accept_upgrade`): answer 101 with the subprotocol `SUBPROTOCOL`,
    serve the byte stream the WebSocket carries with `serve`, and once that returns close the
    WebSocket (a Close, and the client's answer within `CLOSE_WAIT_S`). `received` are the bytes
    that followed the request on the connection; closing the connection itself is the caller's.
    """
    writer.write(websocket.send(AcceptConnection(subprotocol=SUBPROTOCOL)))
    stream = WebSocketStream(websocket, reader, writer, received)
    try:
        await serve(stream, stream)
    finally:
        stream.close()
    await stream.closed()
