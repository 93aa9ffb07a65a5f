"""The byte streams a connection of the front end is served through: an accepted socket's asyncio
streams, the stream inside TLS, or the one a WebSocket carries (`websocket`). Whatever serves a
connection (the AMQP engine, the HTTP exchange) reads and writes through these two interfaces
only, so it runs the same over each. Pure.
"""
from __future__ import annotations

from typing import Awaitable, Callable, Protocol


class ByteReader(Protocol):
    """Where a connection's incoming bytes are read (as `asyncio.StreamReader.read`)."""

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes (at least one) as soon as there are some; b"" once the stream has ended."""
        ...


class ByteWriter(Protocol):
    """Where a connection's outgoing bytes are written (as `asyncio.StreamWriter`)."""

    def write(self, data: bytes) -> None:
        """Queue `data` to be sent."""
        ...

    async def drain(self) -> None:
        """Wait until the queued bytes are small enough to queue more."""
        ...

    def close(self) -> None:
        """Close the stream (what was queued is still sent)."""
        ...

    def is_closing(self) -> bool:
        """Whether the stream is closed or closing (nothing more can be sent)."""
        ...


StreamHandler = Callable[[ByteReader, ByteWriter], Awaitable[None]]
"""What serves one connection, from its byte streams."""


class ReplayReader:
    """A reader that gives `head` (bytes already read from `reader`) before the rest of `reader`,
    so that what serves a connection reads it from its first byte after something looked at it.

    >>> import asyncio
    >>> async def replayed():
    ...     source = asyncio.StreamReader()
    ...     source.feed_data(b"P /x")
    ...     replay = ReplayReader(b"GET", source)
    ...     return [await replay.read(2) for _ in range(3)]
    >>> asyncio.run(replayed())
    [b'GE', b'T', b'P ']
    """

    def __init__(self, head: bytes, reader: ByteReader) -> None:
        self._head = head
        self._reader = reader

    async def read(self, n: int) -> bytes:
        """Up to `n` bytes: from the replayed head while any of it is left, then from the reader."""
        if n <= 0:
            raise ValueError(f"a read takes a positive byte count, not {n}")
        if not self._head:
            return await self._reader.read(n)
        taken, self._head = self._head[:n], self._head[n:]
        return taken
