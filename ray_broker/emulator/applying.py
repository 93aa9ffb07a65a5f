"""An `EmulatorConfig` made true of a namespace: each queue, topic and subscription it names is
created, or updated where its options differ; each such subscription's rules become exactly the
file's (the `$Default` rule that takes every message when the file gives none). Entities the file
does not name are left alone. Applying the same file again changes nothing.

Forwarding is set last, once every entity it may name exists. Works through any handle with the
client's management methods (`rb.Namespace`); nothing here imports Ray.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

from ..errors import ServiceBusError
from ..filters import DEFAULT_RULE_NAME, RuleProperties, TrueFilter
from .model import FORWARD_OPTIONS, EmulatorConfig, RuleSpec, SubscriptionSpec

T = TypeVar("T")

DEFAULT_RULES = (RuleSpec(DEFAULT_RULE_NAME, TrueFilter()),)
"""The rules of a subscription the file gives none."""


@dataclass
class Applied:
    """What applying a file did: entities and rules created, changed and found as the file says."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """"3 created, 1 updated, 2 unchanged"."""
        return f"{len(self.created)} created, {len(self.updated)} updated, {len(self.unchanged)} unchanged"


def apply_config(ns: Any, config: EmulatorConfig, source: str = "Config.json") -> Applied:
    """Make `config` true of namespace handle `ns`; a refusal of the broker (an option that cannot
    change on an entity that exists, say) is raised as its own type, its message naming `source`
    and the entity."""
    applied = Applied()
    queues = {q.name.lower(): q for q in ns.list_queues()}
    topics = {t.name.lower(): t for t in ns.list_topics()}
    for queue in config.queues:
        _guarded(source, f"queue {queue.name!r}", lambda: _entity(
            applied, f"queue {queue.name}", queues.get(queue.name.lower()), _without_forwards(queue.options),
            lambda options: ns.create_queue(queue.name, **options),
            lambda changes: ns.update_queue(queue.name, **changes)))
    for topic in config.topics:
        _guarded(source, f"topic {topic.name!r}", lambda: _entity(
            applied, f"topic {topic.name}", topics.get(topic.name.lower()), topic.options,
            lambda options: ns.create_topic(topic.name, **options),
            lambda changes: ns.update_topic(topic.name, **changes)))
    for topic in config.topics:
        existing = {s.name.lower(): s for s in ns.list_subscriptions(topic.name)}
        for sub in topic.subscriptions:
            where = f"subscription {sub.name!r} of topic {topic.name!r}"
            _guarded(source, where, lambda: _entity(
                applied, f"subscription {topic.name}/{sub.name}", existing.get(sub.name.lower()),
                _without_forwards(sub.options),
                lambda options: ns.create_subscription(topic.name, sub.name, **options),
                lambda changes: ns.update_subscription(topic.name, sub.name, **changes)))
            _guarded(source, where, lambda: _rules(ns, applied, topic.name, sub))
    for queue in config.queues:
        _guarded(source, f"queue {queue.name!r}", lambda: _forwards(
            ns.get_queue(queue.name), queue.options, lambda changes: ns.update_queue(queue.name, **changes)))
    for topic in config.topics:
        for sub in topic.subscriptions:
            _guarded(source, f"subscription {sub.name!r} of topic {topic.name!r}", lambda: _forwards(
                ns.get_subscription(topic.name, sub.name), sub.options,
                lambda changes: ns.update_subscription(topic.name, sub.name, **changes)))
    return applied


def _guarded(source: str, where: str, work: Callable[[], T]) -> T:
    """`work()`, a broker refusal raised again (same type) with `source` and `where` in front."""
    try:
        return work()
    except ServiceBusError as exc:
        raise type(exc)(f"applying {source}: {where}: {exc.message}", entity=exc.entity) from None


def _without_forwards(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k not in FORWARD_OPTIONS}


def _differences(current: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """The `options` whose values differ from the properties object `current`."""
    return {k: v for k, v in options.items() if getattr(current, k) != v}


def _entity(applied: Applied, label: str, current: Any, options: Mapping[str, Any],
            create: Callable[[dict[str, Any]], Any], update: Callable[[dict[str, Any]], Any]) -> None:
    """Create the entity with `options`, or update those of its options that differ."""
    if current is None:
        create(dict(options))
        applied.created.append(label)
        return
    changes = _differences(current, options)
    if changes:
        update(changes)
        applied.updated.append(label)
    else:
        applied.unchanged.append(label)


def _forwards(current: Any, options: Mapping[str, Any], update: Callable[[dict[str, Any]], Any]) -> None:
    """Set the forwarding options that differ."""
    changes = _differences(current, {k: options[k] for k in FORWARD_OPTIONS if k in options})
    if changes:
        update(changes)


def _rules(ns: Any, applied: Applied, topic: str, sub: SubscriptionSpec) -> None:
    """Make the subscription's rules the file's: create what is missing, replace what differs,
    then remove what the file does not name (so the subscription never has no rule)."""
    wanted = sub.rules or DEFAULT_RULES
    current = {r.name.lower(): r for r in ns.list_rules(topic, sub.name)}
    for rule in wanted:
        label = f"rule {topic}/{sub.name}/{rule.name}"
        have = current.get(rule.name.lower())
        if have is None:
            ns.create_rule(topic, sub.name, rule.name, filter=rule.filter, action=rule.action)
            applied.created.append(label)
        elif have.filter != rule.filter or have.action != rule.action:
            ns.update_rule(topic, sub.name, RuleProperties(have.name, rule.filter, rule.action))
            applied.updated.append(label)
        else:
            applied.unchanged.append(label)
    names = {rule.name.lower() for rule in wanted}
    for key, rule in current.items():
        if key not in names:
            ns.delete_rule(topic, sub.name, rule.name)
