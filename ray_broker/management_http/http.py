"""The HTTP/1.1 exchange of the management API on an asyncio stream (plain or TLS), parsed by
h11: requests in order on one connection (keep-alive), each answered by the `ManagementService`.
A request that breaks HTTP gets 400 (a body over `MAX_BODY_BYTES`, 413) and ends its connection
only.
"""
from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Awaitable, Callable

import h11

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


async def _next_event(connection: h11.Connection, reader: asyncio.StreamReader) -> object:
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await asyncio.wait_for(reader.read(READ_BYTES), IDLE_TIMEOUT_S)
        connection.receive_data(data)


async def _read_request(connection: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
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


def _send(connection: h11.Connection, writer: asyncio.StreamWriter, reply: Reply) -> None:
    headers = [(b"Content-Type", reply.content_type.encode("ascii")),
               (b"Content-Length", str(len(reply.body)).encode("ascii")), (b"Server", SERVER_NAME)]
    writer.write(connection.send(h11.Response(status_code=reply.status, headers=headers,
                                                  reason=HTTPStatus(reply.status).phrase.encode("ascii"))) or b"")
    writer.write(connection.send(h11.Data(data=reply.body)) or b"")
    writer.write(connection.send(h11.EndOfMessage()) or b"")


async def serve_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler,
                     default_host: str) -> None:
    """Answer requests on one connection until the client closes it, a request breaks HTTP, or it
    stays idle for `IDLE_TIMEOUT_S`; `default_host` stands in for a request without a Host header."""
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
            _send(connection, writer, await handler(request, request.headers.get("host", default_host)))
            await writer.drain()
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()
    except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()
