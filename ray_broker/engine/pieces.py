"""Shipments in pieces small enough to travel inside a Ray call.

Ray passes each argument of a call inline up to 100 KiB; a larger one goes through the object
store, which between nodes costs an extra transfer of a few milliseconds. A leader's shipment (its
encoded changes) is often just over that (a batch of a hundred 1 KB messages), so it is cut into
pieces under the limit, passed as arguments of one call, and joined again by the follower.
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
