"""One port, several protocols: accepts connections, peeks at their first bytes (without taking
them) and hands each to the AMQP engine or to HTTP, as the port serves them, or, for a TLS
connection, does the handshake and looks at the first bytes inside it the same way (AMQP and HTTP
inside TLS are served as they are without it); a connection in a protocol the port does not serve
is closed at once.

The peek (`MSG_PEEK`) leaves the bytes in the socket, so the TLS handshake and the AMQP engine
read the connection from its first byte, through the same asyncio streams `asyncio.start_server`
would give them; inside TLS the first bytes are read, and given again before the rest
(`ReplayReader`).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Awaitable, Mapping

from ..amqp.streams import ByteReader, ReplayReader, StreamHandler
from .sniff import SNIFF_BYTES, WireProtocol, sniff

logger = logging.getLogger("ray_broker.amqp")

SNIFF_TIMEOUT_S = 30.0
"""How long a new connection may stay silent before it is closed (every client here speaks first)."""
TLS_HANDSHAKE_TIMEOUT_S = 30.0
BACKLOG = 512


async def _first_bytes(sock: socket.socket) -> bytes:
    """The connection's first bytes, left in the socket; b"" if it closed before sending any."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        await asyncio.wait_for(readable, SNIFF_TIMEOUT_S)
    finally:
        loop.remove_reader(sock.fileno())
    return sock.recv(SNIFF_BYTES, socket.MSG_PEEK)


async def open_streams(sock: socket.socket,
                       tls: ssl.SSLContext | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Asyncio streams on an accepted socket, over TLS (handshake done) when `tls` is given."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await loop.connect_accepted_socket(
        lambda: protocol, sock, ssl=tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls else None)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class SniffingListener:
    """Serves a port: each connection goes to the handler of the protocol it speaks, and with a
    TLS context, a TLS connection's handshake is done and what it carries goes to the handler of
    the protocol spoken inside. A connection in a protocol without a handler (TLS without a
    context, TLS inside TLS), or that fails, is closed and logged; the listener keeps serving.

    Args:
        handlers: what serves a connection, by the protocol it speaks (AMQP, HTTP).
        tls: the TLS server context; without it, TLS connections are closed.
    """

    def __init__(self, handlers: Mapping[WireProtocol, StreamHandler], tls: ssl.SSLContext | None = None) -> None:
        if WireProtocol.TLS in handlers:
            raise ValueError("TLS is served by giving the listener a TLS server context; its handlers serve what "
                             "connections speak inside TLS or without it (AMQP, HTTP)")
        self._handlers = dict(handlers)
        self._tls = tls
        self._socket: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def listen(self, host: str, port: int) -> int:
        """Start listening on `host:port` (0 for any free port) and return the port."""
        sock = socket.create_server((host, port), backlog=BACKLOG)
        sock.setblocking(False)
        self._socket = sock
        self._spawn(self._accept_loop(sock))
        return int(sock.getsockname()[1])

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept_loop(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except OSError:
                logger.exception("front end: accepting a connection failed")
                await asyncio.sleep(0.1)
                continue
            sock.setblocking(False)
            self._spawn(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        try:
            head = await _first_bytes(sock)
            if not head:
                sock.close()
                return
            protocol = sniff(head)
            tls = protocol is WireProtocol.TLS and self._tls is not None
            if not tls and self._refused(protocol):
                sock.close()
                return
            reader, writer = await open_streams(sock, self._tls if tls else None)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            logger.info("front end: a connection closed before it was served: %r", exc)
            sock.close()
            return
        if tls:
            try:
                inside, reader = await self._inside_tls(reader)
            except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                logger.info("front end: a TLS connection closed before it was served: %r", exc)
                inside = None
            if inside is None:
                writer.close()
                return
            protocol = inside
        try:
            await self._handlers[protocol](reader, writer)
        except Exception:  # noqa: BLE001 - one connection's failure never stops the listener
            logger.exception("front end: a %s connection failed", protocol.value)
            writer.close()

    async def _inside_tls(self, reader: ByteReader) -> tuple[WireProtocol | None, ByteReader]:
        """The protocol spoken inside a TLS connection (None: the client closed it without a
        byte, or speaks a protocol the port does not serve), and a reader of what it carries from
        the first byte."""
        head = await asyncio.wait_for(reader.read(SNIFF_BYTES), SNIFF_TIMEOUT_S)
        if not head:
            return None, reader
        protocol = sniff(head)
        return (None if self._refused(protocol, inside_tls=True) else protocol), ReplayReader(head, reader)

    def _refused(self, protocol: WireProtocol, inside_tls: bool = False) -> bool:
        """Whether the port does not serve `protocol` (logged when it does not)."""
        if protocol in self._handlers:
            return False
        served = sorted(p.value for p in self._handlers) + (["tls"] if self._tls is not None else [])
        logger.info("front end: a %s connection%s reached a port that serves %s only; closed",
                    protocol.value, " inside TLS" if inside_tls else "", " and ".join(served))
        return True

    def close(self) -> None:
        """Stop listening and end every connection's work."""
        if self._socket is not None:
            self._socket.close()
        for task in list(self._tasks):
            task.cancel()
