"""AMQP decimals (IEEE 754-2008 decimal32, decimal64 and decimal128, in the binary integer
decimal encoding the AMQP spec names) to Python `decimal.Decimal` and back. Pure.

Every decimal goes out as a decimal128 (the Azure SDKs decode decimal128 alone), laid out as
Service Bus writes one: a value a .NET decimal holds (a coefficient below 2**96, at most 28
places after the point) has the upper bits of its biased exponent shifted by 9, not 7, into the
first byte, which is where the Python SDK's reader looks for them (it reads the standard layout
as an exponent out of range, and fails the whole receive). Other values, which Service Bus would
not have taken, go out in the standard layout.

    encode_decimal128(Decimal("-12.50")).hex()  # '8c3c00000000000000000000000004e2'
    decode_decimal(standard_decimal128(Decimal("-12.50")), 128)  # Decimal('-12.50')
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


_DOTNET_MAX_SCALE = 28
"""The most places after the point a .NET decimal (what Service Bus holds) has."""
_DOTNET_COEFFICIENT_LIMIT = 1 << 96
"""A .NET decimal's coefficient is below this."""


def encode_decimal128(value: Decimal) -> bytes:
    """`value` as the 16 bytes of a decimal128 as Service Bus sends it (see the module's
    docstring); `ValueError` if it has none (see `ray_broker.message.decimal_problem`)."""
    sign, coefficient, exponent = _parts(value)
    scale = max(0, -exponent)
    whole = coefficient * 10 ** max(0, exponent)
    if scale > _DOTNET_MAX_SCALE or whole >= _DOTNET_COEFFICIENT_LIMIT:
        return standard_decimal128(value)
    biased = _FORMATS[128][1] - scale
    return bytes(((sign << 7) | (biased >> 9), (biased & 0x7F) << 1, 0, 0)) + whole.to_bytes(12, "big")


def standard_decimal128(value: Decimal) -> bytes:
    """`value` as the 16 bytes of a decimal128 in the AMQP spec's layout (as the SDKs send one);
    `ValueError` if it has none."""
    sign, coefficient, exponent = _parts(value)
    return ((sign << 127) | ((exponent + _FORMATS[128][1]) << 113) | coefficient).to_bytes(16, "big")


def _parts(value: Decimal) -> tuple[int, int, int]:
    """A finite decimal's sign (1 negative), coefficient and exponent; `ValueError` for one no
    decimal128 holds."""
    problem = decimal_problem(value)
    if problem:
        raise ValueError(problem)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    return sign, int("".join(map(str, digits))), exponent
