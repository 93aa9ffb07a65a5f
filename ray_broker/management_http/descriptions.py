"""Queue, topic and subscription descriptions (the XML inside an ATOM entry) <-> the broker's
entity properties and options. Pure.

Each kind lists the properties a client may set (mapped onto the broker's options), the properties
whose value here is fixed (Service Bus features the broker does not have: a client may send them
only with the value the broker has, else the request is refused saying what is not supported),
and the read-only ones (counts and times), which requests may carry and which are ignored.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..entities import (
    QUEUE_DEFAULTS,
    SUBSCRIPTION_DEFAULTS,
    TOPIC_DEFAULTS,
    QueueRuntimeProperties,
    TopicRuntimeProperties,
)
from ..errors import InvalidArgumentError
from .access_rules import read_rules, write_rules
from .atom import SB_COUNTS, sb, timestamp
from .codecs import COUNT, ENTITY, FLAG, TEXT, TIMESPAN, Codec, entity_reference


@dataclass(frozen=True)
class Setting:
    """A property a client sets: its element, the broker option it maps to, and its codec."""

    element: str
    option: str
    codec: Codec


@dataclass(frozen=True)
class Fixed:
    """A Service Bus property the broker holds at one value: `value`; `why` says what the broker
    does not support."""

    element: str
    codec: Codec
    value: Any
    why: str


@dataclass(frozen=True)
class DescriptionKind:
    """What a description of one kind of entity holds."""

    element: str
    settings: tuple[Setting, ...]
    fixed: tuple[Fixed, ...]
    read_only: frozenset[str]
    defaults: Mapping[str, Any]
    """The broker's defaults of the options of this kind."""


_CODECS: Mapping[str, Codec] = {
    "LockDuration": TIMESPAN, "DefaultMessageTimeToLive": TIMESPAN, "DuplicateDetectionHistoryTimeWindow": TIMESPAN,
    "MaxSizeInMegabytes": COUNT, "MaxDeliveryCount": COUNT, "Status": TEXT, "UserMetadata": TEXT,
    "ForwardTo": ENTITY, "ForwardDeadLetteredMessagesTo": ENTITY, "AutoDeleteOnIdle": TIMESPAN,
}
"""The codec of each setting that is not a flag."""


def _settings(*elements: str) -> tuple[Setting, ...]:
    """The settings of these elements, each mapped to the broker option of the same name in snake case."""
    return tuple(Setting(e, re.sub(r"(?<!^)(?=[A-Z])", "_", e).lower(), _CODECS.get(e, FLAG)) for e in elements)


_ANONYMOUS = Fixed("IsAnonymousAccessible", FLAG, False, "anonymous access is not offered")
_ORDERING = Fixed("SupportOrdering", FLAG, True, "ordering cannot be switched off")
_FILTERING = Fixed("FilteringMessagesBeforePublishing", FLAG, False, "filtering before publishing is not offered")
_SUB_PARTITIONING = Fixed("EnableSubscriptionPartitioning", FLAG, False,
                          "subscriptions are partitioned as their topic is")

_RUNTIME = frozenset({"SizeInBytes", "MessageCount", "CountDetails", "CreatedAt", "UpdatedAt", "AccessedAt",
                      "EntityAvailabilityStatus"})

QUEUE = DescriptionKind(
    "QueueDescription",
    _settings("LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
              "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
              "MaxDeliveryCount", "Status", "EnablePartitioning", "ForwardTo", "UserMetadata",
              "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EnableExpress", "EnableBatchedOperations"),
    (_ANONYMOUS, _ORDERING),
    _RUNTIME,
    QUEUE_DEFAULTS,
)
TOPIC = DescriptionKind(
    "TopicDescription",
    _settings("DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
              "DuplicateDetectionHistoryTimeWindow", "Status", "EnablePartitioning", "UserMetadata",
              "AutoDeleteOnIdle", "EnableExpress", "EnableBatchedOperations", "SupportOrdering"),
    (_FILTERING, _ANONYMOUS, _SUB_PARTITIONING),
    _RUNTIME | {"SubscriptionCount", "SqlFilterCount", "CorrelationFilterCount"},
    TOPIC_DEFAULTS,
)
SUBSCRIPTION = DescriptionKind(
    "SubscriptionDescription",
    _settings("LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration",
              "DeadLetteringOnFilterEvaluationExceptions", "MaxDeliveryCount", "Status", "ForwardTo",
              "ForwardDeadLetteredMessagesTo", "UserMetadata", "AutoDeleteOnIdle", "EnableBatchedOperations"),
    (),
    _RUNTIME,
    SUBSCRIPTION_DEFAULTS,
)
MESSAGE_SIZE_ELEMENT = "MaxMessageSizeInKilobytes"
AUTHORIZATION_RULES_ELEMENT = "AuthorizationRules"
RULES_OPTION = "authorization_rules"
DEFAULT_RULE_ELEMENTS = ("DefaultRuleDescription", "RuleDescription")
"""How a subscription's description names its first rule (Service Bus; the Python SDK)."""


def local_name(tag: str) -> str:
    """An element's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def message_size_fixed(kilobytes: int) -> Fixed:
    """The message size limit of a namespace's tier, which its queues and topics cannot change."""
    return Fixed(MESSAGE_SIZE_ELEMENT, COUNT, kilobytes,
                 f"the message size limit is the tier's, {kilobytes} KB, for every entity")


