"""AMQP 1.0 decoding of the values a message carries, straight from bytes. Pure (no I/O, no Ray).

The front end reads every message a client sends; walking it through proton's `Data` costs tens of
microseconds a message in wrappers, while a message's values decode in a few `struct` calls.
Values come out as Python values: integers as `int`, floats as `float`, binary as `bytes`, strings
as `str`, symbols as proton's `symbol`, timestamps as proton's `timestamp`, uuids as `uuid.UUID`,
decimals (32, 64 or 128 bits) as `decimal.Decimal`, lists as `list`, maps as `dict`; an array
(which no broker field keeps) as `Unkept`.
Every malformed encoding raises `ValueError`.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from proton import symbol, timestamp

from .decimals import decode_decimal

_B, _H, _I, _Q = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_b, _h, _i, _q = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_f, _d = struct.Struct(">f"), struct.Struct(">d")
Decoder = Callable[[bytes, int], tuple[Any, int]]
"""Decodes the value after a type code: (bytes, offset after the code) -> (value, offset after it)."""


@dataclass(frozen=True)
class Unkept:
    """A value of an AMQP type no broker field keeps (an array), by its type name."""

    amqp_type: str


@dataclass(frozen=True)
class DescribedValue:
    """A described value: its descriptor and the value."""

    descriptor: Any
    value: Any


def decode_value(data: bytes, offset: int = 0) -> tuple[Any, int]:
    """The value encoded at `offset` in `data`, and the offset just after it; `ValueError` if the
    bytes there are no AMQP encoding."""
    try:
        return _value(data, offset)
    except struct.error as exc:
        raise ValueError(f"the encoding ends inside a value: {exc}") from None
    except RecursionError:
        raise ValueError("lists or maps are nested too deeply") from None


def _value(data: bytes, offset: int) -> tuple[Any, int]:
    if offset >= len(data):
        raise ValueError("the encoding ends where a value was expected")
    code = data[offset]
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise ValueError(f"0x{code:02x} is no AMQP type code")
    return decoder(data, offset + 1)


def _fixed(unpacker: struct.Struct, wrap: Callable[[Any], Any] | None = None) -> Decoder:
    size = unpacker.size

    def decode(data: bytes, offset: int) -> tuple[Any, int]:
        end = offset + size
        if end > len(data):
            raise ValueError("the encoding ends inside a value")
        (value,) = unpacker.unpack_from(data, offset)
        return (value if wrap is None else wrap(value)), end
    return decode


def _constant(value: Any) -> Decoder:
    return lambda data, offset: (value, offset)


def _sized(data: bytes, offset: int, size: struct.Struct) -> tuple[int, int]:
    """Where the bytes of a value with a size field of width `size` at `offset` start and end."""
    (length,) = size.unpack_from(data, offset)
    start = offset + size.size
    if start + length > len(data):
        raise ValueError("the encoding ends inside a value")
    return start, start + length


def _variable(size: struct.Struct, wrap: Callable[[bytes], Any]) -> Decoder:
    def decode(data: bytes, offset: int) -> tuple[Any, int]:
        start, end = _sized(data, offset, size)
        return wrap(bytes(data[start:end])), end
    return decode


def _compound(size: struct.Struct, as_map: bool) -> Decoder:
    def decode(data: bytes, offset: int) -> tuple[Any, int]:
        start, end = _sized(data, offset, size)
        (count,) = size.unpack_from(data, start)
        position = start + size.size
        items = []
        for _ in range(count):
            item, position = _value(data, position)
            items.append(item)
        if position != end:
            raise ValueError("a list or map's size does not match its elements")
        if as_map:
            if count % 2:
                raise ValueError("a map has an odd number of elements")
            return {_hashable(items[i]): items[i + 1] for i in range(0, count, 2)}, end
        return items, end
    return decode


def _hashable(key: Any) -> Any:
    if isinstance(key, (list, dict)):
        raise ValueError("a map key is a list or map")
    return key


def _skipped(size: struct.Struct, name: str) -> Decoder:
    def decode(data: bytes, offset: int) -> tuple[Any, int]:
        return Unkept(name), _sized(data, offset, size)[1]
    return decode


def _described(data: bytes, offset: int) -> tuple[Any, int]:
    descriptor, offset = _value(data, offset)
    value, offset = _value(data, offset)
    return DescribedValue(descriptor, value), offset


def _char(value: int) -> str:
    return chr(value)


def _uuid(data: bytes, offset: int) -> tuple[Any, int]:
    end = offset + 16
    if end > len(data):
        raise ValueError("the encoding ends inside a uuid")
    return uuid.UUID(bytes=bytes(data[offset:end])), end


_DECODERS: dict[int, Decoder] = {
    0x00: _described,
    0x40: _constant(None),
    0x41: _constant(True),
    0x42: _constant(False),
    0x56: _fixed(_B, bool),
    0x50: _fixed(_B), 0x51: _fixed(_b), 0x60: _fixed(_H), 0x61: _fixed(_h),
    0x70: _fixed(_I), 0x52: _fixed(_B), 0x43: _constant(0),
    0x80: _fixed(_Q), 0x53: _fixed(_B), 0x44: _constant(0),
    0x71: _fixed(_i), 0x54: _fixed(_b),
    0x81: _fixed(_q), 0x55: _fixed(_b),
    0x72: _fixed(_f), 0x82: _fixed(_d),
    0x73: _fixed(_I, _char),
    0x83: _fixed(_q, timestamp),
    0x98: _uuid,
    0xA0: _variable(_B, bytes), 0xB0: _variable(_I, bytes),
    0xA1: _variable(_B, lambda raw: raw.decode("utf-8")), 0xB1: _variable(_I, lambda raw: raw.decode("utf-8")),
    0xA3: _variable(_B, lambda raw: symbol(raw.decode("ascii"))),
    0xB3: _variable(_I, lambda raw: symbol(raw.decode("ascii"))),
    0x45: lambda data, offset: ([], offset),
    0xC0: _compound(_B, False), 0xD0: _compound(_I, False),
    0xC1: _compound(_B, True), 0xD1: _compound(_I, True),
    0xE0: _skipped(_B, "array"), 0xF0: _skipped(_I, "array"),
    0x74: _fixed(struct.Struct("4s"), lambda raw: decode_decimal(raw, 32)),
    0x84: _fixed(struct.Struct("8s"), lambda raw: decode_decimal(raw, 64)),
    0x94: _fixed(struct.Struct("16s"), lambda raw: decode_decimal(raw, 128)),
}


def encoded_items(data: bytes, offset: int) -> tuple[list[bytes], int]:
    """The elements of the list or map encoded at `offset`, each as its own encoded bytes (a map's
    keys and values in turn), and where it ends; `ValueError` (or `IndexError` for bytes cut short)
    for anything else. Rewriting a list or map from its items keeps each element's AMQP type."""
    code = data[offset]
    if code == 0x45:
        return [], offset + 1
    if code in (0xC0, 0xC1):
        size, count, position = data[offset + 1], data[offset + 2], offset + 3
        end = offset + 2 + size
    elif code in (0xD0, 0xD1):
        size, count = struct.unpack_from(">II", data, offset + 1)
        position, end = offset + 9, offset + 5 + size
    else:
        raise ValueError(f"0x{code:02x} is no list or map")
    items = []
    for _ in range(count):
        _, after = decode_value(data, position)
        items.append(data[position:after])
        position = after
    if position != end:
        raise ValueError("a list's or map's size does not match its elements")
    return items, end
