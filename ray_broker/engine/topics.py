"""Topic rules on one partition: adding, replacing and removing a subscription's rules.

A subscription's rules live in its definition (`rules`, each as `filters.rule_to_wire` gives it)
and apply to the messages enqueued after they change (see `fanout`). Each change is applied on
every partition the subscription lives on, and repeating one is harmless, so that a retried
broadcast leaves every partition alike.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import InvalidOperationError, MessagingEntityAlreadyExistsError, MessagingEntityNotFoundError
from .state import PartitionState


def add_rule(state: PartitionState, subscription: str, rule: Mapping[str, Any]) -> dict[str, Any]:
    """Add a rule to a subscription; the same rule again is a no-op, another rule of that name is
    `MessagingEntityAlreadyExistsError`. Returns the subscription's definition."""
    definition = _subscription(state, subscription)
    rules = list(definition.get("rules", ()))
    existing = next((r for r in rules if r["name"].lower() == str(rule["name"]).lower()), None)
    if existing is not None:
        if existing == dict(rule):
            return definition
        raise state.error(MessagingEntityAlreadyExistsError, f"subscription {definition['name']!r} already has a rule "
                          f"named {existing['name']!r}; delete it first or choose another name", definition["name"])
    return state.put_definition({**definition, "rules": [*rules, dict(rule)]})


def replace_rule(state: PartitionState, subscription: str, rule: Mapping[str, Any]) -> dict[str, Any]:
    """Replace the filter and action of a subscription's rule (found by name, ignoring case) with
    those of `rule`, in one store transaction; the rule keeps its name, its place among the rules
    and its creation time. `MessagingEntityNotFoundError` if the subscription has no rule of that
    name. Returns the subscription's definition."""
    definition = _subscription(state, subscription)
    rules = [dict(r) for r in definition.get("rules", ())]
    index = next((i for i, r in enumerate(rules) if r["name"].lower() == str(rule["name"]).lower()), None)
    if index is None:
        raise state.error(MessagingEntityNotFoundError, f"subscription {definition['name']!r} has no rule named "
                          f"{rule['name']!r}; create it with create_rule", definition["name"])
    replaced = {**rules[index], "filter": rule["filter"], "action": rule.get("action")}
    if replaced == rules[index]:
        return definition
    rules[index] = replaced
    return state.put_definition({**definition, "rules": rules})


def remove_rule(state: PartitionState, subscription: str, name: str) -> dict[str, Any]:
    """Remove a subscription's rule by name (a no-op if it is not there); the subscription's
    definition."""
    definition = _subscription(state, subscription)
    rules = [r for r in definition.get("rules", ()) if r["name"].lower() != name.lower()]
    if len(rules) == len(definition.get("rules", ())):
        return definition
    return state.put_definition({**definition, "rules": rules})


def _subscription(state: PartitionState, name: str) -> dict[str, Any]:
    definition = state.definitions.get(name.lower(), None)  # type: ignore[arg-type]
    if definition is None:
        raise state.not_found(name)
    if definition["kind"] != "subscription":
        raise state.error(InvalidOperationError, f"{definition['name']!r} is a {definition['kind']}, not a "
                          "subscription; rules belong to subscriptions", definition["name"])
    return definition
