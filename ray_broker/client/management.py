"""Queue, topic, subscription and rule management as flows (see `flow.py`): the requests a `Namespace` makes and what their replies
become. Shared by the sync and async namespaces; imports no Ray.

    properties = run(link, create_queue(sku, "orders", {"enable_partitioning": True}))
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence, TypedDict

from ..access_rules import AuthorizationRule
from ..clock import to_epoch
from ..entities import (
    FIXED_QUEUE_PROPERTIES,
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    SubscriptionRuntimeProperties,
    TopicProperties,
    TopicRuntimeProperties,
    check_entity_name,
    check_subscription_name,
    normalize_queue_options,
    normalize_subscription_options,
    normalize_topic_options,
    subscription_path,
)
from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessagingEntityNotFoundError,
    PartitionUnavailableError,
)
from ..filters import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    RuleProperties,
    TrueFilter,
    check_rule_name,
    rule_from_wire,
    rule_to_wire,
)
from ..keys.keyring import keys_from_rows, rights_of
from ..keys.sas import SasKey
from ..router_requests import DefinitionRequest
from ..sku import Sku
from .flow import Flow, request, route

MANAGEMENT_TIMEOUT_S = 60.0
"""How long a management call waits."""


class QueueOptions(TypedDict, total=False):
    """The keywords of `create_queue`; a missing one takes its default (`entities.QUEUE_DEFAULTS`)."""

    enable_partitioning: bool
    requires_session: bool
    requires_duplicate_detection: bool
    duplicate_detection_history_time_window: timedelta
    lock_duration: timedelta
    max_delivery_count: int
    default_message_time_to_live: timedelta | None
    dead_lettering_on_message_expiration: bool
    forward_to: str | None
    forward_dead_lettered_messages_to: str | None
    max_size_in_megabytes: int
    status: str
    user_metadata: str | None
    auto_delete_on_idle: timedelta | None
    enable_express: bool
    enable_batched_operations: bool
    authorization_rules: Sequence[AuthorizationRule]


def queue_definition(name: str) -> Flow[dict[str, Any]]:
    """A queue's definition, fresh from the namespace (`MessagingEntityNotFoundError` for another kind)."""
    check_entity_name(name, "queue")
    return (yield from entity_definition(name, "queue"))


def create_queue(sku: Sku, queue_name: str, options: Mapping[str, Any]) -> Flow[QueueProperties]:
    """Create a queue with `options` (`Namespace.create_queue`'s keywords; missing ones take their defaults)."""
    check_entity_name(queue_name, "queue")
    wire = normalize_queue_options(options)
    definition = yield request("create_entity", "queue", queue_name, wire, MANAGEMENT_TIMEOUT_S,
                               timeout=MANAGEMENT_TIMEOUT_S)
    return QueueProperties.from_definition(definition, sku=sku)


def get_queue(sku: Sku, queue_name: str) -> Flow[QueueProperties]:
    """A queue's settings."""
    return QueueProperties.from_definition((yield from queue_definition(queue_name)), sku=sku)


