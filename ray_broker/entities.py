"""Entity model: names, queue options with their validation, and the properties users read.

An entity definition travels to partitions as a plain dict (`definition`), with durations in
seconds; users see `QueueProperties` and `QueueRuntimeProperties` with `timedelta` values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Mapping, TypeVar

from .access_rules import AuthorizationRule, normalize_rules, rules_from_wire
from .clock import MAX_DURATION_SECONDS, duration_seconds, to_datetime
from .errors import InvalidArgumentError
from .sku import Sku

MAX_NAME_LENGTH = 260
_NAME_RE = re.compile(r"[A-Za-z0-9._\-/]+")
MAX_LOCK_SECONDS = 300.0
MIN_DUP_WINDOW_SECONDS = 20.0
MAX_DUP_WINDOW_SECONDS = 7 * 24 * 3600.0
QUEUE_STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
SEND_BLOCKING = ("Disabled", "SendDisabled")
RECEIVE_BLOCKING = ("Disabled", "ReceiveDisabled")
MAX_USER_METADATA_LENGTH = 1024

DEFAULT_DUPLICATE_WINDOW = timedelta(minutes=10)
"""The default `duplicate_detection_history_time_window` of queues and topics."""
DEFAULT_LOCK_DURATION = timedelta(seconds=60)
"""The default `lock_duration` of queues and subscriptions."""
DEFAULT_MAX_DELIVERY_COUNT = 10
"""The default `max_delivery_count` of queues and subscriptions."""
DEFAULT_MAX_SIZE_IN_MEGABYTES = 1024
"""The default `max_size_in_megabytes` of queues and topics."""
DEFAULT_STATUS = "Active"
"""The status every entity is created with unless told otherwise."""
# Every default option value below, in the properties classes, the client's create methods and
# the command line comes from these constants (False and None are the other defaults).

QUEUE_DEFAULTS: dict[str, Any] = {
    "enable_partitioning": False,
    "requires_session": False,
    "requires_duplicate_detection": False,
    "duplicate_detection_history_time_window": DEFAULT_DUPLICATE_WINDOW.total_seconds(),
    "lock_duration": DEFAULT_LOCK_DURATION.total_seconds(),
    "max_delivery_count": DEFAULT_MAX_DELIVERY_COUNT,
    "default_message_time_to_live": None,
    "dead_lettering_on_message_expiration": False,
    "forward_to": None,
    "forward_dead_lettered_messages_to": None,
    "max_size_in_megabytes": DEFAULT_MAX_SIZE_IN_MEGABYTES,
    "status": DEFAULT_STATUS,
    "user_metadata": None,
    "auto_delete_on_idle": None,
    "enable_express": False,
    "enable_batched_operations": True,
    "authorization_rules": [],
}
IMMUTABLE_QUEUE_OPTIONS = ("enable_partitioning", "requires_session", "requires_duplicate_detection")
FIXED_QUEUE_PROPERTIES = ("max_message_size_in_kilobytes", "availability_status")
"""`QueueProperties` fields that carry the SDK's names with values fixed here: the message size
limit is the tier's."""
MIN_AUTO_DELETE_ON_IDLE = timedelta(minutes=5)
"""The shortest `auto_delete_on_idle` (Service Bus's)."""


def check_entity_name(name: Any, what: str = "entity") -> str:
    """Validate an entity name: 1-260 of letters, digits, '.', '-', '_', '/'."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what} name must be a str, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidArgumentError(f"{what} name must be 1 to {MAX_NAME_LENGTH} characters, got {len(name)}")
    if not _NAME_RE.fullmatch(name) or name.startswith("/") or name.endswith("/") or "//" in name:
        raise InvalidArgumentError(
            f"{what} name {name!r} is invalid: use letters, digits, '.', '-', '_' and '/' "
            "(not at the start or end, and not doubled)"
        )
    if "$" in name:
        raise InvalidArgumentError(f"{what} name {name!r} may not contain '$'")
    return name


def _seconds(name: str, value: Any, low: float, high: float) -> float:
    seconds = duration_seconds(value)
    if seconds is None:
        raise InvalidArgumentError(f"{name} must be a timedelta, not {type(value).__name__}")
    if not low <= seconds <= high:
        raise InvalidArgumentError(
            f"{name} must be from {timedelta(seconds=low)} to {timedelta(seconds=high)}, got {_describe(seconds)}")
    return seconds


def _describe(seconds: float) -> str:
    """A duration for an error message; NaN and values beyond timedelta's range are shown as numbers."""
    try:
        return str(timedelta(seconds=seconds))
    except (OverflowError, ValueError):
        return f"{seconds} seconds"


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
    return value


