"""What an emulator `Config.json` describes, as typed records: the namespace, its queues, topics,
subscriptions and rules, with options under the names the client's `create_*` and `update_*`
methods take (durations as `timedelta`). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..filters import Filter, SqlRuleAction

FORWARD_OPTIONS = ("forward_to", "forward_dead_lettered_messages_to")
"""Options naming another entity: set once every entity of the file exists."""

LOG_TARGETS = ("File", "Console")
"""Where `Logging.Type` may send the broker's logs."""


@dataclass(frozen=True)
class RuleSpec:
    """A subscription rule: its name, filter and optional action (compiled when read)."""

    name: str
    filter: Filter
    action: SqlRuleAction | None = None


@dataclass(frozen=True)
class QueueSpec:
    """A queue and its options."""

    name: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class SubscriptionSpec:
    """A subscription, its options and its rules; no rules means the `$Default` rule that takes
    every message, as a new subscription has."""

    name: str
    options: Mapping[str, Any]
    rules: tuple[RuleSpec, ...] = ()


@dataclass(frozen=True)
class TopicSpec:
    """A topic, its options and its subscriptions."""

    name: str
    options: Mapping[str, Any]
    subscriptions: tuple[SubscriptionSpec, ...] = ()


@dataclass(frozen=True)
class EmulatorConfig:
    """A whole `Config.json`: one namespace's entities, and where logs go (`LOG_TARGETS`)."""

    namespace: str
    queues: tuple[QueueSpec, ...] = ()
    topics: tuple[TopicSpec, ...] = ()
    logging: tuple[str, ...] = field(default=("File",))

    @property
    def partitioned(self) -> bool:
        """Whether any queue or topic asks for partitioning (`EnablePartitioning`)."""
        return any(e.options.get("enable_partitioning") for e in (*self.queues, *self.topics))

    def summary(self) -> str:
        """The entities in a few words: "2 queues, 1 topic (3 subscriptions, 4 rules)"."""
        subscriptions = [s for t in self.topics for s in t.subscriptions]
        rules = sum(len(s.rules) for s in subscriptions)
        return (f"{_count(len(self.queues), 'queue')}, {_count(len(self.topics), 'topic')} "
                f"({_count(len(subscriptions), 'subscription')}, {_count(rules, 'rule')})")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
