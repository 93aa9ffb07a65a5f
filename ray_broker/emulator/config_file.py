"""The emulator's `Config.json` read into `EmulatorConfig`, every property either applied or refused.

The format is Microsoft's (`Config-schema.json` of its emulator installer):

    {"UserConfig": {
        "Namespaces": [{"Name": "sbemulatorns",
                        "Queues": [{"Name": ..., "Properties": {...}}],
                        "Topics": [{"Name": ..., "Properties": {...},
                                    "Subscriptions": [{"Name": ..., "Properties": {...},
                                                       "Rules": [{"Name": ..., "Properties": {...}}]}]}]}],
        "Logging": {"Type": "File"}}}

with `//` and `/* */` comments. A property the file leaves out takes the emulator's default
(`DefaultMessageTimeToLive` PT1H, `DuplicateDetectionHistoryTimeWindow` PT20S, `LockDuration`
PT1M, `MaxDeliveryCount` 3, flags false, no forwarding), so an entity behaves as it did there.
Values are held to Service Bus's own limits (the broker's), not to the emulator's narrower ones:
a `DefaultMessageTimeToLive` of P1D is taken. `EnablePartitioning` (queues and topics) is this
broker's addition. A subscription with `Rules` has exactly those rules; one without has the
`$Default` rule that takes every message.

Anything else is refused with `EmulatorConfigError`, one line naming the entity and the property:
an unknown key, a value of the wrong type, a duration that is not ISO 8601, a value out of range,
a SQL filter or action that does not parse (compiled here), a forward to an entity the file does
not define. Pure: nothing here starts or writes anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Mapping

from ..config import check_namespace_name
from ..entities import (
    check_entity_name,
    check_subscription_name,
    normalize_queue_options,
    normalize_subscription_options,
    normalize_topic_options,
)
from ..errors import EmulatorConfigError, InvalidArgumentError
from ..filters import CorrelationFilter, SqlFilter, SqlRuleAction, check_rule_name
from . import jsonc
from .durations import duration_seconds
from .model import FORWARD_OPTIONS, LOG_TARGETS, EmulatorConfig, QueueSpec, RuleSpec, SubscriptionSpec, TopicSpec

DEFAULT_NAMESPACE = "sbemulatorns"
"""The namespace name of Microsoft's emulator (the only one its schema allows), and ours without a file."""


@dataclass(frozen=True)
class Property:
    """A property of the file: the option it sets, how its value is read, and the emulator's default."""

    option: str
    read: Callable[[Any], Any]
    """The value as the client takes it; `ValueError` with what was expected for a wrong one."""
    default: Any


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _duration(value: Any) -> timedelta:
    seconds = duration_seconds(value) if isinstance(value, str) else None
    if seconds is None:
        raise ValueError("must be an ISO 8601 duration such as PT30S, PT1M, PT1H or P1D")
    return timedelta(seconds=seconds)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be a whole number")
    return value


def _entity(value: Any) -> str | None:
    if not isinstance(value, str):
        raise ValueError('must be the name of a queue or topic, or "" for none')
    return value or None


_TTL = Property("default_message_time_to_live", _duration, timedelta(hours=1))
_DUPLICATE_WINDOW = Property("duplicate_detection_history_time_window", _duration, timedelta(seconds=20))
_LOCK = Property("lock_duration", _duration, timedelta(minutes=1))
_DELIVERIES = Property("max_delivery_count", _count, 3)
_FORWARD_TO = Property("forward_to", _entity, None)
_FORWARD_DEAD_LETTERS = Property("forward_dead_lettered_messages_to", _entity, None)
_PARTITIONING = Property("enable_partitioning", _flag, False)


def _flag_of(option: str) -> Property:
    return Property(option, _flag, False)


