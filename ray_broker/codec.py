"""msgpack encoding of message payloads, with extension types for datetime, UUID, Decimal and timedelta
(a rule's duration parameters)."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import msgpack

_EXT_DATETIME = 1
_EXT_UUID = 2
_EXT_DECIMAL = 3
_EXT_TIMEDELTA = 4


def _default(value: Any) -> msgpack.ExtType:
    if isinstance(value, datetime):
        return msgpack.ExtType(_EXT_DATETIME, value.isoformat().encode("ascii"))
    if isinstance(value, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    if isinstance(value, Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(value).encode("ascii"))
    if isinstance(value, timedelta):
        return msgpack.ExtType(_EXT_TIMEDELTA, f"{value.days},{value.seconds},{value.microseconds}".encode("ascii"))
    raise TypeError(f"cannot encode a value of type {type(value).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_DATETIME:
        return datetime.fromisoformat(data.decode("ascii"))
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == _EXT_DECIMAL:
        return Decimal(data.decode("ascii"))
    if code == _EXT_TIMEDELTA:
        days, seconds, microseconds = (int(part) for part in data.decode("ascii").split(","))
        return timedelta(days=days, seconds=seconds, microseconds=microseconds)
    return msgpack.ExtType(code, data)


class _Packers(threading.local):
    """One reusable `msgpack.Packer` per thread: `msgpack.packb` builds a new one for every value,
    which costs more than packing a 1 KB message."""

    def __init__(self) -> None:
        self.packer = msgpack.Packer(default=_default, use_bin_type=True, datetime=False)


_PACKERS = _Packers()


def packb(value: Any) -> bytes:
    """Encode a value: maps, lists, str, bytes, numbers, bool, None, datetime, UUID and Decimal."""
    return _PACKERS.packer.pack(value)


def unpackb(data: bytes) -> Any:
    """Decode bytes written by `packb`."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
