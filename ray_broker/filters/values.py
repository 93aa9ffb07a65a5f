"""Values in filters and actions: their kinds, comparison, arithmetic and LIKE patterns.

`None` is SQL's unknown. Comparisons never fail: values of kinds that cannot be compared give
unknown. Arithmetic on values that do not fit (a string times a number, a division by zero) raises
`FilterEvaluationError`, which the broker turns into a dead-letter.
"""
from __future__ import annotations

import functools
import math
import operator
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 63) - 1
_NUMBER_TYPES = (int, float)
_FAST_TYPES = frozenset({str, int, float})
_ORDERED_KINDS = frozenset({"number", "string", "datetime", "duration"})
KIND_NAMES = {"number": "a number", "string": "a string", "bool": "a boolean", "datetime": "a datetime",
              "uuid": "a uuid", "bytes": "bytes", "null": "NULL", "duration": "a duration"}
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "<>": operator.ne, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}


class FilterEvaluationError(Exception):
    """A filter or an action could not be evaluated on one message.

    `description` says what failed, e.g. "division by zero: 10 / 0". This is not a broker error:
    it never reaches a client; the broker dead-letters the message and records the description.
    """

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def kind_of(value: Any) -> str | None:
    """The kind of a property value: number, string, bool, datetime, uuid, bytes or null; or of a
    rule parameter, which may also be a duration.

    `None` for a value of any other type (such a value is never equal to anything).
    """
    value_type = type(value)
    if value_type is str:
        return "string"
    if value_type is bool:
        return "bool"
    if value_type in _NUMBER_TYPES:
        return "number"
    if value is None:
        return "null"
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, uuid.UUID):
        return "uuid"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, timedelta):
        return "duration"
    return None


def describe(value: Any) -> str:
    """A value as error messages show it: its kind and a short form of it."""
    kind = kind_of(value)
    if kind == "null":
        return "NULL"
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{KIND_NAMES.get(kind or '', type(value).__name__)} ({shown})"


def comparison(op: str) -> Callable[[Any, Any], bool | None]:
    """The function for the comparison operator `op` (=, <>, !=, >, >=, <, <=).

    Numbers compare with numbers (a bool is not a number), strings with strings (ordinally, case
    matters), datetimes with datetimes (a naive one is taken as UTC), and a uuid with a uuid or
    with a string that spells it. bool, uuid and bytes values have only = and <>. Any other pair,
    or an unknown operand, gives unknown (None).
    """
    compare = _COMPARISONS[op]
    ordering = op not in ("=", "<>", "!=")

    def apply(left: Any, right: Any) -> bool | None:
        if left is None or right is None:
            return None
        left_type = type(left)
        if left_type is type(right) and left_type in _FAST_TYPES:
            return compare(left, right)
        return _compare_mixed(compare, ordering, left, right)

    return apply


def _compare_mixed(compare: Callable[[Any, Any], bool], ordering: bool, left: Any, right: Any) -> bool | None:
    left_kind, right_kind = kind_of(left), kind_of(right)
    if left_kind != right_kind:
        if ordering or {left_kind, right_kind} != {"uuid", "string"}:
            return None
        try:
            left, right = _as_uuid(left), _as_uuid(right)
        except ValueError:
            return None
        return compare(left, right)
    if left_kind is None or (ordering and left_kind not in _ORDERED_KINDS):
        return None
    if left_kind == "datetime":
        left, right = _aware(left), _aware(right)
    return compare(left, right)


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


equal = comparison("=")
"""SQL equality: True, False, or None (unknown) when either side is unknown or the kinds differ."""