QUEUE_PROPERTIES: dict[str, Property] = {
    "DeadLetteringOnMessageExpiration": _flag_of("dead_lettering_on_message_expiration"),
    "DefaultMessageTimeToLive": _TTL,
    "DuplicateDetectionHistoryTimeWindow": _DUPLICATE_WINDOW,
    "EnablePartitioning": _PARTITIONING,
    "ForwardDeadLetteredMessagesTo": _FORWARD_DEAD_LETTERS,
    "ForwardTo": _FORWARD_TO,
    "LockDuration": _LOCK,
    "MaxDeliveryCount": _DELIVERIES,
    "RequiresDuplicateDetection": _flag_of("requires_duplicate_detection"),
    "RequiresSession": _flag_of("requires_session"),
}
TOPIC_PROPERTIES: dict[str, Property] = {
    "DefaultMessageTimeToLive": _TTL,
    "DuplicateDetectionHistoryTimeWindow": _DUPLICATE_WINDOW,
    "EnablePartitioning": _PARTITIONING,
    "RequiresDuplicateDetection": _flag_of("requires_duplicate_detection"),
}
SUBSCRIPTION_PROPERTIES: dict[str, Property] = {
    "DeadLetteringOnMessageExpiration": _flag_of("dead_lettering_on_message_expiration"),
    "DefaultMessageTimeToLive": _TTL,
    "ForwardDeadLetteredMessagesTo": _FORWARD_DEAD_LETTERS,
    "ForwardTo": _FORWARD_TO,
    "LockDuration": _LOCK,
    "MaxDeliveryCount": _DELIVERIES,
    "RequiresSession": _flag_of("requires_session"),
}
CORRELATION_FIELDS = {"ContentType": "content_type", "CorrelationId": "correlation_id", "Label": "subject",
                      "MessageId": "message_id", "ReplyTo": "reply_to", "ReplyToSessionId": "reply_to_session_id",
                      "SessionId": "session_id", "To": "to", "Properties": "properties"}
"""The keys of a `CorrelationFilter` object and the `CorrelationFilter` arguments they set."""
FILTER_TYPES = ("Correlation", "Sql")


