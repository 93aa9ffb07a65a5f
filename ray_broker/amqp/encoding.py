"""AMQP 1.0 encoding of the values a received message carries, straight to bytes. Pure (no I/O, no Ray).

The front end writes every message it delivers; building it through proton's `Message` and `Data`
costs tens of microseconds a message in wrappers, while the values it holds (strings, symbols,
integers, timestamps, binary, uuids, maps and lists of them) encode in a few `struct` calls.
Integers go out as `long` (as proton writes a Python int) unless too large for it (`ulong`);
proton's `symbol` and `timestamp` keep their AMQP types; a `decimal.Decimal` goes out as a
decimal128.
"""
from __future__ import annotations

import struct
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Callable

from proton import symbol, timestamp, ulong

from ..errors import InvalidArgumentError
from .decimals import encode_decimal128

_LONG = struct.Struct(">Bq")
_ULONG = struct.Struct(">BQ")
_DOUBLE = struct.Struct(">Bd")
_UINT = struct.Struct(">BI")
_SIZE8 = struct.Struct(">BBB")
_SIZE32 = struct.Struct(">BII")
_LONG_MIN, _LONG_MAX, _ULONG_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
NULL = b"\x40"


def encode_uint(value: int) -> bytes:
    """An AMQP `uint` (the compact forms for 0 and small values)."""
    if value == 0:
        return b"\x43"
    if value < 256:
        return bytes((0x52, value))
    return _UINT.pack(0x70, value)


def _variable(short: int, long: int, raw: bytes) -> bytes:
    """A variable-width value (binary, string, symbol) with its one- or four-byte length."""
    size = len(raw)
    if size < 256:
        return bytes((short, size)) + raw
    return _UINT.pack(long, size) + raw


def _compound(short: int, long: int, count: int, body: bytes) -> bytes:
    """A list or map: its size (of count and body) and element count, then the elements."""
    if len(body) + 1 < 256 and count < 256:
        return _SIZE8.pack(short, len(body) + 1, count) + body
    return _SIZE32.pack(long, len(body) + 4, count) + body


def _integer(value: int) -> bytes:
    if _LONG_MIN <= value <= _LONG_MAX:
        return _LONG.pack(0x81, value)
    if 0 <= value <= _ULONG_MAX:
        return _ULONG.pack(0x80, value)
    raise InvalidArgumentError(f"the integer {value} does not fit an AMQP long or ulong")


def encode_value(value: Any) -> bytes:
    """One value in its AMQP encoding; `InvalidArgumentError` for a type AMQP cannot carry."""
    if value is None:
        return NULL
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = next((e for kind, e in _ENCODERS.items() if isinstance(value, kind)), None)
    if encoder is None:
        raise InvalidArgumentError(f"a value of type {type(value).__name__} has no AMQP encoding here")
    return encoder(value)


def encode_map(entries: dict[Any, Any]) -> bytes:
    """An AMQP map of the given keys and values, in their order."""
    body = b"".join(encode_value(k) + encode_value(v) for k, v in entries.items())
    return _compound(0xC1, 0xD1, 2 * len(entries), body)


def encode_list(values: list[Any]) -> bytes:
    """An AMQP list (`list0` when empty)."""
    return encoded_list([encode_value(v) for v in values])


def encoded_map(items: list[bytes]) -> bytes:
    """An AMQP map of keys and values already encoded, in turn."""
    return _compound(0xC1, 0xD1, len(items), b"".join(items))


def encoded_list(items: list[bytes]) -> bytes:
    """An AMQP list of elements already encoded (`list0` when empty)."""
    if not items:
        return b"\x45"
    return _compound(0xC0, 0xD0, len(items), b"".join(items))


def described_section(code: int, encoded_value: bytes) -> bytes:
    """A message section: descriptor `code` (a small ulong) and its encoded value."""
    return bytes((0x00, 0x53, code)) + encoded_value


def encode_timestamp(milliseconds: int) -> bytes:
    """An AMQP `timestamp` of milliseconds since the epoch."""
    return _LONG.pack(0x83, milliseconds)


_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    bool: lambda v: b"\x41" if v else b"\x42",
    symbol: lambda v: _variable(0xA3, 0xB3, v.encode("ascii")),
    timestamp: lambda v: encode_timestamp(int(v)),
    ulong: lambda v: _ULONG.pack(0x80, int(v)),
    str: lambda v: _variable(0xA1, 0xB1, v.encode("utf-8")),
    int: _integer,
    float: lambda v: _DOUBLE.pack(0x82, v),
    bytes: lambda v: _variable(0xA0, 0xB0, v),
    bytearray: lambda v: _variable(0xA0, 0xB0, bytes(v)),
    memoryview: lambda v: _variable(0xA0, 0xB0, bytes(v)),
    uuid.UUID: lambda v: b"\x98" + v.bytes,
    Decimal: lambda v: b"\x94" + encode_decimal128(v),
    datetime: lambda v: encode_timestamp(int(v.timestamp() * 1000)),
    dict: encode_map,
    list: encode_list,
}
