"""The front end's own AMQP value encoding and decoding, checked against proton's."""
from __future__ import annotations

import struct
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from proton import Array, Data, Described, byte, char, decimal64, float32, int32, short, symbol, timestamp, ubyte, \
    uint, ulong, ushort

from ray_broker.amqp.decoding import DescribedValue, Unkept, decode_value
from ray_broker.amqp.encoding import encode_value
from ray_broker.amqp.mapping import encode_received, split_sections
from ray_broker.errors import InvalidArgumentError

from .test_amqp_mapping import received


def proton_encoded(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


def proton_decoded(encoded: bytes) -> Any:
    data = Data()
    assert data.decode(encoded) == len(encoded)
    data.rewind()
    data.next()
    value = data.get_object()
    return bytes(value) if isinstance(value, memoryview) else value


VALUES = [None, True, False, 0, 5, -7, 1 << 40, -(1 << 62), 1.5, "", "text", "é" * 300, symbol("x-opt-key"),
          b"", b"\x00" * 300, uuid.UUID(int=7), timestamp(1_700_000_000_123), {"k": 1, "l": "v"},
          {symbol("a"): {"nested": [2.5, "x"]}}, [], [1, "two", None], list(range(300))]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_what_is_encoded_proton_reads_back_and_what_proton_encodes_is_decoded(value: Any) -> None:
    assert proton_decoded(encode_value(value)) == value
    decoded, end = decode_value(proton_encoded(value))
    assert decoded == value and type(decoded) is type(value)
    assert end == len(proton_encoded(value))


def test_a_datetime_goes_out_as_a_timestamp_and_a_huge_integer_as_a_ulong() -> None:
    moment = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    assert proton_decoded(encode_value(moment)) == timestamp(int(moment.timestamp() * 1000))
    assert proton_decoded(encode_value((1 << 63) + 1)) == ulong((1 << 63) + 1)
    with pytest.raises(InvalidArgumentError):
        encode_value(1 << 64)
    with pytest.raises(InvalidArgumentError):
        encode_value(object())


@pytest.mark.parametrize("value, expected", [
    (ubyte(200), 200), (byte(-3), -3), (ushort(60000), 60000), (short(-300), -300), (uint(0), 0), (uint(9), 9),
    (uint(1 << 20), 1 << 20), (ulong(0), 0), (ulong(9), 9), (int32(-5), -5), (int32(1 << 20), 1 << 20),
    (float32(0.5), 0.5), (char("é"), "é"),
], ids=repr)
def test_every_integer_width_and_the_narrow_types_decode_to_python_values(value: Any, expected: Any) -> None:
    assert decode_value(proton_encoded(value))[0] == expected


def test_arrays_decimals_and_described_values() -> None:
    assert decode_value(proton_encoded(Array(None, Data.INT, 1, 2)))[0] == Unkept("array")
    assert decode_value(proton_encoded(decimal64((398 << 53) | 5)))[0] == Decimal(5)  # exponent 0 (bias 398), 5
    described, _ = decode_value(proton_encoded(Described(ulong(0x75), b"body")))
    assert described == DescribedValue(0x75, b"body")


@pytest.mark.parametrize("encoded", [b"", b"\x47", b"\xa1\x05ab", b"\x81\x00\x01", b"\xc1\x03\x01\x40\x40",
                                     b"\xc0\x05\x02\x40", b"\x98\x00", b"\xc1\x05\x02\xc0\x01\x00\x40"])
def test_a_malformed_encoding_is_a_value_error(encoded: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(encoded)


def test_lists_nested_too_deeply_are_a_value_error() -> None:
    nested = b"\x45"
    for _ in range(5000):
        nested = b"\xd0" + struct.pack(">II", len(nested) + 4, 1) + nested
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_value(nested)


def test_a_received_message_has_one_header_then_its_sections_in_amqp_order() -> None:
    message = received({"body": b"x", "message_id": "m", "application_properties": {"n": 1}})
    assert [s.code for s in split_sections(encode_received(message))] == [0x70, 0x71, 0x72, 0x73, 0x74, 0x75]
    bare = received({"body": b""})  # properties all the same: the message id made from its sequence number
    assert [s.code for s in split_sections(encode_received(bare, peeked=True))] == [0x70, 0x72, 0x73, 0x75]


@pytest.mark.parametrize("width, raw, expected", [
    (32, ((101 - 2) << 23) | 1250, Decimal("12.50")),                      # decimal32: 8-bit exponent, bias 101
    (32, (1 << 31) | (101 << 23) | 7, Decimal("-7")),
    (32, (0b11 << 29) | ((101 + 1) << 21) | 3, Decimal("8388611E+1")),      # the long-coefficient form
    (64, ((398 - 6) << 53) | 3141593, Decimal("3.141593")),                # decimal64: 10-bit exponent, bias 398
    (128, ((6176 + 3) << 113) | 42, Decimal("42E+3")),                     # decimal128: 14-bit exponent, bias 6176
    (128, (1 << 127) | ((6176 - 34) << 113) | (10 ** 34 - 1), Decimal("-0.9999999999999999999999999999999999")),
    (32, 0b11110 << 26, Decimal("Infinity")),
], ids=repr)
def test_decimals_of_every_width_decode_to_python_decimals(width: int, raw: int, expected: Decimal) -> None:
    code = {32: 0x74, 64: 0x84, 128: 0x94}[width]
    value, end = decode_value(bytes([code]) + raw.to_bytes(width // 8, "big"))
    assert value == expected and str(value) == str(expected) and end == 1 + width // 8


@pytest.mark.parametrize("value, read", [("0", "0"), ("1", "1"), ("-12.50", "-12.50"), ("1E+3", "1000"),
                                         ("-0.000001", "-0.000001"), ("4294967295", "4294967295"),
                                         ("1E-28", "1E-28")])
def test_decimals_go_out_as_service_bus_writes_them_and_the_sdk_reads_them_back(value: str, read: str) -> None:
    from azure.servicebus._pyamqp._decode import _decode_decimal128 as sdk_reading

    encoded = encode_value(Decimal(value))
    assert encoded[0] == 0x94 and str(sdk_reading(memoryview(encoded[1:]))[1]) == read, "a .NET decimal's form"


@pytest.mark.parametrize("value", ["1234567890123456789012345678901234", "1E-29",
                                   "-0.9999999999999999999999999999999999"])
def test_decimals_no_service_bus_holds_go_out_in_the_standard_layout(value: str) -> None:
    from azure.servicebus._pyamqp._encode import encode_decimal128 as sdk_encoding

    written = bytearray()
    sdk_encoding(written, Decimal(value))
    assert encode_value(Decimal(value)) == bytes(written)
    assert str(decode_value(encode_value(Decimal(value)))[0]) == value
