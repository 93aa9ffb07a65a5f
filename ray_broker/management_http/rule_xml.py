"""Rule descriptions (the XML inside a rule's ATOM entry) <-> the broker's `RuleProperties`:
SQL, correlation, true and false filters, SQL actions, and their typed parameters. Pure.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

from ..errors import InvalidArgumentError
from ..filters import CorrelationFilter, FalseFilter, Filter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter
from .atom import XSD, XSI_TYPE, sb, timestamp
from .descriptions import local_name
from .durations import format_duration, parse_duration

COMPATIBILITY_LEVEL = "20"
CORRELATION_FIELDS = (("CorrelationId", "correlation_id"), ("MessageId", "message_id"), ("To", "to"),
                      ("ReplyTo", "reply_to"), ("Label", "subject"), ("SessionId", "session_id"),
                      ("ReplyToSessionId", "reply_to_session_id"), ("ContentType", "content_type"))
"""Correlation filter elements and the broker's names for them."""
KEY_VALUE = "KeyValueOfstringanyType"
_VALUE_READERS: Mapping[str, Callable[[str], Any]] = {
    "string": str,
    "int": int,
    "long": int,
    "double": float,
    "boolean": lambda text: text.strip().lower() == "true",
    "dateTime": lambda text: datetime.fromisoformat(text.strip().replace("Z", "+00:00")),
    "duration": lambda text: _duration(text),
}


def _duration(text: str) -> timedelta:
    """A duration value (ISO 8601); Service Bus's "never" as `timedelta.max`."""
    seconds = parse_duration(text, "a duration")
    return timedelta.max if seconds is None else timedelta(seconds=seconds)


def _child_text(element: ET.Element, name: str) -> str | None:
    found = element.find(sb(name))
    return None if found is None else (found.text or "")


def _kind(element: ET.Element) -> str:
    return element.get(XSI_TYPE, "").split(":")[-1]


def read_key_values(parent: ET.Element | None) -> dict[str, Any] | None:
    """The typed key-value pairs under a `Parameters` or `Properties` element (None if absent or
    empty)."""
    if parent is None or not len(parent):
        return None
    pairs: dict[str, Any] = {}
    for pair in parent:
        key, value = pair.find(sb("Key")), pair.find(sb("Value"))
        if local_name(pair.tag) != KEY_VALUE or key is None or not key.text or value is None:
            raise InvalidArgumentError(f"{local_name(parent.tag)} must hold {KEY_VALUE} elements, each with a Key "
                                       "and a Value")
        kind = _kind(value) or "string"
        if kind not in _VALUE_READERS:
            raise InvalidArgumentError(f"{local_name(parent.tag)} {key.text!r}: values of type {kind!r} are not "
                                       f"supported; use one of {', '.join(_VALUE_READERS)}")
        try:
            pairs[key.text] = _VALUE_READERS[kind](value.text or "")
        except (ValueError, InvalidArgumentError):
            raise InvalidArgumentError(f"{local_name(parent.tag)} {key.text!r}: {value.text!r} is not a "
                                       f"{kind}") from None
    return pairs


def _value_type(value: Any) -> tuple[str, str]:
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        return ("int" if -2**31 <= value < 2**31 else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return "dateTime", value.isoformat()  # as it was sent: without a zone
        return "dateTime", value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, timedelta):
        return "duration", format_duration(value.total_seconds())
    return "string", str(value)


def write_key_values(parent: ET.Element, name: str, pairs: Mapping[str, Any] | None) -> None:
    """Add `pairs` as a `name` element (Parameters, Properties) of typed key-value pairs."""
    holder = ET.SubElement(parent, sb(name))
    for key, value in (pairs or {}).items():
        pair = ET.SubElement(holder, sb(KEY_VALUE))
        ET.SubElement(pair, sb("Key")).text = key
        kind, text = _value_type(value)
        ET.SubElement(pair, sb("Value"), {XSI_TYPE: f"d6p1:{kind}", "xmlns:d6p1": XSD}).text = text


def read_filter(element: ET.Element | None) -> Filter:
    """The broker filter a `Filter` element describes (TrueFilter when there is none)."""
    if element is None:
        return TrueFilter()
    kind = _kind(element)
    if kind == "TrueFilter":
        return TrueFilter()
    if kind == "FalseFilter":
        return FalseFilter()
    if kind == "SqlFilter":
        return SqlFilter(_child_text(element, "SqlExpression") or "",
                         read_key_values(element.find(sb("Parameters"))))
    if kind == "CorrelationFilter":
        fields = {option: _child_text(element, name) for name, option in CORRELATION_FIELDS}
        return CorrelationFilter(**fields, properties=read_key_values(element.find(sb("Properties"))))
    raise InvalidArgumentError(f"filter type {kind!r} is not supported; use SqlFilter, CorrelationFilter, TrueFilter "
                               "or FalseFilter (as the i:type attribute of Filter)")


def read_action(element: ET.Element | None) -> SqlRuleAction | None:
    """The broker action an `Action` element describes; None for none or an EmptyRuleAction."""
    if element is None or _kind(element) in ("", "EmptyRuleAction"):
        return None
    if _kind(element) != "SqlRuleAction":
        raise InvalidArgumentError(f"rule action type {_kind(element)!r} is not supported; use SqlRuleAction or "
                                   "EmptyRuleAction")
    return SqlRuleAction(_child_text(element, "SqlExpression") or "", read_key_values(element.find(sb("Parameters"))))


def read_rule(description: ET.Element, name: str) -> RuleProperties:
    """The rule named `name` a `RuleDescription` describes."""
    return RuleProperties(name, read_filter(description.find(sb("Filter"))),
                          read_action(description.find(sb("Action"))))


def _write_filter(parent: ET.Element, rule_filter: Filter) -> None:
    if isinstance(rule_filter, CorrelationFilter):
        element = ET.SubElement(parent, sb("Filter"), {XSI_TYPE: "CorrelationFilter"})
        for name, option in CORRELATION_FIELDS:
            value = getattr(rule_filter, option)
            if value is not None:
                ET.SubElement(element, sb(name)).text = value
        write_key_values(element, "Properties", rule_filter.properties)
        return
    kind = {TrueFilter: "TrueFilter", FalseFilter: "FalseFilter"}.get(type(rule_filter), "SqlFilter")
    element = ET.SubElement(parent, sb("Filter"), {XSI_TYPE: kind})
    ET.SubElement(element, sb("SqlExpression")).text = rule_filter.sql_expression
    ET.SubElement(element, sb("CompatibilityLevel")).text = COMPATIBILITY_LEVEL
    write_key_values(element, "Parameters", rule_filter.parameters)


def write_rule(rule: RuleProperties, element_name: str = "RuleDescription") -> ET.Element:
    """The description of a broker rule."""
    element = ET.Element(sb(element_name))
    _write_filter(element, rule.filter)
    if rule.action is None:
        ET.SubElement(element, sb("Action"), {XSI_TYPE: "EmptyRuleAction"})
    else:
        action = ET.SubElement(element, sb("Action"), {XSI_TYPE: "SqlRuleAction"})
        ET.SubElement(action, sb("SqlExpression")).text = rule.action.sql_expression
        ET.SubElement(action, sb("CompatibilityLevel")).text = COMPATIBILITY_LEVEL
        write_key_values(action, "Parameters", rule.action.parameters)
    if rule.created_at_utc is not None:
        ET.SubElement(element, sb("CreatedAt")).text = timestamp(rule.created_at_utc)
    ET.SubElement(element, sb("Name")).text = rule.name
    return element
