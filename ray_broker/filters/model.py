"""Rule filters, rule actions and rules as users build them, and their wire forms.

Every class validates at construction: a SQL text that cannot be parsed raises `RuleSyntaxError`
(with the line and column), a value of the wrong type raises `InvalidArgumentError`. The wire
form (`to_wire()`, `*_from_wire`) holds only plain values, so it travels through msgpack and Ray.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Union

from ..errors import InvalidArgumentError
from .sql import compile_action, compile_condition
from .values import PARAMETER_TYPES_TEXT, describe, is_parameter_value

DEFAULT_RULE_NAME = "$Default"
"""The name of the rule every new subscription gets."""

_RULE_NAME = re.compile(r"[A-Za-z0-9.\-_$]{1,50}")
_CORRELATION_FIELDS = ("correlation_id", "message_id", "to", "reply_to", "subject", "session_id",
                       "reply_to_session_id", "content_type")


def check_rule_name(name: Any) -> str:
    """`name` if it is a valid rule name (1 to 50 letters, digits, ".", "-", "_" or "$");
    InvalidArgumentError otherwise."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a rule name must be a str, not {type(name).__name__}")
    if not _RULE_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"invalid rule name {name!r}: use 1 to 50 characters, each a letter, a digit, '.', '-', '_' or '$'")
    return name


def _check_expression(value: Any, owner: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{owner} takes the SQL text as a str, not {type(value).__name__}")
    return value


class SqlFilter:
    """A filter written in Service Bus SQL: it matches a message when its condition is TRUE.

    >>> f = SqlFilter("sys.label = @label AND user.priority > 3", {"@label": "urgent"})
    >>> f.sql_expression
    'sys.label = @label AND user.priority > 3'
    >>> filter_from_wire(f.to_wire()) == f
    True

    `parameters` gives the values of `@name` placeholders; its keys may be written with or
    without the "@".
    """

    __slots__ = ("sql_expression", "parameters")

    def __init__(self, sql_expression: str, parameters: Mapping[str, Any] | None = None) -> None:
        _check_expression(sql_expression, type(self).__name__)
        compile_condition(sql_expression, parameters)
        self.sql_expression: str = sql_expression
        self.parameters: dict[str, Any] | None = None if parameters is None else dict(parameters)

    def to_wire(self) -> dict[str, Any]:
        """The filter as plain values."""
        return {"type": "sql", "sql_expression": self.sql_expression, "parameters": self.parameters}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_wire() == other.to_wire()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        if self.parameters is None:
            return f"{type(self).__name__}({self.sql_expression!r})"
        return f"{type(self).__name__}({self.sql_expression!r}, parameters={self.parameters!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.sql_expression, self.parameters))


class TrueFilter(SqlFilter):
    """The filter that matches every message (`1=1`).

    >>> TrueFilter().sql_expression
    '1=1'
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("1=1")

    def to_wire(self) -> dict[str, Any]:
        return {"type": "true"}

    def __repr__(self) -> str:
        return "TrueFilter()"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrueFilter, ())


class FalseFilter(SqlFilter):
    """The filter that matches no message (`1=0`).

    >>> FalseFilter().sql_expression
    '1=0'
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("1=0")

    def to_wire(self) -> dict[str, Any]:
        return {"type": "false"}

    def __repr__(self) -> str:
        return "FalseFilter()"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FalseFilter, ())