class _Reader:
    """Reads one document, naming `source` (the file) in every refusal."""

    def __init__(self, source: str) -> None:
        self.source = source

    def refuse(self, where: str, what: str) -> EmulatorConfigError:
        return EmulatorConfigError(f"{self.source}: {where}: {what}")

    def mapping(self, value: Any, where: str, keys: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
        """`value` as an object with no key but `keys` and every one of `required`."""
        if not isinstance(value, Mapping):
            raise self.refuse(where, f"must be a JSON object, got {_kind(value)}")
        unknown = [k for k in value if k not in keys]
        if unknown:
            raise self.refuse(where, f"unknown property {unknown[0]!r}{_hint(unknown[0], keys)}; the properties "
                                     f"here are {', '.join(keys)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.refuse(where, f"{missing[0]!r} is missing")
        return dict(value)

    def items(self, value: Any, where: str) -> list[Any]:
        """`value` as a list (None or absent: empty)."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.refuse(where, f"must be a JSON array, got {_kind(value)}")
        return value

    def name(self, item: Any, where: str, check: Callable[[Any], Any]) -> str:
        """The `Name` of an entity object, checked as the broker checks such names."""
        name = item.get("Name")
        if not isinstance(name, str):
            raise self.refuse(where, f"'Name' must be a string, got {_kind(name)}")
        try:
            check(name)
        except InvalidArgumentError as exc:
            raise self.refuse(where, str(exc)) from None
        return name

    def options(self, where: str, given: Any, table: Mapping[str, Property],
                normalize: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
        """The options an entity's `Properties` give, the emulator's defaults for those left out,
        each checked as the broker checks it."""
        given = self.mapping({} if given is None else given, f"{where}, 'Properties'", tuple(table))
        options = {p.option: p.default for p in table.values()}
        for key, value in given.items():
            prop = table[key]
            try:
                options[prop.option] = prop.read(value)
            except ValueError as exc:
                raise self.refuse(where, f"{key} {exc}, got {value!r}") from None
            try:
                normalize({prop.option: options[prop.option]})
            except InvalidArgumentError as exc:
                why = str(exc)
                why = "it" + why[len(prop.option):] if why.startswith(prop.option) else why.replace(prop.option, key)
                raise self.refuse(where, f"{key} {value!r} is refused: {why}") from None
        return options


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "true or false", int: "a number",
             float: "a number", type(None): "null"}
    return next((n for t, n in names.items() if type(value) is t), type(value).__name__)


def _hint(key: str, known: tuple[str, ...]) -> str:
    """` (did you mean 'X'?)` for a key that differs from a known one only in case."""
    same = next((k for k in known if k.lower() == key.lower()), None)
    return f" (did you mean {same!r}?)" if same else ""


def read_config(path: str) -> EmulatorConfig:
    """The configuration in the file at `path`; `EmulatorConfigError` for a file that cannot be
    read or used (naming the file, and the line and column or the entity and property)."""
    try:
        with open(path, encoding="utf-8-sig") as src:
            text = src.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise EmulatorConfigError(f"cannot read the configuration file {path}: {reason}; give the path of the "
                                  "emulator's Config.json") from None
    return loads_config(text, path)


def loads_config(text: str, source: str = "Config.json") -> EmulatorConfig:
    """The configuration `text` (JSON with comments) holds."""
    return parse_config(jsonc.loads(text, source), source)


def parse_config(document: Any, source: str = "Config.json") -> EmulatorConfig:
    """The configuration a parsed `Config.json` document describes."""
    reader = _Reader(source)
    root = reader.mapping(document, "the document", ("UserConfig",), ("UserConfig",))
    user = reader.mapping(root["UserConfig"], "'UserConfig'", ("Namespaces", "Logging"), ("Namespaces",))
    namespaces = reader.items(user["Namespaces"], "'UserConfig.Namespaces'")
    if len(namespaces) != 1:
        raise reader.refuse("'UserConfig.Namespaces'", f"must hold exactly one namespace, as the emulator serves "
                                                       f"one; it holds {len(namespaces)}")
    logging = _logging(reader, user.get("Logging"))
    where = "the namespace"
    namespace = reader.mapping(namespaces[0], where, ("Name", "Queues", "Topics"), ("Name",))
    name = reader.name(namespace, where, check_namespace_name)
    queues = tuple(_queue(reader, item, k) for k, item in enumerate(reader.items(namespace.get("Queues"),
                                                                               "'Queues'")))
    topics = tuple(_topic(reader, item, k) for k, item in enumerate(reader.items(namespace.get("Topics"),
                                                                               "'Topics'")))
    config = EmulatorConfig(name, queues, topics, logging)
    _check_names(reader, config)
    _check_forwards(reader, config)
    return config


def _logging(reader: _Reader, value: Any) -> tuple[str, ...]:
    """Where `Logging.Type` sends logs: "File", "Console" or both ("File,Console")."""
    if value is None:
        return ("File",)
    logging = reader.mapping(value, "'UserConfig.Logging'", ("Type",), ("Type",))
    kinds = logging["Type"].split(",") if isinstance(logging["Type"], str) else None
    targets = tuple(next((t for t in LOG_TARGETS if t.lower() == k.strip().lower()), "") for k in kinds or [""])
    if not all(targets) or len(set(targets)) != len(targets):
        raise reader.refuse("'UserConfig.Logging'", f"Type must be \"File\", \"Console\" or \"File,Console\", "
                                                    f"got {logging['Type']!r}")
    return targets


def _queue(reader: _Reader, item: Any, index: int) -> QueueSpec:
    where = f"queue #{index + 1}"
    queue = reader.mapping(item, where, ("Name", "Properties"), ("Name",))
    name = reader.name(queue, where, lambda n: check_entity_name(n, "queue"))
    return QueueSpec(name, reader.options(f"queue {name!r}", queue.get("Properties"), QUEUE_PROPERTIES,
                                          normalize_queue_options))


def _topic(reader: _Reader, item: Any, index: int) -> TopicSpec:
    where = f"topic #{index + 1}"
    topic = reader.mapping(item, where, ("Name", "Properties", "Subscriptions"), ("Name",))
    name = reader.name(topic, where, lambda n: check_entity_name(n, "topic"))
    options = reader.options(f"topic {name!r}", topic.get("Properties"), TOPIC_PROPERTIES, normalize_topic_options)
    subscriptions = tuple(_subscription(reader, name, sub, k) for k, sub in
                          enumerate(reader.items(topic.get("Subscriptions"), f"topic {name!r}, 'Subscriptions'")))
    return TopicSpec(name, options, subscriptions)


def _subscription(reader: _Reader, topic: str, item: Any, index: int) -> SubscriptionSpec:
    where = f"subscription #{index + 1} of topic {topic!r}"
    sub = reader.mapping(item, where, ("Name", "Properties", "Rules"), ("Name",))
    name = reader.name(sub, where, check_subscription_name)
    where = f"subscription {name!r} of topic {topic!r}"
    options = reader.options(where, sub.get("Properties"), SUBSCRIPTION_PROPERTIES, normalize_subscription_options)
    rules = tuple(_rule(reader, where, rule, k) for k, rule in
                  enumerate(reader.items(sub.get("Rules"), f"{where}, 'Rules'")))
    return SubscriptionSpec(name, options, rules)


def _rule(reader: _Reader, owner: str, item: Any, index: int) -> RuleSpec:
    where = f"rule #{index + 1} of {owner}"
    rule = reader.mapping(item, where, ("Name", "Properties"), ("Name", "Properties"))
    name = reader.name(rule, where, check_rule_name)
    where = f"rule {name!r} of {owner}"
    props = reader.mapping(rule["Properties"], f"{where}, 'Properties'",
                           ("FilterType", "CorrelationFilter", "SqlFilter", "Action"), ("FilterType",))
    kind = next((t for t in FILTER_TYPES if isinstance(props["FilterType"], str)
                 and t.lower() == props["FilterType"].lower()), None)
    if kind is None:
        raise reader.refuse(where, f"FilterType must be \"Correlation\" or \"Sql\", got {props['FilterType']!r}")
    other = "SqlFilter" if kind == "Correlation" else "CorrelationFilter"
    if other in props:
        raise reader.refuse(where, f"FilterType is {kind!r} but the rule also has a {other}; remove one of them")
    action = None
    if props.get("Action") is not None:
        text = _sql_text(reader, where, props["Action"], "Action")
        action = _compiled(reader, where, "Action", lambda: SqlRuleAction(text))
    if kind == "Sql":
        if "SqlFilter" not in props:
            raise reader.refuse(where, "FilterType is \"Sql\" but the rule has no SqlFilter")
        text = _sql_text(reader, where, props["SqlFilter"], "SqlFilter")
        return RuleSpec(name, _compiled(reader, where, "SqlFilter", lambda: SqlFilter(text)), action)
    if "CorrelationFilter" not in props:
        raise reader.refuse(where, "FilterType is \"Correlation\" but the rule has no CorrelationFilter")
    fields = reader.mapping(props["CorrelationFilter"], f"{where}, 'CorrelationFilter'", tuple(CORRELATION_FIELDS))
    for key, value in fields.items():
        if key == "Properties":
            if not isinstance(value, Mapping):
                raise reader.refuse(where, f"CorrelationFilter.Properties must be a JSON object, got {_kind(value)}")
        elif not isinstance(value, str):
            raise reader.refuse(where, f"CorrelationFilter.{key} must be a string, got {_kind(value)}")
    arguments = {CORRELATION_FIELDS[key]: value for key, value in fields.items()}
    return RuleSpec(name, _compiled(reader, where, "CorrelationFilter", lambda: CorrelationFilter(**arguments)),
                    action)


def _sql_text(reader: _Reader, where: str, value: Any, key: str) -> str:
    holder = reader.mapping(value, f"{where}, '{key}'", ("SqlExpression",), ("SqlExpression",))
    if not isinstance(holder["SqlExpression"], str):
        raise reader.refuse(where, f"{key}.SqlExpression must be a string, got {_kind(holder['SqlExpression'])}")
    return holder["SqlExpression"]


def _compiled(reader: _Reader, where: str, key: str, build: Callable[[], Any]) -> Any:
    """`build()`: a filter or action, compiled as the broker compiles it; refused when it does not."""
    try:
        return build()
    except InvalidArgumentError as exc:
        raise reader.refuse(where, f"{key} is refused: {exc}") from None


def _check_names(reader: _Reader, config: EmulatorConfig) -> None:
    """Queues and topics share one set of names, subscriptions are unique in their topic, rules in
    their subscription (all regardless of case, as Service Bus compares them)."""
    _unique(reader, "the namespace", "queues or topics", [e.name for e in (*config.queues, *config.topics)])
    for topic in config.topics:
        _unique(reader, f"topic {topic.name!r}", "subscriptions", [s.name for s in topic.subscriptions])
        for sub in topic.subscriptions:
            _unique(reader, f"subscription {sub.name!r} of topic {topic.name!r}", "rules", [r.name for r in sub.rules])


def _unique(reader: _Reader, where: str, plural: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise reader.refuse(where, f"two {plural} are named {name!r} (names are compared regardless of case)")
        seen.add(name.lower())


def _check_forwards(reader: _Reader, config: EmulatorConfig) -> None:
    """A forward names a queue or topic of the file (a queue may name itself: the hop limit ends
    the loop)."""
    targets = {e.name.lower() for e in (*config.queues, *config.topics)}
    entities = [(f"queue {q.name!r}", q.options) for q in config.queues] + \
        [(f"subscription {s.name!r} of topic {t.name!r}", s.options) for t in config.topics for s in t.subscriptions]
    keys = {"forward_to": "ForwardTo", "forward_dead_lettered_messages_to": "ForwardDeadLetteredMessagesTo"}
    for where, options in entities:
        for option in FORWARD_OPTIONS:
            target = options.get(option)
            if target is None:
                continue
            if target.lower() not in targets:
                raise reader.refuse(where, f"{keys[option]} names {target!r}, which is no queue or topic of the file; "
                                           "define it in the file, or leave the property \"\"")