def read_options(kind: DescriptionKind, description: ET.Element, extra: Sequence[Fixed] = (),
                 skip: Sequence[str] = ()) -> dict[str, Any]:
    """The broker options a description a client sent sets. A fixed property sent with another value
    than the broker's, an authorization rule on a subscription, or an unknown element raises
    InvalidArgumentError naming it; read-only properties and the elements in `skip` are passed over."""
    settings = {s.element: s for s in kind.settings}
    fixed = {f.element: f for f in (*kind.fixed, *extra)}
    options: dict[str, Any] = {}
    for child in description:
        name = local_name(child.tag)
        text = child.text or ""
        if name in kind.read_only or name in skip:
            continue
        if name in settings:
            options[settings[name].option] = settings[name].codec.parse(text, name)
        elif name in fixed:
            rule = fixed[name]
            if rule.codec.parse(text, name) != rule.value:
                raise InvalidArgumentError(f"{name} {text.strip()!r} is not supported: {rule.why} "
                                           f"(leave it out or send {rule.codec.format(rule.value)})")
        elif name == AUTHORIZATION_RULES_ELEMENT:
            if RULES_OPTION in kind.defaults:
                options[RULES_OPTION] = read_rules(child)
            elif len(child):
                raise InvalidArgumentError(f"AuthorizationRules are not a property of a {kind.element}: put them on "
                                           "its queue or topic")
        else:
            raise InvalidArgumentError(f"{name} is not a property of a {kind.element} this broker supports")
    return options


SIZE_OPTION = "max_size_in_megabytes"
MIN_PARTITION_MEGABYTES = 1024


def shown_size(megabytes: int, partitioned: bool, partitions: int) -> int:
    """The size Service Bus shows for an entity of `megabytes` per partition: with partitioning on a
    tier of a fixed `partitions` count (basic, standard: 16), all of them together.

    >>> shown_size(1024, True, 16), shown_size(1024, False, 16)
    (16384, 1024)
    """
    return megabytes * partitions if partitioned else megabytes


def stored_size(megabytes: int, partitioned: bool, partitions: int) -> int:
    """The per-partition size a client means by `megabytes`: a partitioned entity's shown size (a
    multiple of `partitions` of at least 1 GB each) is divided back; any other value is per partition.

    >>> stored_size(16384, True, 16), stored_size(2048, True, 16), stored_size(16384, False, 16)
    (1024, 2048, 16384)
    """
    if partitioned and megabytes % partitions == 0 and megabytes >= partitions * MIN_PARTITION_MEGABYTES:
        return megabytes // partitions
    return megabytes


def replacement(kind: DescriptionKind, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options an update's description sets, as Service Bus reads a description that replaces
    the entity's: the settings that can be unset (forwarding, metadata, time to live) and that it
    leaves out are unset; the others it leaves out keep their values."""
    unset = {s.option: None for s in kind.settings if kind.defaults.get(s.option, 0) is None}
    return {**unset, **options}


def write_description(kind: DescriptionKind, properties: Any, host: str, extra: Sequence[Fixed] = (),
                      runtime: QueueRuntimeProperties | None = None, shown: Mapping[str, Any] | None = None
                      ) -> ET.Element:
    """The description of an entity from the broker's properties object (and its runtime
    properties when given), with Service Bus's values for what the broker does not have; `shown`
    gives values that show otherwise than the broker holds them (a partitioned entity's size)."""
    element = ET.Element(sb(kind.element))
    for setting in kind.settings:
        value = (shown or {}).get(setting.option, getattr(properties, setting.option))
        if setting.codec is ENTITY:
            value = entity_reference(host, value)
        if value is not None or setting.codec is TIMESPAN:
            ET.SubElement(element, sb(setting.element)).text = setting.codec.format(value)
    for fixed in (*kind.fixed, *extra):
        ET.SubElement(element, sb(fixed.element)).text = fixed.codec.format(fixed.value)
    write_rules(element, getattr(properties, RULES_OPTION, ()))
    ET.SubElement(element, sb("CreatedAt")).text = timestamp(properties.created_at_utc)
    ET.SubElement(element, sb("UpdatedAt")).text = timestamp(properties.updated_at_utc)
    ET.SubElement(element, sb("EntityAvailabilityStatus")).text = properties.availability_status
    if runtime is not None:
        write_runtime(element, runtime)
    return element


def write_runtime(element: ET.Element, runtime: QueueRuntimeProperties) -> None:
    """Add an entity's counts, size and last access to its description."""
    ET.SubElement(element, sb("SizeInBytes")).text = str(runtime.size_in_bytes)
    ET.SubElement(element, sb("MessageCount")).text = str(runtime.total_message_count)
    ET.SubElement(element, sb("AccessedAt")).text = timestamp(runtime.accessed_at_utc)
    details = ET.SubElement(element, sb("CountDetails"))
    counts: Mapping[str, int] = {
        "ActiveMessageCount": runtime.active_message_count,
        "DeadLetterMessageCount": runtime.dead_letter_message_count,
        "ScheduledMessageCount": runtime.scheduled_message_count,
        "TransferMessageCount": runtime.transfer_message_count,
        "TransferDeadLetterMessageCount": runtime.transfer_dead_letter_message_count,
    }
    for name, count in counts.items():
        ET.SubElement(details, f"{{{SB_COUNTS}}}{name}").text = str(count)
    if isinstance(runtime, TopicRuntimeProperties):
        ET.SubElement(element, sb("SubscriptionCount")).text = str(runtime.subscription_count)
        ET.SubElement(element, sb("SqlFilterCount")).text = str(runtime.sql_filter_count)
        ET.SubElement(element, sb("CorrelationFilterCount")).text = str(runtime.correlation_filter_count)