def update_queue(sku: Sku, properties_or_name: QueueProperties | str, changes: dict[str, Any]) -> Flow[QueueProperties]:
    """Change a queue's settings (`Namespace.update_queue`)."""
    if isinstance(properties_or_name, QueueProperties):
        name = properties_or_name.name
        current = QueueProperties.from_definition((yield from queue_definition(name)), sku=sku)
        for key in FIXED_QUEUE_PROPERTIES:
            if getattr(properties_or_name, key) != getattr(current, key):
                raise InvalidOperationError(
                    f"{key} of queue {name!r} is fixed at {getattr(current, key)!r} in this broker and cannot "
                    f"be changed to {getattr(properties_or_name, key)!r}; leave it as get_queue returns it",
                    entity=name)
        current_options = current.changes()
        wanted = {k: v for k, v in properties_or_name.changes().items() if v != current_options.get(k)}
        changes = {**wanted, **changes}
    elif isinstance(properties_or_name, str):
        name = properties_or_name
        yield from queue_definition(name)
    else:
        raise InvalidArgumentError("update_queue takes a QueueProperties or a queue name")
    normalize_queue_options(changes)
    definition = yield request("update_entity", name, changes, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return QueueProperties.from_definition(definition, sku=sku)


def delete_queue(queue_name: str) -> Flow[None]:
    """Delete a queue and every message in it."""
    check_entity_name(queue_name, "queue")
    yield from delete_entity(queue_name, "queue")


def list_queues(sku: Sku) -> Flow[list[QueueProperties]]:
    """Every queue, in name order."""
    definitions = yield request("list_entities", "queue", timeout=MANAGEMENT_TIMEOUT_S)
    return [QueueProperties.from_definition(d, sku=sku) for d in definitions]


def queue_runtime_properties(queue_name: str) -> Flow[QueueRuntimeProperties]:
    """A queue's message counts, summed over partitions."""
    yield from queue_definition(queue_name)
    reply = yield request("runtime", queue_name, timeout=MANAGEMENT_TIMEOUT_S)
    return QueueRuntimeProperties.aggregate(reply["definition"]["name"], reply["partitions"], reply["definition"])


# ---------------------------------------------------------------------- topics

class TopicOptions(TypedDict, total=False):
    """The keywords of `create_topic`; a missing one takes its default (`entities.TOPIC_DEFAULTS`)."""

    enable_partitioning: bool
    requires_duplicate_detection: bool
    duplicate_detection_history_time_window: timedelta
    default_message_time_to_live: timedelta | None
    max_size_in_megabytes: int
    status: str
    user_metadata: str | None
    auto_delete_on_idle: timedelta | None
    enable_express: bool
    enable_batched_operations: bool
    support_ordering: bool
    authorization_rules: Sequence[AuthorizationRule]


class SubscriptionOptions(TypedDict, total=False):
    """The keywords of `create_subscription` other than `rule`; a missing one takes its default
    (`entities.SUBSCRIPTION_DEFAULTS`)."""

    requires_session: bool
    lock_duration: timedelta
    max_delivery_count: int
    default_message_time_to_live: timedelta | None
    dead_lettering_on_message_expiration: bool
    dead_lettering_on_filter_evaluation_exceptions: bool
    forward_to: str | None
    forward_dead_lettered_messages_to: str | None
    status: str
    user_metadata: str | None
    auto_delete_on_idle: timedelta | None
    enable_batched_operations: bool


def entity_definition(name: str, kind: str) -> Flow[dict[str, Any]]:
    """An entity's definition, fresh from the namespace (`MessagingEntityNotFoundError` for another kind)."""
    definition = yield route(DefinitionRequest(name, True), timeout=MANAGEMENT_TIMEOUT_S)
    if definition["kind"] != kind:
        raise MessagingEntityNotFoundError(f"{name!r} is a {definition['kind']}, not a {kind}", entity=name)
    return definition  # type: ignore[no-any-return]


def create_topic(sku: Sku, topic_name: str, options: Mapping[str, Any]) -> Flow[TopicProperties]:
    """Create a topic with `options` (`Namespace.create_topic`'s keywords)."""
    check_entity_name(topic_name, "topic")
    sku.require("topics", topic_name)
    wire = normalize_topic_options(options)
    definition = yield request("create_entity", "topic", topic_name, wire, MANAGEMENT_TIMEOUT_S,
                               timeout=MANAGEMENT_TIMEOUT_S)
    return TopicProperties.from_definition(definition, sku=sku)


def get_topic(sku: Sku, topic_name: str) -> Flow[TopicProperties]:
    """A topic's settings."""
    check_entity_name(topic_name, "topic")
    return TopicProperties.from_definition((yield from entity_definition(topic_name, "topic")), sku=sku)


def update_topic(sku: Sku, properties_or_name: TopicProperties | str, changes: dict[str, Any]) -> Flow[TopicProperties]:
    """Change a topic's settings (`enable_partitioning` and `requires_duplicate_detection` cannot change)."""
    if isinstance(properties_or_name, TopicProperties):
        name = properties_or_name.name
        current = TopicProperties.from_definition((yield from entity_definition(name, "topic")), sku=sku)
        current_options = current.changes()
        changes = {**{k: v for k, v in properties_or_name.changes().items() if v != current_options.get(k)},
                   **changes}
    elif isinstance(properties_or_name, str):
        name = properties_or_name
        yield from entity_definition(name, "topic")
    else:
        raise InvalidArgumentError("update_topic takes a TopicProperties or a topic name")
    normalize_topic_options(changes)
    definition = yield request("update_entity", name, changes, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return TopicProperties.from_definition(definition, sku=sku)


def delete_entity(name: str, kind: str) -> Flow[None]:
    """Delete a queue, topic (with its subscriptions) or subscription, and every message in it."""
    yield from entity_definition(name, kind)
    yield request("delete_entity", name, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)


def list_topics(sku: Sku) -> Flow[list[TopicProperties]]:
    """Every topic, in name order."""
    definitions = yield request("list_entities", "topic", timeout=MANAGEMENT_TIMEOUT_S)
    return [TopicProperties.from_definition(d, sku=sku) for d in definitions]


def topic_runtime_properties(topic_name: str) -> Flow[TopicRuntimeProperties]:
    """A topic's scheduled messages, stored bytes and subscription count, summed over partitions,
    and its subscriptions' rules by kind of filter (SQL, true and false filters; correlation filters)."""
    yield from entity_definition(topic_name, "topic")
    reply = yield request("runtime", topic_name, timeout=MANAGEMENT_TIMEOUT_S)
    props = TopicRuntimeProperties.aggregate(reply["definition"]["name"], reply["partitions"], reply["definition"])
    counts = [c["subscriptions"] for c in reply["partitions"].values() if c is not None]
    props.subscription_count = max(counts, default=0)
    subscriptions = yield request("list_entities", "subscription", timeout=MANAGEMENT_TIMEOUT_S)
    filters = [rule_from_wire(rule).filter for d in subscriptions if d["topic"].lower() == topic_name.lower()
               for rule in d.get("rules", ())]
    props.correlation_filter_count = sum(isinstance(f, CorrelationFilter) for f in filters)
    props.sql_filter_count = len(filters) - props.correlation_filter_count
    return props


# ---------------------------------------------------------------------- subscriptions

def _subscription_path(topic_name: str, subscription_name: str) -> str:
    check_entity_name(topic_name, "topic")
    return subscription_path(topic_name, check_subscription_name(subscription_name))


def _default_rule(rule: Any) -> RuleProperties:
    """The subscription's first rule: `rule` as the "$Default" rule's filter (a TrueFilter when None),
    or a whole `RuleProperties`."""
    if isinstance(rule, RuleProperties):
        return rule
    return RuleProperties(name=DEFAULT_RULE_NAME, filter=TrueFilter() if rule is None else rule, action=None)


def create_subscription(topic_name: str, subscription_name: str, options: Mapping[str, Any],
                        rule: Any = None) -> Flow[SubscriptionProperties]:
    """Create a subscription with `options` and its "$Default" rule (see `_default_rule`)."""
    _subscription_path(topic_name, subscription_name)
    wire = normalize_subscription_options(options)
    definition = yield request("create_subscription", topic_name, subscription_name, wire,
                               rule_to_wire(_default_rule(rule)), MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return SubscriptionProperties.from_definition(definition)


def get_subscription(topic_name: str, subscription_name: str) -> Flow[SubscriptionProperties]:
    """A subscription's settings."""
    path = _subscription_path(topic_name, subscription_name)
    return SubscriptionProperties.from_definition((yield from entity_definition(path, "subscription")))


def update_subscription(topic_name: str, properties_or_name: SubscriptionProperties | str,
                        changes: dict[str, Any]) -> Flow[SubscriptionProperties]:
    """Change a subscription's settings (`requires_session` cannot change)."""
    if isinstance(properties_or_name, SubscriptionProperties):
        path = _subscription_path(topic_name, properties_or_name.name)
        current = SubscriptionProperties.from_definition((yield from entity_definition(path, "subscription")))
        current_options = current.changes()
        changes = {**{k: v for k, v in properties_or_name.changes().items() if v != current_options.get(k)},
                   **changes}
    elif isinstance(properties_or_name, str):
        path = _subscription_path(topic_name, properties_or_name)
        yield from entity_definition(path, "subscription")
    else:
        raise InvalidArgumentError("update_subscription takes a SubscriptionProperties or a subscription name")
    normalize_subscription_options(changes)
    definition = yield request("update_entity", path, changes, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return SubscriptionProperties.from_definition(definition)


def delete_subscription(topic_name: str, subscription_name: str) -> Flow[None]:
    """Delete a subscription and every message in it."""
    yield from delete_entity(_subscription_path(topic_name, subscription_name), "subscription")


def list_subscriptions(topic_name: str) -> Flow[list[SubscriptionProperties]]:
    """Every subscription of a topic, in name order."""
    check_entity_name(topic_name, "topic")
    yield from entity_definition(topic_name, "topic")
    definitions = yield request("list_entities", "subscription", timeout=MANAGEMENT_TIMEOUT_S)
    return [SubscriptionProperties.from_definition(d) for d in definitions
            if d["topic"].lower() == topic_name.lower()]


def subscription_runtime_properties(topic_name: str, subscription_name: str) -> Flow[SubscriptionRuntimeProperties]:
    """A subscription's message counts, summed over partitions."""
    path = _subscription_path(topic_name, subscription_name)
    definition = yield from entity_definition(path, "subscription")
    reply = yield request("runtime", path, timeout=MANAGEMENT_TIMEOUT_S)
    return SubscriptionRuntimeProperties.aggregate(definition["subscription"], reply["partitions"],
                                                   reply["definition"])


# ---------------------------------------------------------------------- rules

def create_rule(topic_name: str, subscription_name: str, rule_name: str, filter: Any,
                action: Any) -> Flow[RuleProperties]:
    """Add a rule to a subscription; it applies to messages sent from then on."""
    path = _subscription_path(topic_name, subscription_name)
    rule = RuleProperties(name=check_rule_name(rule_name), filter=filter, action=action)
    stored = yield request("add_rule", path, rule_to_wire(rule), MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return rule_from_wire(stored)


def update_rule(topic_name: str, subscription_name: str, rule: RuleProperties) -> Flow[None]:
    """Replace the filter and action of the subscription's rule named `rule.name` with `rule`'s, on
    every partition at once; messages sent from then on are selected by the new ones. The filter
    and action are checked (compiled again from their text) before anything is sent."""
    path = _subscription_path(topic_name, subscription_name)
    if not isinstance(rule, RuleProperties):
        raise InvalidArgumentError(f"update_rule takes the RuleProperties get_rule returns (with filter and action "
                                   f"changed), not {type(rule).__name__}")
    checked = rule_from_wire(rule_to_wire(RuleProperties(rule.name, rule.filter, rule.action)))
    yield request("update_rule", path, rule_to_wire(checked), MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)


def get_rule(topic_name: str, subscription_name: str, rule_name: str) -> Flow[RuleProperties]:
    """One rule of a subscription (`MessagingEntityNotFoundError` if it has none of that name)."""
    for rule in (yield from list_rules(topic_name, subscription_name)):
        if rule.name.lower() == rule_name.lower():
            return rule
    raise MessagingEntityNotFoundError(f"subscription {subscription_name!r} of topic {topic_name!r} has no rule "
                                       f"named {rule_name!r}", entity=subscription_path(topic_name, subscription_name))


def list_rules(topic_name: str, subscription_name: str) -> Flow[list[RuleProperties]]:
    """A subscription's rules, in the order they were added."""
    path = _subscription_path(topic_name, subscription_name)
    definition = yield from entity_definition(path, "subscription")
    return [rule_from_wire(rule) for rule in definition.get("rules", ())]


def delete_rule(topic_name: str, subscription_name: str, rule_name: str) -> Flow[None]:
    """Remove a rule from a subscription; messages sent from then on are no longer selected by it."""
    path = _subscription_path(topic_name, subscription_name)
    yield request("remove_rule", path, check_rule_name(rule_name), MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)


# ---------------------------------------------------------------------- sessions

def list_sessions(entity_path: str, state_updated_after: datetime | None = None) -> Flow[list[str]]:
    """The sessions of a session-enabled queue or subscription (`topic/subscriptions/sub`) with
    active messages or a stored state, in id order; given `state_updated_after`, those whose state
    was set after that time instead (a naive datetime is UTC). `PartitionUnavailableError` when a
    partition did not answer (the list would miss its sessions)."""
    if state_updated_after is not None and not isinstance(state_updated_after, datetime):
        raise InvalidArgumentError(f"state_updated_after must be a datetime or None, not "
                                   f"{type(state_updated_after).__name__}")
    after = None if state_updated_after is None else to_epoch(state_updated_after)
    reply = yield request("list_sessions", entity_path, after, timeout=MANAGEMENT_TIMEOUT_S)
    if not reply["complete"]:
        raise PartitionUnavailableError(f"a partition of {entity_path!r} did not answer, so its sessions cannot be "
                                        "listed; try again once it is back", entity=entity_path)
    return list(reply["sessions"])


def list_queue_sessions(queue_name: str, state_updated_after: datetime | None = None) -> Flow[list[str]]:
    """The sessions of a session-enabled queue with active messages or a stored state (or, given
    `state_updated_after`, whose state was set after it), in id order."""
    check_entity_name(queue_name, "queue")
    return (yield from list_sessions(queue_name, state_updated_after))


def list_subscription_sessions(topic_name: str, subscription_name: str,
                               state_updated_after: datetime | None = None) -> Flow[list[str]]:
    """The sessions of a session-enabled subscription with active messages or a stored state (or,
    given `state_updated_after`, whose state was set after it), in id order."""
    return (yield from list_sessions(_subscription_path(topic_name, subscription_name), state_updated_after))


# ---------------------------------------------------------------------- shared access keys

def shared_access_keys() -> Flow[list[SasKey]]:
    """The namespace's shared access keys (which sign the Azure SDKs' tokens), in the order made."""
    rows = yield request("shared_access_keys", timeout=MANAGEMENT_TIMEOUT_S)
    return list(keys_from_rows(rows))


def add_shared_access_key(name: str, rights: Any) -> Flow[SasKey]:
    """Make a shared access key named `name` with `rights` (Manage, Send, Listen; any case)."""
    row = yield request("add_shared_access_key", name, list(rights_of(rights)), timeout=MANAGEMENT_TIMEOUT_S)
    return keys_from_rows([row])[0]


def remove_shared_access_key(name: str) -> Flow[None]:
    """Remove the shared access key named `name`."""
    yield request("remove_shared_access_key", name, timeout=MANAGEMENT_TIMEOUT_S)
