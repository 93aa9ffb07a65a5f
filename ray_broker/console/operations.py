"""What the console's pages ask of a namespace, each through the public client (`rb.Namespace`:
its management calls, runtime properties, peek, `purge`, `resubmit_dead_letters`, senders) and
`ray-broker status`'s partition survey, so the console obeys the same rules as every client."""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable

from ..cli.options import SUBSCRIPTIONS, Entity, not_found, receivable, sendable
from ..cli.status import partition_statuses, survey_replicas
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from . import views

MAX_PEEK = 200
"""The most messages one page of the message browser shows."""
MAX_SEND = 1000
"""The most test messages one send makes."""
KEYS_TTL_S = 2.0
"""How long the console trusts the keys it last read before reading them again (a removed key is
refused from then on)."""


class ConsoleOperations:
    """The namespace's side of every console page and action, on one `rb.Namespace` handle (calls
    may come from several threads). `clock` gives seconds, for throughput and the keys' age."""

    def __init__(self, ns: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.ns = ns
        self._clock = clock
        self._lock = threading.Lock()
        self._last: views.Sample | None = None
        self._keys: tuple[float, list[Any]] | None = None

    # ------------------------------------------------------------------ reading

    def overview(self) -> dict[str, Any]:
        """The namespace, its partitions (health, counts, share of the busiest), replicas when
        replicated, every entity's counts, and messages per second in and out since the last look.

        A partition that is gone shows down in the look that finds it so; the counts asked for next
        make the gateway recreate it from its store, so the next look shows it up again."""
        ns, config = self.ns, self.ns.config
        # partitions first: asking for counts makes the gateway recreate a partition that is gone
        survey = survey_replicas(ns) if config.replicated else None
        statuses = partition_statuses(ns, survey.leaders() if survey is not None else None)
        entities, counted = self._entity_rows()
        now = views.sample(self._clock(), counted)
        with self._lock:
            rates, self._last = views.throughput(self._last, now), now
        return {
            "namespace": {"name": ns.name, "sku": config.sku, "partition_count": ns.partition_count,
                          "replicas": config.replicas, "gateways": config.gateways, "durability": config.durability,
                          "amqp_port": config.amqp_port, "management_port": config.management_port},
            "partitions": views.partition_rows(statuses, [e for e in entities if e["kind"] != "topic"]),
            "replicas": views.replica_rows(survey.rows()) if survey is not None else [],
            "entities": entities,
            "throughput": rates,
        }

    def _entity_rows(self) -> tuple[list[dict[str, Any]], list[Any]]:
        """Every queue, topic and subscription's counts row, and the runtimes of the queues and
        subscriptions (which hold the messages)."""
        ns = self.ns
        rows: list[dict[str, Any]] = []
        holding: list[Any] = []
        for queue in ns.list_queues():
            runtime = ns.get_queue_runtime_properties(queue.name)
            rows.append(views.counts_row("queue", queue.name, runtime))
            holding.append(runtime)
        try:
            topics = ns.list_topics()
        except InvalidOperationError:  # the basic tier has no topics
            topics = []
        for topic in topics:
            rows.append({**views.counts_row("topic", topic.name, ns.get_topic_runtime_properties(topic.name))})
            for sub in ns.list_subscriptions(topic.name):
                runtime = ns.get_subscription_runtime_properties(topic.name, sub.name)
                rows.append(views.counts_row("subscription", f"{topic.name}{SUBSCRIPTIONS}{sub.name}", runtime))
                holding.append(runtime)
        return rows, holding

    def entity(self, kind: str, path: str) -> dict[str, Any]:
        """An entity's page: its properties and counts; a topic's subscriptions with their counts
        and rules; a subscription's rules."""
        ns = self.ns
        if kind == "topic":
            properties = self._topic(path)
            subscriptions = []
            for sub in ns.list_subscriptions(path):
                runtime = ns.get_subscription_runtime_properties(path, sub.name)
                subscriptions.append({**views.counts_row("subscription", f"{path}{SUBSCRIPTIONS}{sub.name}", runtime),
                                      "rules": [views.rule_row(r) for r in ns.list_rules(path, sub.name)]})
            return {"kind": kind, "path": path, "properties": views.properties_document(properties),
                    "runtime": views.counts_row(kind, path, ns.get_topic_runtime_properties(path)),
                    "subscriptions": subscriptions}
        target, properties = self._receivable(kind, path)
        if target.subscription is None:
            runtime = ns.get_queue_runtime_properties(target.name)
            rules: list[dict[str, Any]] = []
        else:
            runtime = ns.get_subscription_runtime_properties(target.name, target.subscription)
            rules = [views.rule_row(r) for r in ns.list_rules(target.name, target.subscription)]
        return {"kind": target.kind, "path": target.path, "properties": views.properties_document(properties),
                "runtime": views.counts_row(target.kind, target.path, runtime), "rules": rules}

    def peek(self, kind: str, path: str, *, dead_letter: bool, from_sequence: int, count: int,
             filter: str | None = None, partition: int | None = None) -> dict[str, Any]:
        """Up to `count` messages of a queue or subscription (or its dead-letter queue) from
        sequence number `from_sequence`, without locking them (those `filter`, SQL over their
        properties, selects; of partition `partition` only when given), and where the next page
        starts."""
        import ray_broker as rb

        if not 1 <= count <= MAX_PEEK:
            raise InvalidArgumentError(f"count must be from 1 to {MAX_PEEK}, got {count}")
        target, _ = self._receivable(kind, path)
        messages = self.ns.peek_messages(target.path, count, sequence_number=from_sequence,
                                         sub_queue=rb.SubQueue.DEAD_LETTER if dead_letter else None,
                                         filter=filter or None, partition=partition)
        return {"messages": [views.message_document(m) for m in messages],
                "next": messages[-1].sequence_number + 1 if len(messages) == count else None}

    # ------------------------------------------------------------------ acting

    def purge(self, kind: str, path: str, *, dead_letter: bool) -> dict[str, Any]:
        """Remove every message of a queue or subscription (or of its dead-letter queue)."""
        import ray_broker as rb

        target, _ = self._receivable(kind, path)
        removed = self.ns.purge(target.path, sub_queue=rb.SubQueue.DEAD_LETTER if dead_letter else None)
        return {"entity": target.path, "dead_letter": dead_letter, "removed": removed}

    def resubmit(self, kind: str, path: str, *, sequence_numbers: list[int] | None, to: str | None,
                 filter: str | None = None) -> dict[str, Any]:
        """Move dead letters (all, or those with `sequence_numbers`, and of those the ones `filter`
        selects) back to their entity or to `to`."""
        target, _ = self._receivable(kind, path)
        if to is not None:
            sendable(self.ns, to)
        moved = self.ns.resubmit_dead_letters(target.path, sequence_numbers=sequence_numbers, filter=filter or None,
                                              to=to)
        return {"entity": target.path, "to": to, "resubmitted": moved}

    def send(self, path: str, *, body: str, count: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Send `count` test messages with `body` and `fields` (subject, content type, ids, typed
        application properties) to a queue or topic."""
        import ray_broker as rb

        if not 1 <= count <= MAX_SEND:
            raise InvalidArgumentError(f"count must be from 1 to {MAX_SEND}, got {count}")
        target = sendable(self.ns, path)
        try:
            messages = [rb.Message(body, message_id=fields.get("message_id") or uuid.uuid4().hex,
                                   **{k: v for k, v in fields.items() if k != "message_id"})
                        for _ in range(count)]
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(str(exc)) from None
        make = self.ns.get_queue_sender if target.kind == "queue" else self.ns.get_topic_sender
        with make(target.name) as sender:
            sender.send_messages(messages)
        return {"entity": target.path, "sent": count}

    # ------------------------------------------------------------------ keys

    def keys(self) -> list[Any]:
        """The namespace's shared access keys, read again once they are `KEYS_TTL_S` old."""
        now = self._clock()
        with self._lock:
            cached = self._keys
        if cached is not None and now - cached[0] < KEYS_TTL_S:
            return cached[1]
        keys = self.ns.list_shared_access_keys()
        with self._lock:
            self._keys = (now, keys)
        return keys

    # ------------------------------------------------------------------ naming

    def _receivable(self, kind: str, path: str) -> tuple[Entity, Any]:
        if kind not in ("queue", "subscription"):
            raise InvalidArgumentError(f"messages are kept by queues and subscriptions, not by a {kind!r}: open a "
                                       "queue or one of a topic's subscriptions")
        if (kind == "subscription") != (SUBSCRIPTIONS in path.lower()):
            raise InvalidArgumentError(f"{path!r} is not a {kind}'s path: a subscription is "
                                       f"TOPIC{SUBSCRIPTIONS}SUBSCRIPTION, a queue its name")
        return receivable(self.ns, path, "peek")

    def _topic(self, name: str) -> Any:
        try:
            return self.ns.get_topic(name)
        except (MessagingEntityNotFoundError, InvalidOperationError):
            raise not_found(Entity("topic", name), self.ns.name) from None
