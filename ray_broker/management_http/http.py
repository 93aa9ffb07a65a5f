"""The HTTP/1.1 exchange of the management API on a connection's byte streams (plain or TLS),
parsed by h11: requests in order on one connection (keep-alive), each answered by the
`ManagementService`. A request that breaks HTTP gets 400 (a body over `MAX_BODY_BYTES`, 413) and
ends its connection only. Where the port serves AMQP over WebSocket, `serve_http` is also where a
request to switch to a WebSocket leaves the management API (`ray_broker.amqp.websocket`).
"""
from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Awaitable, Callable

import h11

from ..amqp.streams import ByteReader, ByteWriter, StreamHandler
from ..amqp.websocket import WebSocketUpgradeError, accept_upgrade, asks_websocket, serve_websocket
from . import atom
from .service import Reply, Request

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body taken (descriptions are a few kilobytes)."""
READ_BYTES = 64 * 1024
IDLE_TIMEOUT_S = 120.0
"""How long a connection may wait between requests before it is closed."""
SERVER_NAME = b"ray-broker"

Handler = Callable[[Request, str], Awaitable[Reply]]
"""What answers one request: the request and the host it was sent to (host:port)."""


class _BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


async def _next_event(connection: h11.Connection, reader: ByteReader) -> object:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await asyncio.wait_for(reader.read(READ_BYTES), IDLE_TIMEOUT_S)
        connection.receive_data(data)


async def _read_request(connection: h11.Connection, reader: ByteReader) -> Request | None:
    """The next request on the connection; None once the client has closed it."""
    event = await _next_event(connection, reader)
    if isinstance(event, h11.ConnectionClosed):
        return None
    if not isinstance(event, h11.Request):
        raise _BadRequest(400, f"expected an HTTP request, got {type(event).__name__}")
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
    if int(headers.get("content-length", "0")) > MAX_BODY_BYTES:
        raise _BadRequest(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    while not isinstance(part := await _next_event(connection, reader), h11.EndOfMessage):
        if isinstance(part, h11.Data):
            body += part.data
            if len(body) > MAX_BODY_BYTES:
                raise _BadRequest(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    return Request(event.method.decode("ascii"), event.target.decode("latin-1"), headers, bytes(body))


def _send(connection: h11.Connection, writer: ByteWriter, reply: Reply) -> None:
    headers = [(b"Content-Type", reply.content_type.encode("ascii")),
               (b"Content-Length", str(len(reply.body)).encode("ascii")), (b"Server", SERVER_NAME),
               *((name.encode("ascii"), value.encode("ascii")) for name, value in reply.headers)]
    writer.write(connection.send(h11.Response(status_code=reply.status, headers=headers,
                                                  reason=HTTPStatus(reply.status).phrase.encode("ascii"))) or b"")
    writer.write(connection.send(h11.Data(data=reply.body)) or b"")
    writer.write(connection.send(h11.EndOfMessage()) or b"")


def _refusal(error: WebSocketUpgradeError) -> Reply:
    """The answer to a request to switch to a WebSocket that cannot switch."""
    return Reply(error.status, atom.ERROR_CONTENT_TYPE, atom.error_body(error.status, str(error)), error.headers)


async def serve_http(reader: ByteReader, writer: ByteWriter, handler: Handler, default_host: str,
                     websocket: StreamHandler | None = None) -> None:
    """Answer requests on one connection until the client closes it, a request breaks HTTP, or it
    stays idle for `IDLE_TIMEOUT_S`; `default_host` stands in for a request without a Host header.

    With `websocket`, this is where a request that asks to switch to a WebSocket (`Upgrade:
    websocket`) goes to AMQP over WebSocket instead of the management API: one the binding refuses
    (another path, no `AMQPWSB10` subprotocol, no proper handshake) is answered with its HTTP error
    and the connection stays HTTP; one it accepts is answered 101, and from then on `websocket`
    serves the byte stream the WebSocket carries, until it ends. Without it, such a request is an
    ordinary one (its `Upgrade` header ignored)."""
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    try:
        while True:
            try:
                request = await _read_request(connection, reader)
            except (h11.RemoteProtocolError, _BadRequest) as exc:
                status = exc.status if isinstance(exc, _BadRequest) else exc.error_status_hint
                if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    _send(connection, writer, Reply(status, atom.ERROR_CONTENT_TYPE, atom.error_body(status, str(exc))))
                    await writer.drain()
                return
            if request is None:
                return
            if websocket is not None and asks_websocket(request.headers):
                try:
                    handshake = accept_upgrade(request.method, request.target, request.headers)
                except WebSocketUpgradeError as exc:
                    reply = _refusal(exc)
                else:
                    await serve_websocket(handshake, connection.trailing_data[0], reader, writer, websocket)
                    return
            else:
                reply = await handler(request, request.headers.get("host", default_host))
            _send(connection, writer, reply)
            await writer.drain()
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()
    except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()
