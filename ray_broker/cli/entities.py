"""`ray-broker queue|topic|subscription create|delete|list|show|update`: managing a namespace's entities.

Durations are given in seconds and checked against the broker's limits before anything is sent.
"""
from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from typing import Annotated, Any, Callable, Optional

import click
import typer

from ..clock import MAX_DURATION_SECONDS
from ..entities import (
    DEFAULT_DUPLICATE_WINDOW,
    DEFAULT_LOCK_DURATION,
    DEFAULT_MAX_DELIVERY_COUNT,
    MAX_DUP_WINDOW_SECONDS,
    MAX_LOCK_SECONDS,
    MIN_DUP_WINDOW_SECONDS,
)
from . import output
from .namespaces import flags
from .options import (
    DEFAULT_NAMESPACE,
    AddressOption,
    Entity,
    NamespaceOption,
    QueueName,
    SubscriptionName,
    TopicName,
    attach,
    not_found,
)
from .rule_commands import action_text, filter_text

queue_app = typer.Typer(help="Create, delete, list, show and update queues.", no_args_is_help=True)
topic_app = typer.Typer(help="Create, delete, list, show and update topics.", no_args_is_help=True)
subscription_app = typer.Typer(help="Create, delete, list, show and update a topic's subscriptions.",
                               no_args_is_help=True)

Partitioned = Annotated[bool, typer.Option("--partitioned", help="Spread it over every partition.")]
DuplicateDetection = Annotated[bool, typer.Option("--duplicate-detection", help="Drop repeated message ids.")]
DuplicateWindow = Annotated[float, typer.Option(
    "--duplicate-window", min=MIN_DUP_WINDOW_SECONDS, max=MAX_DUP_WINDOW_SECONDS,
    help="Seconds a message id is remembered for duplicate detection.")]
Sessions = Annotated[bool, typer.Option("--sessions", help="Require sessions.")]
LockDuration = Annotated[float, typer.Option(
    "--lock-duration", min=1, max=MAX_LOCK_SECONDS, help="Seconds a received message stays locked.")]
MaxDeliveries = Annotated[int, typer.Option(
    "--max-delivery-count", min=1, help="Deliveries before a message is dead-lettered.")]
Ttl = Annotated[Optional[float], typer.Option(
    "--ttl", min=1, max=MAX_DURATION_SECONDS, help="Default message time to live, seconds.  [default: none]")]
DeadLetterOnExpiry = Annotated[bool, typer.Option(
    "--dead-letter-expired", help="Dead-letter expired messages instead of dropping them.")]
ForwardTo = Annotated[Optional[str], typer.Option("--forward-to", help="Forward every message to this entity.")]
AsJson = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (durations in seconds) instead of tables.")]


def _unless_given(option: Any, kind: type) -> Any:
    """A `create` option as `update` takes it: the same flag, limits and help, None unless given
    (left as it is)."""
    return Annotated[Optional[kind], option.__metadata__[0]]  # type: ignore[valid-type]


UpdateLockDuration = _unless_given(LockDuration, float)
UpdateMaxDeliveries = _unless_given(MaxDeliveries, int)
UpdateDuplicateWindow = _unless_given(DuplicateWindow, float)
UpdateTtl = Annotated[Optional[float], typer.Option(
    "--ttl", min=0, max=MAX_DURATION_SECONDS, help="Default message time to live, seconds (0: none).")]
UpdateDeadLetterOnExpiry = Annotated[Optional[bool], typer.Option(
    "--dead-letter-expired/--no-dead-letter-expired", help="Dead-letter expired messages, or drop them.")]
UpdateForwardTo = Annotated[Optional[str], typer.Option(
    "--forward-to", help="Forward every message to this entity ('': stop forwarding).")]
UpdateStatus = Annotated[Optional[str], typer.Option(
    "--status", help="Active, Disabled, or SendDisabled / ReceiveDisabled where the entity has it.")]