def arithmetic(op: str) -> Callable[[Any, Any], Any]:
    """The function for the binary operator `op` (+, -, *, /, %).

    Numbers only, except `+` on two strings, which joins them. An unknown operand gives unknown.
    Two integers give an integer: `/` truncates toward zero and `%` takes the sign of the dividend.
    """
    compute = _ARITHMETIC[op]

    def apply(left: Any, right: Any) -> Any:
        if left is None or right is None:
            return None
        left_type, right_type = type(left), type(right)
        if left_type in _NUMBER_TYPES and right_type in _NUMBER_TYPES:
            try:
                return compute(left, right)
            except ZeroDivisionError:
                raise FilterEvaluationError(f"division by zero: {left!r} {op} {right!r}") from None
            except OverflowError:
                raise FilterEvaluationError(f"the result of {left!r} {op} {right!r} is too large") from None
        if op == "+" and left_type is str and right_type is str:
            return left + right
        allowed = "numbers, or + on two strings" if op == "+" else "numbers"
        raise FilterEvaluationError(f"cannot compute {describe(left)} {op} {describe(right)}: {op} takes {allowed}")

    return apply


def _divide(left: int | float, right: int | float) -> int | float:
    if type(left) is int and type(right) is int:
        if right == 0:
            raise ZeroDivisionError
        quotient = abs(left) // abs(right)
        return quotient if (left < 0) == (right < 0) else -quotient
    if right == 0:
        raise ZeroDivisionError
    return left / right


def _remainder(left: int | float, right: int | float) -> int | float:
    if right == 0:
        raise ZeroDivisionError
    if type(left) is int and type(right) is int:
        remainder = abs(left) % abs(right)
        return -remainder if left < 0 else remainder
    return math.fmod(left, right)


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide, "%": _remainder,
}


def negate(value: Any) -> Any:
    """Unary minus: a number's negation, unknown for unknown."""
    if value is None:
        return None
    if type(value) in _NUMBER_TYPES:
        return -value
    raise FilterEvaluationError(f"cannot negate {describe(value)}: unary - takes a number")


def positive(value: Any) -> Any:
    """Unary plus: the number itself, unknown for unknown."""
    if value is None or type(value) in _NUMBER_TYPES:
        return value
    raise FilterEvaluationError(f"cannot apply unary + to {describe(value)}: it takes a number")


@functools.lru_cache(maxsize=512)
def like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    """A LIKE pattern as a regular expression: `%` any run of characters, `_` one character,
    and `escape` (one character) makes the character after it literal."""
    if escape is not None and len(escape) != 1:
        raise FilterEvaluationError(f"the ESCAPE character must be one character, not {escape!r}")
    parts = []
    chars = iter(pattern)
    for char in chars:
        if char == escape:
            following = next(chars, None)
            if following is None:
                raise FilterEvaluationError(f"the LIKE pattern {pattern!r} ends with its escape character {escape!r}")
            parts.append(re.escape(following))
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


def like(value: Any, pattern: Any, escape: Any) -> bool | None:
    """`value LIKE pattern ESCAPE escape`: unknown unless value and pattern are strings."""
    if type(value) is not str or type(pattern) is not str:
        return None
    if escape is not None and type(escape) is not str:
        raise FilterEvaluationError(f"the ESCAPE character must be a string, not {describe(escape)}")
    return like_pattern(pattern, escape).fullmatch(value) is not None


def is_property_value(value: Any) -> bool:
    """Whether a message property can hold `value`: str, bytes, int (64-bit), float, bool, None,
    datetime or uuid.UUID."""
    kind = kind_of(value)
    if kind == "number" and type(value) is int:
        return _INT_MIN <= value <= _INT_MAX
    return kind is not None and kind != "duration"


PROPERTY_TYPES_TEXT = "str, bytes, int (64-bit), float, bool, None, datetime or uuid.UUID"


def is_parameter_value(value: Any) -> bool:
    """Whether a rule's parameter or correlation property can hold `value`: what a message
    property can, or a timedelta (Service Bus's duration type, which the management API carries;
    no message property holds one, so it matches no message property)."""
    return isinstance(value, timedelta) or is_property_value(value)


PARAMETER_TYPES_TEXT = "str, bytes, int (64-bit), float, bool, None, datetime, uuid.UUID or timedelta"


def check_property_value(value: Any, target: str) -> Any:
    """`value` if a message property can hold it, else FilterEvaluationError."""
    if not is_property_value(value):
        raise FilterEvaluationError(f"{target} cannot hold {describe(value)}; properties take {PROPERTY_TYPES_TEXT}")
    return value