class CorrelationFilter:
    """A filter of exact, case-sensitive equalities, all of which must hold.

    >>> f = CorrelationFilter(correlation_id="order-7", properties={"region": "eu"})
    >>> f.correlation_id, f.properties
    ('order-7', {'region': 'eu'})

    Each field given must equal the message's field; each entry of `properties` must be present
    on the message and equal to the value. `label` is the older name of `subject`.
    """

    __slots__ = _CORRELATION_FIELDS + ("properties",)

    def __init__(
        self,
        correlation_id: str | None = None,
        message_id: str | None = None,
        to: str | None = None,
        reply_to: str | None = None,
        subject: str | None = None,
        session_id: str | None = None,
        reply_to_session_id: str | None = None,
        content_type: str | None = None,
        properties: Mapping[str, Any] | None = None,
        *,
        label: str | None = None,
    ) -> None:
        if label is not None:
            if subject is not None and subject != label:
                raise InvalidArgumentError(
                    f"CorrelationFilter got subject={subject!r} and label={label!r}; label is the older name of "
                    "subject: give one of them")
            subject = label
        given = {"correlation_id": correlation_id, "message_id": message_id, "to": to, "reply_to": reply_to,
                 "subject": subject, "session_id": session_id, "reply_to_session_id": reply_to_session_id,
                 "content_type": content_type}
        for name, value in given.items():
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(
                    f"CorrelationFilter {name} must be a str or None, not {type(value).__name__}")
            setattr(self, name, value)
        if properties is not None and not isinstance(properties, Mapping):
            raise InvalidArgumentError(
                f"CorrelationFilter properties must be a dict of name to value, not {type(properties).__name__}")
        props = dict(properties or {})
        for key, value in props.items():
            if not isinstance(key, str) or not key:
                raise InvalidArgumentError(f"CorrelationFilter property names must be non-empty str, not {key!r}")
            if not is_parameter_value(value):
                raise InvalidArgumentError(
                    f"CorrelationFilter property {key!r} is {describe(value)}; properties take {PARAMETER_TYPES_TEXT}")
        if not props and all(value is None for value in given.values()):
            raise InvalidArgumentError(
                "a CorrelationFilter needs at least one field or property to compare; use TrueFilter() to match "
                "every message")
        self.properties: dict[str, Any] = props

    @property
    def label(self) -> str | None:
        """The older name of `subject`."""
        return self.subject

    def fields(self) -> dict[str, str]:
        """The message fields this filter compares, by wire key."""
        return {name: getattr(self, name) for name in _CORRELATION_FIELDS if getattr(self, name) is not None}

    def to_wire(self) -> dict[str, Any]:
        """The filter as plain values (fields left None are left out)."""
        wire: dict[str, Any] = {"type": "correlation", **self.fields()}
        if self.properties:
            wire["properties"] = dict(self.properties)
        return wire

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_wire() == other.to_wire()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        parts = [f"{name}={value!r}" for name, value in self.fields().items()]
        if self.properties:
            parts.append(f"properties={self.properties!r}")
        return f"CorrelationFilter({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_correlation_from_wire, (self.to_wire(),))


class SqlRuleAction:
    """An action that changes the copy of a message a rule selects: SET and REMOVE statements.

    >>> a = SqlRuleAction("SET user.tier = 'gold'; REMOVE user.tmp")
    >>> action_from_wire(a.to_wire()) == a
    True

    Statements are separated by ";" (which may also end the text) and apply in order.
    """

    __slots__ = ("sql_expression", "parameters")

    def __init__(self, sql_expression: str, parameters: Mapping[str, Any] | None = None) -> None:
        _check_expression(sql_expression, "SqlRuleAction")
        compile_action(sql_expression, parameters)
        self.sql_expression: str = sql_expression
        self.parameters: dict[str, Any] | None = None if parameters is None else dict(parameters)

    def to_wire(self) -> dict[str, Any]:
        """The action as plain values."""
        return {"type": "sql", "sql_expression": self.sql_expression, "parameters": self.parameters}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_wire() == other.to_wire()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        if self.parameters is None:
            return f"SqlRuleAction({self.sql_expression!r})"
        return f"SqlRuleAction({self.sql_expression!r}, parameters={self.parameters!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SqlRuleAction, (self.sql_expression, self.parameters))


Filter = Union[SqlFilter, CorrelationFilter]
"""Any rule filter: SqlFilter (TrueFilter and FalseFilter are SqlFilters) or CorrelationFilter."""


