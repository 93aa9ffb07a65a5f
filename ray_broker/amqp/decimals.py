"""AMQP decimals (IEEE 754-2008 decimal32, decimal64 and decimal128, in the binary integer
decimal encoding the AMQP spec names) to Python `decimal.Decimal` and back. Pure.

Every decimal goes out as a decimal128 (34 digits hold every decimal32 and decimal64, and the
Azure SDKs decode decimal128 alone).

    decode_decimal(encode_decimal128(Decimal("-12.50")), 128)  # Decimal('-12.50')
"""
from __future__ import annotations

from decimal import Decimal

from ..message import decimal_problem

_FORMATS = {32: (8, 101), 64: (10, 398), 128: (14, 6176)}
"""Width in bits -> (exponent bits, exponent bias)."""


def decode_decimal(raw: bytes, width: int) -> Decimal:
    """The value of a decimal of `width` bits (32, 64 or 128) encoded in `raw` (big-endian)."""
    exponent_bits, bias = _FORMATS[width]
    bits = int.from_bytes(raw, "big")
    sign = bits >> (width - 1)
    coefficient_bits = width - 1 - exponent_bits
    top = (bits >> (width - 3)) & 0b11
    if top != 0b11:
        exponent = (bits >> coefficient_bits) & ((1 << exponent_bits) - 1)
        coefficient = bits & ((1 << coefficient_bits) - 1)
    elif (bits >> (width - 6)) & 0b11111 == 0b11110:
        return Decimal("-Infinity" if sign else "Infinity")
    elif (bits >> (width - 6)) & 0b11111 == 0b11111:
        return Decimal("NaN")
    else:
        exponent = (bits >> (coefficient_bits - 2)) & ((1 << exponent_bits) - 1)
        coefficient = (0b100 << (coefficient_bits - 2)) | (bits & ((1 << (coefficient_bits - 2)) - 1))
    if coefficient >= 10 ** (3 * ((coefficient_bits + 2) // 10) + 1):
        coefficient = 0  # a non-canonical coefficient counts as zero
    return Decimal((sign, tuple(int(d) for d in str(coefficient)), exponent - bias))


def encode_decimal128(value: Decimal) -> bytes:
    """`value` as the 16 bytes of a decimal128; `ValueError` if it has none (see
    `ray_broker.message.decimal_problem`)."""
    problem = decimal_problem(value)
    if problem:
        raise ValueError(problem)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)))
    return ((sign << 127) | ((exponent + _FORMATS[128][1]) << 113) | coefficient).to_bytes(16, "big")
