"""Subscription rules as the `$management` rule operations carry them. Pure.

`com.microsoft:add-rule` takes a `rule-description` map with one of `sql-filter`
(`{"expression": text}`) or `correlation-filter` (`correlation-id`, `message-id`, `to`,
`reply-to`, `label`, `session-id`, `reply-to-session-id`, `content-type`, `properties`), and
optionally `sql-rule-action` (`{"expression": text}`); a description with neither filter takes
the TrueFilter.

`com.microsoft:enumerate-rules` answers each rule as `com.microsoft:rule-description:list`, an
AMQP described list `[filter, action, name]` whose filter and action are described lists too,
with the descriptor codes Service Bus documents (the filters' codes have one hex digit fewer than
the actions'):

    rule-description   0x0000013700000004   [filter, action, name]
    sql-filter         0x000001370000006    [expression]
    true-filter        0x000001370000007    []
    false-filter       0x000001370000008    []
    correlation-filter 0x000001370000009    [correlation-id, message-id, to, reply-to, label,
                                             session-id, reply-to-session-id, content-type, properties]
    empty-rule-action  0x0000013700000005   []
    sql-rule-action    0x0000013700000006   [expression]
"""
from __future__ import annotations

from typing import Any, Mapping

from proton import Described, ulong

from ..errors import InvalidArgumentError
from ..filters import CorrelationFilter, FalseFilter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter

RULE_DESCRIPTION_CODE = 0x0000013700000004
SQL_FILTER_CODE = 0x000001370000006
TRUE_FILTER_CODE = 0x000001370000007
FALSE_FILTER_CODE = 0x000001370000008
CORRELATION_FILTER_CODE = 0x000001370000009
EMPTY_ACTION_CODE = 0x0000013700000005
SQL_ACTION_CODE = 0x0000013700000006

CORRELATION_KEYS = (("correlation-id", "correlation_id"), ("message-id", "message_id"), ("to", "to"),
                    ("reply-to", "reply_to"), ("label", "subject"), ("session-id", "session_id"),
                    ("reply-to-session-id", "reply_to_session_id"), ("content-type", "content_type"))
"""The correlation filter's fields: the wire key, the `CorrelationFilter` attribute (in list order)."""
TRUE_EXPRESSION, FALSE_EXPRESSION = "1=1", "1=0"


def rule_from_description(name: Any, description: Any) -> RuleProperties:
    """The rule an add-rule request describes (`InvalidArgumentError` naming what is wrong)."""
    if not isinstance(description, Mapping):
        raise InvalidArgumentError("add-rule takes a rule-description map (with sql-filter or correlation-filter)")
    fields = {str(k): v for k, v in description.items()}
    sql, correlation = fields.get("sql-filter"), fields.get("correlation-filter")
    if sql is not None and correlation is not None:
        raise InvalidArgumentError("a rule-description has sql-filter or correlation-filter, not both")
    action = fields.get("sql-rule-action")
    return RuleProperties(
        str(name),
        _correlation_filter(correlation) if correlation is not None
        else TrueFilter() if sql is None else _sql_filter(_expression(sql, "sql-filter")),
        None if action is None else SqlRuleAction(_expression(action, "sql-rule-action")))


def _expression(section: Any, key: str) -> str:
    if not isinstance(section, Mapping) or not isinstance(section.get("expression"), str):
        raise InvalidArgumentError(f"{key} must be a map with an 'expression' string")
    return str(section["expression"])


def _sql_filter(expression: str) -> SqlFilter:
    """The filter an expression gives: `1=1` and `1=0` are the TrueFilter and FalseFilter."""
    compact = expression.replace(" ", "")
    return TrueFilter() if compact == TRUE_EXPRESSION else FalseFilter() if compact == FALSE_EXPRESSION \
        else SqlFilter(expression)


def _correlation_filter(section: Any) -> CorrelationFilter:
    if not isinstance(section, Mapping):
        raise InvalidArgumentError("correlation-filter must be a map of its fields")
    fields = {str(k): v for k, v in section.items()}
    properties = fields.get("properties")
    return CorrelationFilter(**{attr: None if fields.get(key) is None else str(fields[key])
                                for key, attr in CORRELATION_KEYS},
                             properties={str(k): v for k, v in properties.items()} if isinstance(properties, Mapping)
                             else properties)


def described_rule(rule: RuleProperties) -> Described:
    """A rule as enumerate-rules answers it: a described `[filter, action, name]`."""
    return Described(ulong(RULE_DESCRIPTION_CODE), [_described_filter(rule.filter), _described_action(rule.action),
                                                    rule.name])


def _described_filter(rule_filter: Any) -> Described:
    if isinstance(rule_filter, CorrelationFilter):
        values: list[Any] = [getattr(rule_filter, attr) for _, attr in CORRELATION_KEYS]
        return Described(ulong(CORRELATION_FILTER_CODE), [*values, dict(rule_filter.properties)])
    if isinstance(rule_filter, TrueFilter):
        return Described(ulong(TRUE_FILTER_CODE), [])
    if isinstance(rule_filter, FalseFilter):
        return Described(ulong(FALSE_FILTER_CODE), [])
    return Described(ulong(SQL_FILTER_CODE), [rule_filter.sql_expression])


def _described_action(action: SqlRuleAction | None) -> Described:
    if action is None:
        return Described(ulong(EMPTY_ACTION_CODE), [])
    return Described(ulong(SQL_ACTION_CODE), [action.sql_expression])