@dataclass
class RuleProperties:
    """A subscription rule: its name, its filter and its optional action.

    >>> rule = RuleProperties("high", SqlFilter("user.priority > 3"), SqlRuleAction("SET user.lane = 'fast'"))
    >>> rule_from_wire(rule_to_wire(rule)) == rule
    True
    """

    name: str
    filter: Filter = field(default_factory=TrueFilter)
    action: SqlRuleAction | None = None
    created_at_utc: datetime | None = None

    def __post_init__(self) -> None:
        check_rule_name(self.name)
        if not isinstance(self.filter, (SqlFilter, CorrelationFilter)):
            raise InvalidArgumentError(
                f"rule {self.name!r}: filter must be a SqlFilter, CorrelationFilter, TrueFilter or FalseFilter, "
                f"not {type(self.filter).__name__}")
        if self.action is not None and not isinstance(self.action, SqlRuleAction):
            raise InvalidArgumentError(
                f"rule {self.name!r}: action must be a SqlRuleAction or None, not {type(self.action).__name__}")
        if self.created_at_utc is not None and not isinstance(self.created_at_utc, datetime):
            raise InvalidArgumentError(
                f"rule {self.name!r}: created_at_utc must be a datetime or None, not "
                f"{type(self.created_at_utc).__name__}")

    def to_wire(self) -> dict[str, Any]:
        """The rule as plain values."""
        return {"name": self.name, "filter": self.filter.to_wire(),
                "action": None if self.action is None else self.action.to_wire(),
                "created_at_utc": self.created_at_utc}


def _wire_mapping(wire: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(wire, Mapping):
        raise InvalidArgumentError(f"the wire form of {what} must be a dict, not {type(wire).__name__}")
    return wire


def _sql_text(wire: Mapping[str, Any], what: str) -> str:
    if "sql_expression" not in wire:
        raise InvalidArgumentError(f"the wire form of {what} has no sql_expression: {dict(wire)!r}")
    return wire["sql_expression"]


def _correlation_from_wire(wire: Mapping[str, Any]) -> CorrelationFilter:
    return CorrelationFilter(**{name: wire.get(name) for name in _CORRELATION_FIELDS},
                             properties=wire.get("properties"))


def filter_from_wire(wire: Mapping[str, Any]) -> Filter:
    """The filter a `to_wire()` dict describes."""
    wire = _wire_mapping(wire, "a filter")
    kind = wire.get("type")
    if kind == "true":
        return TrueFilter()
    if kind == "false":
        return FalseFilter()
    if kind == "sql":
        return SqlFilter(_sql_text(wire, "a SQL filter"), wire.get("parameters"))
    if kind == "correlation":
        return _correlation_from_wire(wire)
    raise InvalidArgumentError(f"unknown filter type {kind!r}; the types are 'sql', 'correlation', 'true', 'false'")


def action_from_wire(wire: Mapping[str, Any] | None) -> SqlRuleAction | None:
    """The action a `to_wire()` dict describes; None for None."""
    if wire is None:
        return None
    wire = _wire_mapping(wire, "a rule action")
    if wire.get("type") != "sql":
        raise InvalidArgumentError(f"unknown rule action type {wire.get('type')!r}; the only type is 'sql'")
    return SqlRuleAction(_sql_text(wire, "a SQL rule action"), wire.get("parameters"))


def rule_to_wire(rule: RuleProperties) -> dict[str, Any]:
    """The rule as plain values (the same as `rule.to_wire()`)."""
    if not isinstance(rule, RuleProperties):
        raise InvalidArgumentError(f"rule_to_wire takes a RuleProperties, not {type(rule).__name__}")
    return rule.to_wire()


def rule_from_wire(wire: Mapping[str, Any]) -> RuleProperties:
    """The rule a `to_wire()` dict describes."""
    wire = _wire_mapping(wire, "a rule")
    if "name" not in wire or "filter" not in wire:
        raise InvalidArgumentError(f"the wire form of a rule needs 'name' and 'filter': {dict(wire)!r}")
    return RuleProperties(wire["name"], filter_from_wire(wire["filter"]), action_from_wire(wire.get("action")),
                          wire.get("created_at_utc"))
