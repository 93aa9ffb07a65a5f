"""Shipments in pieces small enough to travel inside a Ray call.

Ray passes a call's arguments inline up to 100 KiB; a larger one goes through the object store,
which between nodes costs an extra transfer of a few milliseconds. A leader's shipment (its
encoded changes) is often just over that (a batch of a hundred 1 KB messages), so it is cut into
pieces under the limit, sent as calls of their own, and put together again by the follower, in
whatever order the calls arrive.
"""
from __future__ import annotations

from ..errors import InvalidArgumentError

PIECE_BYTES = 96 * 1024
"""The largest piece: under Ray's 100 KiB inline limit with room for the call's other arguments."""


def split(data: bytes, size: int = PIECE_BYTES) -> list[bytes]:
    """`data` cut into pieces of at most `size` bytes (one, possibly empty, when it fits).

    Example:
        >>> [len(p) for p in split(b"x" * 10, 4)]
        [4, 4, 2]
    """
    if size < 1:
        raise InvalidArgumentError(f"a piece holds at least 1 byte, got {size}")
    return [data[i:i + size] for i in range(0, len(data), size)] or [b""]


class Assembly:
    """A follower putting one shipment at a time together from its pieces.

    Example:
        >>> assembly = Assembly()
        >>> assembly.add(7, 1, 2, b"lo") is None
        True
        >>> assembly.add(7, 0, 2, b"hel")
        b'hello'
    """

    def __init__(self) -> None:
        self._key: int | None = None
        self._pieces: dict[int, bytes] = {}

    def add(self, key: int, index: int, count: int, piece: bytes) -> bytes | None:
        """Take piece `index` of `count` of shipment `key`; the whole shipment once its last piece
        is in (None before). A piece of another shipment drops the pieces held of the one before
        (its leader gave up on it)."""
        if not 0 <= index < count:
            raise InvalidArgumentError(f"piece {index} of {count} does not exist: pieces are numbered 0 to count - 1")
        if key != self._key:
            self._key, self._pieces = key, {}
        self._pieces[index] = piece
        if len(self._pieces) < count:
            return None
        data = b"".join(self._pieces[i] for i in range(count))
        self._key, self._pieces = None, {}
        return data