UpdateMetadata = Annotated[Optional[str], typer.Option("--user-metadata", help="Free text kept with the entity.")]

DUPLICATE_WINDOW_S = DEFAULT_DUPLICATE_WINDOW.total_seconds()
LOCK_DURATION_S = DEFAULT_LOCK_DURATION.total_seconds()


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _shown(value: Any) -> Any:
    """A property value as `show` and `list` print it."""
    if isinstance(value, timedelta):
        return "never" if value == timedelta.max else f"{value.total_seconds():g} s"
    return value


def created(what: str, properties: Any) -> str:
    """The line that reports an entity created: with its fixed options in brackets, when it has any
    (`queue 'orders' created (partitioned,sessions)`)."""
    fixed = flags(properties)
    return f"{what} created" + (f" ({fixed})" if fixed != "-" else "")


def _record(properties: Any, runtime: Any) -> dict[str, Any]:
    """An entity as `--json` prints it: its settings, and its counts under "runtime"."""
    return {**output.plain(properties), "runtime": output.plain(runtime)}


def _show(properties: Any, runtime: Any) -> None:
    """Print an entity's settings, its counts and, when it spans several partitions, theirs."""
    output.table(["setting", "value"], [[f.name, _shown(getattr(properties, f.name))] for f in fields(properties)])
    output.out()
    output.table(["availability", "active", "dead-letter", "scheduled", "total", "bytes"],
                 [[runtime.availability, runtime.active_message_count, runtime.dead_letter_message_count,
                   runtime.scheduled_message_count, runtime.total_message_count, runtime.size_in_bytes]])
    if len(runtime.partitions) > 1:
        output.out()
        output.table(["partition", "available", "active", "dead-letter", "scheduled"],
                     [[p.index, "yes" if p.available else "NO", p.active_message_count, p.dead_letter_message_count,
                       p.scheduled_message_count] for p in runtime.partitions])


def _show_entity(entity: Entity, namespace: str, get_properties: Callable[[], Any], get_runtime: Callable[[], Any],
                 as_json: bool) -> None:
    """Print a queue's or topic's settings and counts, as a table or (`as_json`) one JSON document."""
    properties = _found(entity, namespace, get_properties)
    runtime = _found(entity, namespace, get_runtime)
    if as_json:
        output.json_document(_record(properties, runtime))
    else:
        _show(properties, runtime)


def _found(entity: Entity, namespace: str, get: Callable[[], Any]) -> Any:
    """`get()`, with an entity that does not exist reported as the command line words it."""
    from ..errors import MessagingEntityNotFoundError

    try:
        return get()
    except MessagingEntityNotFoundError:
        raise not_found(entity, namespace) from None


# ---------------------------------------------------------------------------------------------- queues


@queue_app.command("create")
def queue_create(name: QueueName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
                 partitioned: Partitioned = False, sessions: Sessions = False,
                 duplicate_detection: DuplicateDetection = False,
                 duplicate_window: DuplicateWindow = DUPLICATE_WINDOW_S, lock_duration: LockDuration = LOCK_DURATION_S,
                 max_delivery_count: MaxDeliveries = DEFAULT_MAX_DELIVERY_COUNT, ttl: Ttl = None,
                 dead_letter_expired: DeadLetterOnExpiry = False, forward_to: ForwardTo = None) -> None:
    """Create a queue."""
    ns = attach(namespace, address)
    queue = ns.create_queue(name, enable_partitioning=partitioned, requires_session=sessions,
                            requires_duplicate_detection=duplicate_detection,
                            duplicate_detection_history_time_window=timedelta(seconds=duplicate_window),
                            lock_duration=timedelta(seconds=lock_duration), max_delivery_count=max_delivery_count,
                            default_message_time_to_live=_seconds(ttl),
                            dead_lettering_on_message_expiration=dead_letter_expired, forward_to=forward_to)
    output.out(created(f"queue {queue.name!r}", queue))