def _positive_int(name: str, value: Any, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InvalidArgumentError(f"{name} must be an int from 1 to {high}, got {value!r}")
    return value


TOPIC_DEFAULTS: dict[str, Any] = {
    "enable_partitioning": False,
    "requires_duplicate_detection": False,
    "duplicate_detection_history_time_window": DEFAULT_DUPLICATE_WINDOW.total_seconds(),
    "default_message_time_to_live": None,
    "max_size_in_megabytes": DEFAULT_MAX_SIZE_IN_MEGABYTES,
    "status": DEFAULT_STATUS,
    "user_metadata": None,
    "auto_delete_on_idle": None,
    "enable_express": False,
    "enable_batched_operations": True,
    "support_ordering": True,
    "authorization_rules": [],
}
TOPIC_STATUSES = ("Active", "Disabled", "SendDisabled")
IMMUTABLE_TOPIC_OPTIONS = ("enable_partitioning", "requires_duplicate_detection")
TOPIC_ENGINE_OPTIONS: dict[str, Any] = {"requires_session": False}
"""What the engine reads of every entity that a topic, which holds no receivable messages, has fixed."""

SUBSCRIPTION_DEFAULTS: dict[str, Any] = {
    "requires_session": False,
    "lock_duration": DEFAULT_LOCK_DURATION.total_seconds(),
    "max_delivery_count": DEFAULT_MAX_DELIVERY_COUNT,
    "default_message_time_to_live": None,
    "dead_lettering_on_message_expiration": False,
    "dead_lettering_on_filter_evaluation_exceptions": True,
    "forward_to": None,
    "forward_dead_lettered_messages_to": None,
    "status": DEFAULT_STATUS,
    "user_metadata": None,
    "auto_delete_on_idle": None,
    "enable_batched_operations": True,
}
SUBSCRIPTION_STATUSES = ("Active", "Disabled", "ReceiveDisabled")
IMMUTABLE_SUBSCRIPTION_OPTIONS = ("requires_session",)
INHERITED_TOPIC_OPTIONS = ("enable_partitioning", "requires_duplicate_detection",
                           "duplicate_detection_history_time_window", "max_size_in_megabytes")
"""A subscription's options that come from its topic: it lives where the topic lives."""
MAX_SUBSCRIPTION_NAME_LENGTH = 50
SUBSCRIPTIONS_SEGMENT = "/subscriptions/"


def subscription_path(topic_name: str, subscription_name: str) -> str:
    """The entity path of a subscription: `<topic>/subscriptions/<subscription>`."""
    return f"{topic_name}{SUBSCRIPTIONS_SEGMENT}{subscription_name}"


def check_subscription_name(name: Any) -> str:
    """Validate a subscription name: 1-50 of letters, digits, '.', '-', '_' (no '/')."""
    check_entity_name(name, "subscription")
    if "/" in name or len(name) > MAX_SUBSCRIPTION_NAME_LENGTH:
        raise InvalidArgumentError(f"subscription name {name!r} is invalid: use 1 to {MAX_SUBSCRIPTION_NAME_LENGTH} "
                                   "letters, digits, '.', '-' and '_' (no '/')")
    return name


def normalize_queue_options(options: Mapping[str, Any], *, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate queue options and return them in wire form (durations in seconds).

    `base` holds the current options when updating (options it lacks take their defaults);
    unknown keys are rejected.
    """
    return _normalize("queue", QUEUE_DEFAULTS, QUEUE_STATUSES, options, base)


def normalize_topic_options(options: Mapping[str, Any], *, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate topic options and return them in wire form (as `normalize_queue_options`; the
    options a topic has fixed, `TOPIC_ENGINE_OPTIONS`, may come back in with their values)."""
    user = {k: v for k, v in (base or {}).items() if k in TOPIC_DEFAULTS}
    given = {k: v for k, v in options.items() if TOPIC_ENGINE_OPTIONS.get(k, not v) != v}
    return {**_normalize("topic", TOPIC_DEFAULTS, TOPIC_STATUSES, given, user), **TOPIC_ENGINE_OPTIONS}


def normalize_subscription_options(options: Mapping[str, Any], *,
                                   base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate subscription options and return them in wire form (as `normalize_queue_options`;
    the options a subscription takes from its topic are not among them)."""
    user = {k: v for k, v in (base or {}).items() if k in SUBSCRIPTION_DEFAULTS}
    return _normalize("subscription", SUBSCRIPTION_DEFAULTS, SUBSCRIPTION_STATUSES, options, user)


_FLAGS = ("enable_partitioning", "requires_session", "requires_duplicate_detection",
          "dead_lettering_on_message_expiration", "dead_lettering_on_filter_evaluation_exceptions", "enable_express",
          "enable_batched_operations", "support_ordering")


def _normalize(kind: str, defaults: Mapping[str, Any], statuses: tuple[str, ...], options: Mapping[str, Any],
               base: Mapping[str, Any] | None) -> dict[str, Any]:
    result = {**defaults, **(base or {})}
    for key, value in options.items():
        if key not in defaults:
            raise InvalidArgumentError(f"unknown {kind} option {key!r}; known options: {', '.join(defaults)}")
        if key in _FLAGS:
            result[key] = _flag(key, value)
        elif key == "duplicate_detection_history_time_window":
            result[key] = _seconds(key, value, MIN_DUP_WINDOW_SECONDS, MAX_DUP_WINDOW_SECONDS)
        elif key == "lock_duration":
            result[key] = _seconds(key, value, 1.0, MAX_LOCK_SECONDS)
        elif key == "default_message_time_to_live":
            result[key] = None if value is None else _seconds(key, value, 1.0, MAX_DURATION_SECONDS)
        elif key == "auto_delete_on_idle":
            result[key] = None if value is None or value == timedelta.max else _seconds(
                key, value, MIN_AUTO_DELETE_ON_IDLE.total_seconds(), MAX_DURATION_SECONDS)
        elif key == "max_delivery_count":
            result[key] = _positive_int(key, value, 2_000_000_000)
        elif key == "max_size_in_megabytes":
            result[key] = _positive_int(key, value, 80 * 1024)
        elif key in ("forward_to", "forward_dead_lettered_messages_to"):
            result[key] = None if value is None else check_entity_name(value, key)
        elif key == "status":
            if value not in statuses:
                raise InvalidArgumentError(f"a {kind}'s status must be one of {', '.join(statuses)}, got {value!r}")
            result[key] = value
        elif key == "authorization_rules":
            result[key] = normalize_rules(value)
        elif key == "user_metadata":
            if value is not None and (not isinstance(value, str) or len(value) > MAX_USER_METADATA_LENGTH):
                raise InvalidArgumentError(
                    f"user_metadata must be None or a str of at most {MAX_USER_METADATA_LENGTH} characters, got "
                    + (f"{len(value)} characters" if isinstance(value, str) else type(value).__name__))
            result[key] = value
    return result


def _td(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


_DURATION_OPTIONS = ("duplicate_detection_history_time_window", "lock_duration", "default_message_time_to_live")
_NEVER_OPTIONS = ("auto_delete_on_idle",)
"""Durations that say "never" with `timedelta.max` where the broker stores None (as the SDK's properties do)."""

P = TypeVar("P")


def _properties(cls: type[P], definition: Mapping[str, Any], **fixed: Any) -> P:
    """A properties object from an entity's wire form: each option the class has a field for
    (durations as `timedelta`), the creation and update times, and the `fixed` fields."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    options = {key: _td(value) if key in _DURATION_OPTIONS else
               (timedelta.max if value is None else timedelta(seconds=value)) if key in _NEVER_OPTIONS else
               rules_from_wire(value) if key == "authorization_rules" else value
               for key, value in definition["options"].items() if key in names}
    return cls(**options, created_at_utc=to_datetime(definition.get("created_at")),
               updated_at_utc=to_datetime(definition.get("updated_at")), **fixed)


@dataclass
class QueueProperties:
    """A queue's settings, as `create_queue`, `get_queue` and `list_queues` return them."""

    name: str
    enable_partitioning: bool = False
    requires_session: bool = False
    requires_duplicate_detection: bool = False
    duplicate_detection_history_time_window: timedelta = DEFAULT_DUPLICATE_WINDOW
    lock_duration: timedelta = DEFAULT_LOCK_DURATION
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    default_message_time_to_live: timedelta | None = None
    dead_lettering_on_message_expiration: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    max_size_in_megabytes: int = DEFAULT_MAX_SIZE_IN_MEGABYTES
    status: str = DEFAULT_STATUS
    user_metadata: str | None = None
    auto_delete_on_idle: timedelta = timedelta.max
    enable_express: bool = False
    max_message_size_in_kilobytes: int = 256
    enable_batched_operations: bool = True
    authorization_rules: tuple[AuthorizationRule, ...] = ()
    availability_status: str = "Available"
    created_at_utc: datetime | None = None
    updated_at_utc: datetime | None = None

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any], *, sku: Sku) -> QueueProperties:
        """Build from the wire form partitions store, in a namespace of tier `sku`."""
        return _properties(cls, definition, name=definition["name"],
                           max_message_size_in_kilobytes=sku.max_message_bytes // 1024)

    def changes(self) -> dict[str, Any]:
        """The option values of this object, for `update_queue(properties)` (the fixed fields are not options)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in QUEUE_DEFAULTS}


@dataclass
class PartitionRuntimeProperties:
    """One partition's share of an entity's counts."""

    index: int
    available: bool
    active_message_count: int = 0
    dead_letter_message_count: int = 0
    scheduled_message_count: int = 0
    next_sequence_number: int = 0
    """The sequence number this partition gives the entity's next message: a peek that stops
    before it sees what the partition held when asked."""


@dataclass
class QueueRuntimeProperties:
    """A queue's message counts, summed over the partitions that answered."""

    name: str
    active_message_count: int = 0
    dead_letter_message_count: int = 0
    scheduled_message_count: int = 0
    transfer_message_count: int = 0
    transfer_dead_letter_message_count: int = 0
    total_message_count: int = 0
    size_in_bytes: int = 0
    availability: str = "Available"
    partitions: list[PartitionRuntimeProperties] = field(default_factory=list)
    created_at_utc: datetime | None = None
    updated_at_utc: datetime | None = None
    accessed_at_utc: datetime | None = None

    @classmethod
    def aggregate(cls, name: str, per_partition: Mapping[int, Mapping[str, int] | None],
                  definition: Mapping[str, Any] | None = None) -> QueueRuntimeProperties:
        """Sum per-partition counts; a partition mapped to None did not answer (Limited)."""
        props = cls(name=name)
        for index in sorted(per_partition):
            counts = per_partition[index]
            if counts is None:
                props.availability = "Limited"
                props.partitions.append(PartitionRuntimeProperties(index=index, available=False))
                continue
            props.partitions.append(PartitionRuntimeProperties(
                index=index, available=True,
                active_message_count=counts["active"],
                dead_letter_message_count=counts["dead_letter"],
                scheduled_message_count=counts["scheduled"],
                next_sequence_number=counts.get("next_sequence", 0),
            ))
            props.active_message_count += counts["active"]
            props.dead_letter_message_count += counts["dead_letter"]
            props.scheduled_message_count += counts["scheduled"]
            props.transfer_message_count += counts["transfer"]
            props.transfer_dead_letter_message_count += counts["transfer_dead_letter"]
            props.size_in_bytes += counts["size"]
            accessed = counts.get("accessed_at")
            if accessed is not None:
                when = to_datetime(accessed)
                if props.accessed_at_utc is None or (when and when > props.accessed_at_utc):
                    props.accessed_at_utc = when
        props.total_message_count = (
            props.active_message_count + props.dead_letter_message_count + props.scheduled_message_count
            + props.transfer_message_count + props.transfer_dead_letter_message_count
        )
        if definition is not None:
            props.created_at_utc = to_datetime(definition.get("created_at"))
            props.updated_at_utc = to_datetime(definition.get("updated_at"))
        return props


@dataclass
class TopicProperties:
    """A topic's settings, as `create_topic`, `get_topic` and `list_topics` return them."""

    name: str
    enable_partitioning: bool = False
    requires_duplicate_detection: bool = False
    duplicate_detection_history_time_window: timedelta = DEFAULT_DUPLICATE_WINDOW
    default_message_time_to_live: timedelta | None = None
    max_size_in_megabytes: int = DEFAULT_MAX_SIZE_IN_MEGABYTES
    status: str = DEFAULT_STATUS
    user_metadata: str | None = None
    auto_delete_on_idle: timedelta = timedelta.max
    enable_express: bool = False
    max_message_size_in_kilobytes: int = 256
    enable_batched_operations: bool = True
    support_ordering: bool = True
    authorization_rules: tuple[AuthorizationRule, ...] = ()
    availability_status: str = "Available"
    created_at_utc: datetime | None = None
    updated_at_utc: datetime | None = None

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any], *, sku: Sku) -> TopicProperties:
        """Build from the wire form partitions store, in a namespace of tier `sku`."""
        return _properties(cls, definition, name=definition["name"],
                           max_message_size_in_kilobytes=sku.max_message_bytes // 1024)

    def changes(self) -> dict[str, Any]:
        """The option values of this object, for `update_topic(properties)`."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in TOPIC_DEFAULTS}


@dataclass
class SubscriptionProperties:
    """A subscription's settings, as `create_subscription`, `get_subscription` and
    `list_subscriptions` return them."""

    name: str
    topic_name: str = ""
    requires_session: bool = False
    lock_duration: timedelta = DEFAULT_LOCK_DURATION
    max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT
    default_message_time_to_live: timedelta | None = None
    dead_lettering_on_message_expiration: bool = False
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    status: str = DEFAULT_STATUS
    user_metadata: str | None = None
    auto_delete_on_idle: timedelta = timedelta.max
    enable_batched_operations: bool = True
    availability_status: str = "Available"
    created_at_utc: datetime | None = None
    updated_at_utc: datetime | None = None

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> SubscriptionProperties:
        """Build from the wire form partitions store."""
        return _properties(cls, definition, name=definition["subscription"], topic_name=definition["topic"])

    def changes(self) -> dict[str, Any]:
        """The option values of this object, for `update_subscription(properties)`."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in SUBSCRIPTION_DEFAULTS}


@dataclass
class SubscriptionRuntimeProperties(QueueRuntimeProperties):
    """A subscription's message counts, summed over the partitions that answered."""


@dataclass
class TopicRuntimeProperties(QueueRuntimeProperties):
    """A topic's counts: its scheduled messages, the bytes it stores (each message once, however
    many subscriptions hold it) and its subscriptions; `active_message_count` is 0, as messages
    move on to the subscriptions; and how many of its subscriptions' rules have SQL filters (true
    and false filters too, as Service Bus counts them) and correlation filters."""

    subscription_count: int = 0
    sql_filter_count: int = 0
    correlation_filter_count: int = 0
