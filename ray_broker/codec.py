"""msgpack encoding of message payloads, with extension types for datetime and UUID."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgpack

_EXT_DATETIME = 1
_EXT_UUID = 2


def _default(value: Any) -> msgpack.ExtType:
    if isinstance(value, datetime):
        return msgpack.ExtType(_EXT_DATETIME, value.isoformat().encode("ascii"))
    if isinstance(value, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, value.bytes)
    raise TypeError(f"cannot encode a value of type {type(value).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_DATETIME:
        return datetime.fromisoformat(data.decode("ascii"))
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    return msgpack.ExtType(code, data)


def packb(value: Any) -> bytes:
    """Encode a value: maps, lists, str, bytes, numbers, bool, None, datetime and UUID."""
    return msgpack.packb(value, default=_default, use_bin_type=True, datetime=False)


def unpackb(data: bytes) -> Any:
    """Decode bytes written by `packb`."""
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