@queue_app.command("delete")
def queue_delete(name: QueueName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None) -> None:
    """Delete a queue and every message in it."""
    ns = attach(namespace, address)
    _found(Entity("queue", name), ns.name, lambda: ns.get_queue(name))
    ns.delete_queue(name)
    output.out(f"queue {name!r} deleted")


@queue_app.command("list")
def queue_list(namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
               as_json: AsJson = False) -> None:
    """List the queues with their settings and message counts."""
    ns = attach(namespace, address)
    queues = [(q, ns.get_queue_runtime_properties(q.name)) for q in ns.list_queues()]
    if as_json:
        output.json_document([_record(q, rt) for q, rt in queues])
        return
    if not queues:
        output.out(f"no queues in namespace {ns.name!r}")
        return
    rows = [[q.name, flags(q), q.status, _shown(q.lock_duration), q.max_delivery_count,
             rt.active_message_count, rt.dead_letter_message_count, rt.scheduled_message_count] for q, rt in queues]
    output.table(["queue", "flags", "status", "lock", "max deliveries", "active", "dead-letter", "scheduled"], rows)


@queue_app.command("show")
def queue_show(name: QueueName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
               as_json: AsJson = False) -> None:
    """Show a queue's settings and counts (per partition when partitioned)."""
    ns = attach(namespace, address)
    _show_entity(Entity("queue", name), ns.name, lambda: ns.get_queue(name),
                 lambda: ns.get_queue_runtime_properties(name), as_json)


# ---------------------------------------------------------------------------------------------- topics


@topic_app.command("create")
def topic_create(name: TopicName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
                 partitioned: Partitioned = False, duplicate_detection: DuplicateDetection = False,
                 duplicate_window: DuplicateWindow = DUPLICATE_WINDOW_S, ttl: Ttl = None) -> None:
    """Create a topic (standard and premium tiers)."""
    ns = attach(namespace, address)
    topic = ns.create_topic(name, enable_partitioning=partitioned, requires_duplicate_detection=duplicate_detection,
                            duplicate_detection_history_time_window=timedelta(seconds=duplicate_window),
                            default_message_time_to_live=_seconds(ttl))
    output.out(created(f"topic {topic.name!r}", topic))


@topic_app.command("delete")
def topic_delete(name: TopicName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None) -> None:
    """Delete a topic, its subscriptions and their messages."""
    ns = attach(namespace, address)
    _found(Entity("topic", name), ns.name, lambda: ns.get_topic(name))
    ns.delete_topic(name)
    output.out(f"topic {name!r} deleted")


@topic_app.command("list")
def topic_list(namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
               as_json: AsJson = False) -> None:
    """List the topics with their subscription counts."""
    ns = attach(namespace, address)
    topics = [(t, ns.get_topic_runtime_properties(t.name)) for t in ns.list_topics()]
    if as_json:
        output.json_document([_record(t, rt) for t, rt in topics])
        return
    if not topics:
        output.out(f"no topics in namespace {ns.name!r}")
        return
    rows = [[t.name, flags(t), t.status, rt.subscription_count, rt.scheduled_message_count] for t, rt in topics]
    output.table(["topic", "flags", "status", "subscriptions", "scheduled"], rows)


@topic_app.command("show")
def topic_show(name: TopicName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
               as_json: AsJson = False) -> None:
    """Show a topic's settings and counts."""
    ns = attach(namespace, address)
    _show_entity(Entity("topic", name), ns.name, lambda: ns.get_topic(name),
                 lambda: ns.get_topic_runtime_properties(name), as_json)


# ---------------------------------------------------------------------------------------------- subscriptions


