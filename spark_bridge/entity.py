"""Which entity a DataFrame or Dataset goes to or comes from, checked before any data moves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray_broker as rb
from ray_broker.errors import InvalidArgumentError, MessagingEntityNotFoundError

MODES = ("receive", "peek")
"""How entities are read: `receive` consumes (peek-lock, completed once handed over), `peek` browses."""


@dataclass(frozen=True)
class Entity:
    """A queue, a topic (to write) or a subscription (to read) that exists.

    Args:
        name: the queue's or topic's name.
        subscription: the subscription read from (None for a queue, or a topic written to).
        kind: "queue" or "topic".
        partitions: the partition indexes that hold the entity's messages, as sequence numbers
            name them (every partition of a partitioned entity; [0] for a non-partitioned one).
        duplicate_detection: whether the entity detects duplicates (message ids are then keys).
    """

    name: str
    subscription: str | None
    kind: str
    partitions: tuple[int, ...]
    duplicate_detection: bool = False

    def sender(self, ns: rb.Namespace) -> rb.Sender:
        """A sender to the entity."""
        return ns.get_queue_sender(self.name) if self.kind == "queue" else ns.get_topic_sender(self.name)

    def async_sender(self, ns: Any) -> Any:
        """A sender to the entity from an async namespace handle (`ray_broker.aio.Namespace`)."""
        return ns.get_queue_sender(self.name) if self.kind == "queue" else ns.get_topic_sender(self.name)

    def receiver(self, ns: rb.Namespace, max_wait_time: float | None,
                 partitions: tuple[int, ...] | None = None) -> rb.Receiver:
        """A peek-lock receiver of the queue or subscription (taking messages from `partitions`
        only, when given)."""
        if self.subscription is None:
            return ns.get_queue_receiver(self.name, receive_mode=rb.ReceiveMode.PEEK_LOCK,
                                         max_wait_time=max_wait_time, partitions=partitions)
        return ns.get_subscription_receiver(self.name, self.subscription, receive_mode=rb.ReceiveMode.PEEK_LOCK,
                                            max_wait_time=max_wait_time, partitions=partitions)

    def describe(self) -> str:
        """The entity in words, for messages."""
        return f"{self.kind} {self.name!r}" + ("" if self.subscription is None else
                                               f", subscription {self.subscription!r}")


def _partitions(ns: rb.Namespace, partitioned: bool) -> tuple[int, ...]:
    return tuple(range(ns.partition_count)) if partitioned else (0,)


def entity_to_write(ns: rb.Namespace, name: str) -> Entity:
    """The queue, else the topic, named `name`; `MessagingEntityNotFoundError` when neither exists."""
    try:
        queue = ns.get_queue(name)
        return Entity(name, None, "queue", _partitions(ns, queue.enable_partitioning),
                      queue.requires_duplicate_detection)
    except MessagingEntityNotFoundError:
        pass
    try:
        topic = ns.get_topic(name)
    except MessagingEntityNotFoundError:
        raise MessagingEntityNotFoundError(
            f"namespace {ns.name!r} has no queue or topic named {name!r}; create it (ns.create_queue or "
            "ns.create_topic) before writing to it", entity=name) from None
    return Entity(name, None, "topic", _partitions(ns, topic.enable_partitioning), topic.requires_duplicate_detection)


def entity_to_read(ns: rb.Namespace, name: str, subscription: str | None) -> Entity:
    """The queue `name`, or subscription `subscription` of topic `name`, checked to exist."""
    if subscription is not None:
        topic = ns.get_topic(name)
        ns.get_subscription(name, subscription)
        return Entity(name, subscription, "topic", _partitions(ns, topic.enable_partitioning))
    try:
        queue = ns.get_queue(name)
    except MessagingEntityNotFoundError:
        hint = "; it is a topic: pass subscription= to read one of its subscriptions" \
            if any(t.name == name for t in ns.list_topics()) else "; create it first"
        raise MessagingEntityNotFoundError(f"namespace {ns.name!r} has no queue named {name!r}{hint}",
                                           entity=name) from None
    return Entity(name, None, "queue", _partitions(ns, queue.enable_partitioning))


def check_mode(mode: Any) -> str:
    """`mode` if it is a read mode, else `InvalidArgumentError`."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be 'receive' (consume) or 'peek' (browse), got {mode!r}")
    return str(mode)


def check_count(name: str, value: Any, *, optional: bool) -> int | None:
    """A positive int count (or None when `optional`), else `InvalidArgumentError`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive int{' or None' if optional else ''}, got {value!r}")
    return value
