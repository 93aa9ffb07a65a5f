"""Operator actions as flows and plans (see `flow.py`): purging an entity, and what resubmitting a
dead letter sends. Shared by the sync and async namespaces; imports no Ray.

An entity is a queue or a subscription path `TOPIC/Subscriptions/SUB` (any case of the segment).
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, NamedTuple

from ..entities import SUBSCRIPTIONS_SEGMENT
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ..filters import CorrelationFilter, RuleProperties, SqlFilter, compile_rules, rule_to_wire
from ..message import MAX_ID_LENGTH, Message, ReceivedMessage
from ..protocol import SUB_QUEUE_NUMBERS, SubQueue, make_sequence_number
from ..router_requests import DefinitionRequest, PeekRequest, PeekSessionRequest, PurgeReply, PurgeRequest
from .core import MAX_RECEIVE_COUNT
from .flow import Flow, route
from .management import MANAGEMENT_TIMEOUT_S

PURGE_BATCH = 1000
"""How many messages one purge call removes on each partition (so none is held for long)."""
RESUBMIT_BATCH = 100
"""How many dead letters a resubmit takes at a time."""
RESUBMIT_WAIT_S = 2.0
"""How long a resubmit waits for more dead letters before it is done."""
PEEK_PAGE = 250
"""How many messages a filtered peek browses at a time."""
PEEK_TIMEOUT_S = 30.0

Selector = Callable[[ReceivedMessage], bool]
"""Whether a message is one an operator action takes."""


class Target(NamedTuple):
    """Where a resubmitted message goes: a queue or a topic."""

    kind: str
    name: str
    deduplicating: bool = False
    """Whether it drops a message whose id it saw within its duplicate detection window."""


def sub_queue_number(sub_queue: Any) -> int:
    """The stored sub-queue number of a `SubQueue` (None: the entity itself)."""
    try:
        return SUB_QUEUE_NUMBERS[None if sub_queue is None else SubQueue(sub_queue)]
    except ValueError:
        raise InvalidArgumentError(f"sub_queue must be a SubQueue or None, got {sub_queue!r}") from None


def split_path(entity: str) -> tuple[str, str | None]:
    """(queue, None) or (topic, subscription) for an entity path."""
    if not isinstance(entity, str) or not entity:
        raise InvalidArgumentError(f"entity must be a queue name or TOPIC/Subscriptions/SUB, got {entity!r}")
    at = entity.lower().find(SUBSCRIPTIONS_SEGMENT)
    if at < 0:
        return entity, None
    return entity[:at], entity[at + len(SUBSCRIPTIONS_SEGMENT):]


def holder(entity: str, fresh: bool = True) -> Flow[dict[str, Any]]:
    """The definition of the queue or subscription `entity` names (read from a partition, or from
    the router's cache of the last seconds unless `fresh`); `InvalidOperationError` for a topic
    (which holds no messages of its own), `MessagingEntityNotFoundError` when absent."""
    topic, subscription = split_path(entity)
    name = topic if subscription is None else f"{topic}{SUBSCRIPTIONS_SEGMENT}{subscription}"
    definition = yield route(DefinitionRequest(name, fresh), timeout=MANAGEMENT_TIMEOUT_S)
    if definition["kind"] == "topic":
        raise InvalidOperationError(f"{entity!r} is a topic, which holds no messages of its own: name one of its "
                                    f"subscriptions as {entity}/Subscriptions/SUB", entity=entity)
    return definition  # type: ignore[no-any-return]


def purge_batch(entity: str, subq: int) -> Flow[PurgeReply]:
    """Remove up to `PURGE_BATCH` messages of sub-queue `subq` of `entity` on each of its
    partitions."""
    return (yield route(PurgeRequest(entity, subq, PURGE_BATCH, MANAGEMENT_TIMEOUT_S), timeout=MANAGEMENT_TIMEOUT_S))


def destination(to: str | None, definition: dict[str, Any]) -> Flow[Target]:
    """Where resubmitted dead letters of the entity `definition` describes go: `to` (a queue or a
    topic), or back to the entity (a subscription's to its topic, for its rules to select again)."""
    if to is None:
        deduplicating = _deduplicating(definition)  # a subscription's is its topic's
        if definition["kind"] == "subscription":
            return Target("topic", str(definition["topic"]), deduplicating)
        return Target("queue", str(definition["name"]), deduplicating)
    try:
        found = yield route(DefinitionRequest(to, True), timeout=MANAGEMENT_TIMEOUT_S)
    except MessagingEntityNotFoundError:
        raise MessagingEntityNotFoundError(f"there is no queue or topic named {to!r} to resubmit to; create it or "
                                           "name another", entity=to) from None
    if found["kind"] not in ("queue", "topic"):
        raise InvalidArgumentError(f"resubmit sends to a queue or a topic, and {to!r} is a {found['kind']}")
    return Target(str(found["kind"]), str(found["name"]), _deduplicating(found))


def _deduplicating(definition: dict[str, Any]) -> bool:
    return bool(definition["options"].get("requires_duplicate_detection"))


def wanted(sequence_numbers: Iterable[int] | None) -> set[int] | None:
    """The sequence numbers to resubmit (None: all), checked."""
    if sequence_numbers is None:
        return None
    numbers = list(sequence_numbers)
    if not numbers or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        raise InvalidArgumentError(f"sequence_numbers must be a non-empty list of sequence numbers (ints >= 0), "
                                   f"got {numbers!r}")
    return set(numbers)


def resubmitted(dead: ReceivedMessage, target: Target) -> Message:
    """A dead letter as a new message for `target`: its body and properties, without the
    dead-lettering's reason and description. Its message id is kept, except for a target with
    duplicate detection, which could take it for the original and drop it silently (and the dead
    letter, completed once its copy is sent, would be lost): there the copy gets a new id."""
    properties = {k: v for k, v in (dead.application_properties or {}).items()
                  if k not in ("DeadLetterReason", "DeadLetterErrorDescription")}
    message_id = uuid.uuid4().hex if target.deduplicating else dead.message_id
    return Message(bytes(dead.body), message_id=message_id, session_id=dead.session_id,
                   partition_key=dead.partition_key, correlation_id=dead.correlation_id, subject=dead.subject,
                   to=dead.to, reply_to=dead.reply_to, reply_to_session_id=dead.reply_to_session_id,
                   content_type=dead.content_type, application_properties=properties or None)


def selector(filter: Any) -> Selector | None:
    """What `filter` selects (None: every message): a SQL filter's text or a `SqlFilter` over the
    message's properties (`user.`/`sys.` names, as a subscription rule reads them), or a
    `CorrelationFilter`; `RuleSyntaxError` for SQL that does not parse, before anything is read."""
    if filter is None:
        return None
    if isinstance(filter, str):
        filter = SqlFilter(filter)
    if not isinstance(filter, (SqlFilter, CorrelationFilter)):
        raise InvalidArgumentError(f"filter must be SQL text, a SqlFilter or a CorrelationFilter, got {filter!r}")
    rules = compile_rules([rule_to_wire(RuleProperties("filter", filter))])

    def selects(message: ReceivedMessage) -> bool:
        return rules.select(_wire(message), _system(message)).plain

    return selects


def _wire(message: ReceivedMessage) -> dict[str, Any]:
    """The fields of `message` a filter reads, as its sender's wire dict holds them; a dead letter's
    reason and description are the properties `DeadLetterReason` and `DeadLetterErrorDescription`,
    as Service Bus gives them to a dead-lettered message."""
    properties = dict(message.application_properties)
    for key, value in (("DeadLetterReason", message.dead_letter_reason),
                       ("DeadLetterErrorDescription", message.dead_letter_error_description)):
        if value is not None:
            properties.setdefault(key, value)
    ttl = message.time_to_live
    scheduled = message.scheduled_enqueue_time_utc
    return {"message_id": message.message_id, "correlation_id": message.correlation_id, "to": message.to,
            "reply_to": message.reply_to, "subject": message.subject, "session_id": message.session_id,
            "reply_to_session_id": message.reply_to_session_id, "content_type": message.content_type,
            "partition_key": message.partition_key,
            "time_to_live": None if ttl is None else ttl.total_seconds(),
            "scheduled_enqueue_time": None if scheduled is None else scheduled.timestamp(),
            "application_properties": properties}


def _system(message: ReceivedMessage) -> dict[str, Any]:
    """The broker's fields of `message` a filter reads."""
    return {"sequence_number": message.sequence_number, "enqueued_time_utc": message.enqueued_time_utc,
            "enqueued_sequence_number": message.enqueued_sequence_number, "size": len(message.body),
            "delivery_count": message.delivery_count}


class Picking:
    """Which dead letters a resubmit takes, batch by batch: those with the wanted sequence numbers
    (all when None) that the filter selects. Those it passes over stay locked until the end (so
    the next receive brings others) and are then given back; a batch with nothing it has not seen
    (their locks lapsed and they came round again) ends the run."""

    def __init__(self, sequence_numbers: Iterable[int] | None, filter: Any) -> None:
        self.numbers = wanted(sequence_numbers)
        self.selects = selector(filter)
        self.passed: dict[int, ReceivedMessage] = {}
        """The dead letters passed over, by sequence number (the copy received last)."""
        self._seen: set[int] = set()

    @property
    def more(self) -> bool:
        """Whether another batch may hold a wanted dead letter."""
        return self.numbers is None or bool(self.numbers)

    def take(self, batch: list[ReceivedMessage]) -> list[ReceivedMessage] | None:
        """The dead letters of `batch` to move; None when the run is over (nothing new came)."""
        fresh = [m for m in batch if m.sequence_number not in self._seen]
        if not fresh:
            return None
        self._seen.update(m.sequence_number for m in fresh)
        moving = []
        for message in batch:
            seq = message.sequence_number
            if self.numbers is None or seq in self.numbers:
                if self.numbers is not None:
                    self.numbers.discard(seq)  # seen: taken now, or never
                if self.selects is None or self.selects(message):
                    moving.append(message)
                    continue
            self.passed[seq] = message
        return moving


def peek_range(sequence_number: int, partition: int | None, partition_count: int) -> tuple[int, int | None]:
    """The sequence numbers a peek browses, `[start, end)` (end None: to the last): from
    `sequence_number`, and within partition `partition`'s when given (`InvalidArgumentError`
    unless it is one of the namespace's)."""
    if isinstance(sequence_number, bool) or not isinstance(sequence_number, int) or sequence_number < 0:
        raise InvalidArgumentError(f"sequence_number must be an int >= 0, got {sequence_number!r}")
    if partition is None:
        return sequence_number, None
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < partition_count:
        raise InvalidArgumentError(f"partition must be an int from 0 to {partition_count - 1} (the namespace has "
                                   f"{partition_count} partitions), got {partition!r}")
    return max(sequence_number, make_sequence_number(partition, 0)), make_sequence_number(partition + 1, 0)


def peek(entity: str, max_message_count: Any, *, sequence_number: Any, sub_queue: Any, session_id: Any,
         filter: Any, partition: Any, partition_count: int) -> Flow[list[ReceivedMessage]]:
    """Browse up to `max_message_count` messages of a queue or subscription (or its dead-letter
    queue) without locking them, as `Namespace.peek_messages` describes, page by page; a session's
    messages are browsed without taking the session's lock, so a receiver may hold it meanwhile.
    Every argument is checked before anything is read."""
    selects = selector(filter)
    start, end = peek_range(sequence_number, partition, partition_count)
    count = check_peek_count(max_message_count)
    subq = sub_queue_number(sub_queue)
    if session_id is not None:
        if subq != SUB_QUEUE_NUMBERS[None]:
            raise InvalidOperationError("dead-letter sub-queues have no sessions; peek them without session_id",
                                        entity=entity)
        if not isinstance(session_id, str) or len(session_id) > MAX_ID_LENGTH:  # "" is a session too
            raise InvalidArgumentError(f"session_id must be a str of at most {MAX_ID_LENGTH} characters (the "
                                       f"session to peek), got {session_id!r:.160}")
    name = (yield from holder(entity, fresh=False))["name"]   # a partition that lost the entity says so
    found: list[ReceivedMessage] = []
    while len(found) < count and (end is None or start < end):
        want = min(count - len(found) if selects is None else PEEK_PAGE, MAX_RECEIVE_COUNT)
        if session_id is None:
            records = yield route(PeekRequest(name, subq, None, start, want, end), timeout=PEEK_TIMEOUT_S)
        else:
            records = yield route(PeekSessionRequest(name, subq, session_id, start, want, end), timeout=PEEK_TIMEOUT_S)
        if not records:
            break
        page = [ReceivedMessage(r, peeked=True) for r in records]
        found += [m for m in page if selects is None or selects(m)][:count - len(found)]
        if len(records) < want:   # a short page: nothing more in the range
            break
        start = page[-1].sequence_number + 1
    return found


def check_peek_count(max_message_count: Any) -> int:
    """`max_message_count` of a peek, checked: an int >= 1."""
    if isinstance(max_message_count, bool) or not isinstance(max_message_count, int) or max_message_count < 1:
        raise InvalidArgumentError(f"max_message_count must be an int >= 1, got {max_message_count!r}")
    return max_message_count