@subscription_app.command("create")
def subscription_create(topic: TopicName, name: SubscriptionName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                        address: AddressOption = None, sessions: Sessions = False,
                        lock_duration: LockDuration = LOCK_DURATION_S,
                        max_delivery_count: MaxDeliveries = DEFAULT_MAX_DELIVERY_COUNT, ttl: Ttl = None,
                        dead_letter_expired: DeadLetterOnExpiry = False, forward_to: ForwardTo = None,
                        sql_filter: Annotated[Optional[str], typer.Option(
                            "--sql-filter", help="The $Default rule's SQL filter, e.g. \"sys.label = 'x'\". "
                                                 "[default: every message]")] = None) -> None:
    """Create a subscription of a topic."""
    import ray_broker as rb

    ns = attach(namespace, address)
    _found(Entity("topic", topic), ns.name, lambda: ns.get_topic(topic))
    sub = ns.create_subscription(topic, name, requires_session=sessions, lock_duration=timedelta(seconds=lock_duration),
                                 max_delivery_count=max_delivery_count, default_message_time_to_live=_seconds(ttl),
                                 dead_lettering_on_message_expiration=dead_letter_expired, forward_to=forward_to,
                                 rule=None if sql_filter is None else rb.SqlFilter(sql_filter))
    output.out(created(f"subscription {sub.name!r} of topic {topic!r}", sub))


@subscription_app.command("delete")
def subscription_delete(topic: TopicName, name: SubscriptionName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                        address: AddressOption = None) -> None:
    """Delete a subscription and its messages."""
    ns = attach(namespace, address)
    _found(Entity("subscription", topic, name), ns.name, lambda: ns.get_subscription(topic, name))
    ns.delete_subscription(topic, name)
    output.out(f"subscription {name!r} of topic {topic!r} deleted")


@subscription_app.command("list")
def subscription_list(topic: TopicName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                      address: AddressOption = None, as_json: AsJson = False) -> None:
    """List a topic's subscriptions with their message counts."""
    ns = attach(namespace, address)
    subs = [(s, ns.get_subscription_runtime_properties(topic, s.name))
            for s in _found(Entity("topic", topic), ns.name, lambda: ns.list_subscriptions(topic))]
    if as_json:
        output.json_document([_record(s, rt) for s, rt in subs])
        return
    if not subs:
        output.out(f"topic {topic!r} has no subscriptions")
        return
    rows = [[s.name, flags(s), s.status, _shown(s.lock_duration), s.max_delivery_count,
             rt.active_message_count, rt.dead_letter_message_count] for s, rt in subs]
    output.table(["subscription", "flags", "status", "lock", "max deliveries", "active", "dead-letter"], rows)


@subscription_app.command("show")
def subscription_show(topic: TopicName, name: SubscriptionName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                      address: AddressOption = None, as_json: AsJson = False) -> None:
    """Show a subscription's settings, rules and counts."""
    ns = attach(namespace, address)
    entity = Entity("subscription", topic, name)
    properties = _found(entity, ns.name, lambda: ns.get_subscription(topic, name))
    runtime = ns.get_subscription_runtime_properties(topic, name)
    rules = [[r.name, filter_text(r.filter), action_text(r.action)] for r in ns.list_rules(topic, name)]
    if as_json:
        output.json_document({**_record(properties, runtime),
                              "rules": [{"name": n, "filter": f, "action": a} for n, f, a in rules]})
        return
    _show(properties, runtime)
    output.out()
    output.table(["rule", "filter", "action"], rules)


# ---------------------------------------------------------------------------------------------- updates


def _changes(*, lock_duration: float | None = None, max_delivery_count: int | None = None,
             ttl: float | None = None, dead_letter_expired: bool | None = None, forward_to: str | None = None,
             duplicate_window: float | None = None, status: str | None = None,
             user_metadata: str | None = None) -> dict[str, Any]:
    """The settings an `update` changes, as the Python API takes them: those given on the command
    line (a --ttl of 0 and a --forward-to of '' remove the setting)."""
    given = {"lock_duration": _seconds(lock_duration), "max_delivery_count": max_delivery_count,
             "dead_lettering_on_message_expiration": dead_letter_expired, "status": status,
             "duplicate_detection_history_time_window": _seconds(duplicate_window), "user_metadata": user_metadata}
    changes = {key: value for key, value in given.items() if value is not None}
    if ttl is not None:
        changes["default_message_time_to_live"] = _seconds(ttl) if ttl > 0 else None
    if forward_to is not None:
        changes["forward_to"] = forward_to or None
    if not changes:
        raise click.UsageError("give at least one setting to change (`--help` lists them)")
    return changes


