"""The rules of a subscription compiled once, and the selection they make for each message.

Service Bus semantics: the rules without an action that match give the message once, unchanged
(`Selection.plain`); each rule with an action that matches gives its own copy, changed by the
action and carrying the rule's name in the property "RuleName"; no rule matching, or no rules at
all, gives nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import InvalidArgumentError
from .correlation import correlation_condition
from .model import CorrelationFilter, Filter, rule_from_wire
from .properties import MessageView
from .sql import Action, Condition, compile_action, compile_condition
from .values import FilterEvaluationError

RULE_NAME_PROPERTY = "RuleName"
_NO_MESSAGE: Mapping[str, Any] = {}


@dataclass(frozen=True)
class Selection:
    """What the rules of a subscription make of one message.

    `plain`: deliver the message once, unchanged. `copies`: one new wire dict per matching rule
    with an action. `error`: the description of the first filter or action that failed (that rule
    counted as not matching), or None. The selections without copies and without error are shared
    instances: treat every Selection as read-only.
    """

    plain: bool
    copies: list[dict[str, Any]]
    error: str | None = None


NOTHING = Selection(False, [])
"""No rule matched."""
PLAIN = Selection(True, [])
"""Only rules without actions matched: the message once, unchanged."""


@dataclass(frozen=True)
class _Rule:
    name: str
    evaluate: Callable[[MessageView], bool | None]
    constant: bool | None
    action: Action | None
    filter_text: str
    action_text: str


class CompiledRules:
    """The rules of one subscription, compiled once.

    >>> from ray_broker.filters import SqlFilter, RuleProperties, rule_to_wire
    >>> rules = compile_rules([rule_to_wire(RuleProperties("big", SqlFilter("user.size > 10")))])
    >>> rules.select({"application_properties": {"size": 11}}, {}).plain
    True

    `needs_properties` is False when no rule depends on the message (every rule is a constant
    filter, such as TrueFilter or FalseFilter, without an action): `select` then ignores its
    arguments and the caller need not decode the message.
    """

    __slots__ = ("needs_properties", "_rules", "_fixed")

    def __init__(self, rules: Sequence[_Rule]) -> None:
        live = tuple(rule for rule in rules if rule.constant is not False)
        self._rules = live
        self.needs_properties: bool = any(rule.constant is None or rule.action is not None for rule in live)
        self._fixed: Selection | None = None
        if not self.needs_properties:
            self._fixed = PLAIN if live else NOTHING

    def select(self, wire: Mapping[str, Any] | None, system: Mapping[str, Any]) -> Selection:
        """Apply the rules to one message.

        `wire` is the message's wire dict (None is taken as a message without properties);
        `system` holds the broker's values: sequence_number, enqueued_time_utc (aware UTC datetime),
        enqueued_sequence_number, size, delivery_count. Neither is changed.
        """
        fixed = self._fixed
        if fixed is not None:
            return fixed
        if wire is None:
            wire = _NO_MESSAGE
        view = MessageView(wire, system)
        plain = False
        copies: list[dict[str, Any]] = []
        error = None
        for rule in self._rules:
            if rule.constant is None:
                try:
                    if rule.evaluate(view) is not True:
                        continue
                except FilterEvaluationError as exc:
                    error = error or f'rule "{rule.name}": the filter {rule.filter_text} failed: {exc.description}'
                    continue
            if rule.action is None:
                plain = True
                continue
            try:
                copy = rule.action(wire, system)
            except FilterEvaluationError as exc:
                error = error or f'rule "{rule.name}": the action "{rule.action_text}" failed: {exc.description}'
                continue
            copy["application_properties"][RULE_NAME_PROPERTY] = rule.name
            copies.append(copy)
        if not copies and error is None:
            return PLAIN if plain else NOTHING
        return Selection(plain, copies, error)

    def __repr__(self) -> str:
        return f"CompiledRules({[rule.name for rule in self._rules]}, needs_properties={self.needs_properties})"


def _condition(filter: Filter) -> Condition:
    if isinstance(filter, CorrelationFilter):
        return Condition(correlation_condition(filter.fields(), filter.properties), None)
    return compile_condition(filter.sql_expression, filter.parameters)


def compile_rules(rules: Sequence[Mapping[str, Any]]) -> CompiledRules:
    """Compile a subscription's rules, given in their wire form (`rule_to_wire` output).

    Rules apply in the order given (the first failure is the one reported). SQL texts are
    compiled through a cache, so compiling the same rules again is cheap; the result depends on
    nothing but `rules` and can be kept for as long as the rules do not change.
    """
    if isinstance(rules, (str, bytes, Mapping)) or not isinstance(rules, Sequence):
        raise InvalidArgumentError(f"compile_rules takes a list of rule wire dicts, not {type(rules).__name__}")
    compiled = []
    for wire in rules:
        rule = rule_from_wire(wire)
        condition = _condition(rule.filter)
        action = None if rule.action is None else compile_action(rule.action.sql_expression, rule.action.parameters)
        filter_text = (f'"{rule.filter.sql_expression}"' if not isinstance(rule.filter, CorrelationFilter)
                       else repr(rule.filter))
        compiled.append(_Rule(rule.name, condition.evaluate, condition.constant, action, filter_text,
                              "" if rule.action is None else rule.action.sql_expression))
    return CompiledRules(compiled)