def _updated(what: str, properties: Any, changes: dict[str, Any], as_json: bool) -> None:
    """Report an update: the settings it changed, as they are now, or the whole entity as JSON."""
    if as_json:
        output.json_document(output.plain(properties))
        return
    shown = {key: getattr(properties, key) for key in changes}
    output.out(f"{what} updated: " + ", ".join(f"{key}={'none' if value is None else _shown(value)}"
                                               for key, value in shown.items()))


@queue_app.command("update")
def queue_update(name: QueueName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
                 lock_duration: UpdateLockDuration = None, max_delivery_count: UpdateMaxDeliveries = None,
                 ttl: UpdateTtl = None, dead_letter_expired: UpdateDeadLetterOnExpiry = None,
                 forward_to: UpdateForwardTo = None, duplicate_window: UpdateDuplicateWindow = None,
                 status: UpdateStatus = None, user_metadata: UpdateMetadata = None, as_json: AsJson = False) -> None:
    """Change a queue's settings (those given; partitioning, sessions and duplicate detection are
    fixed when it is created). Messages it holds keep theirs."""
    changes = _changes(lock_duration=lock_duration, max_delivery_count=max_delivery_count, ttl=ttl,
                       dead_letter_expired=dead_letter_expired, forward_to=forward_to,
                       duplicate_window=duplicate_window, status=status, user_metadata=user_metadata)
    ns = attach(namespace, address)
    _found(Entity("queue", name), ns.name, lambda: ns.get_queue(name))
    _updated(f"queue {name!r}", ns.update_queue(name, **changes), changes, as_json)


@topic_app.command("update")
def topic_update(name: TopicName, namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
                 ttl: UpdateTtl = None, duplicate_window: UpdateDuplicateWindow = None, status: UpdateStatus = None,
                 user_metadata: UpdateMetadata = None, as_json: AsJson = False) -> None:
    """Change a topic's settings (those given; partitioning and duplicate detection are fixed when
    it is created)."""
    changes = _changes(ttl=ttl, duplicate_window=duplicate_window, status=status, user_metadata=user_metadata)
    ns = attach(namespace, address)
    _found(Entity("topic", name), ns.name, lambda: ns.get_topic(name))
    _updated(f"topic {name!r}", ns.update_topic(name, **changes), changes, as_json)


@subscription_app.command("update")
def subscription_update(topic: TopicName, name: SubscriptionName, namespace: NamespaceOption = DEFAULT_NAMESPACE,
                        address: AddressOption = None, lock_duration: UpdateLockDuration = None,
                        max_delivery_count: UpdateMaxDeliveries = None, ttl: UpdateTtl = None,
                        dead_letter_expired: UpdateDeadLetterOnExpiry = None, forward_to: UpdateForwardTo = None,
                        status: UpdateStatus = None, user_metadata: UpdateMetadata = None,
                        as_json: AsJson = False) -> None:
    """Change a subscription's settings (those given; sessions are fixed when it is created; its
    rules change with `ray-broker rule`)."""
    changes = _changes(lock_duration=lock_duration, max_delivery_count=max_delivery_count, ttl=ttl,
                       dead_letter_expired=dead_letter_expired, forward_to=forward_to, status=status,
                       user_metadata=user_metadata)
    ns = attach(namespace, address)
    _found(Entity("subscription", topic, name), ns.name, lambda: ns.get_subscription(topic, name))
    _updated(f"subscription {name!r} of topic {topic!r}", ns.update_subscription(topic, name, **changes), changes,
             as_json)
