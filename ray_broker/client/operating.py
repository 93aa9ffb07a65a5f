"""Operator actions as flows and plans (see `flow.py`): purging an entity, and what resubmitting a
dead letter sends. Shared by the sync and async namespaces; imports no Ray.

An entity is a queue or a subscription path `TOPIC/Subscriptions/SUB` (any case of the segment).
"""
from __future__ import annotations

import uuid
from typing import Any, Iterable, NamedTuple

from ..entities import SUBSCRIPTIONS_SEGMENT
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ..message import Message, ReceivedMessage
from ..protocol import SUB_QUEUE_NUMBERS, SubQueue
from .flow import Flow, request
from .management import MANAGEMENT_TIMEOUT_S

PURGE_BATCH = 1000
"""How many messages one purge call removes on each partition (so none is held for long)."""
RESUBMIT_BATCH = 100
"""How many dead letters a resubmit takes at a time."""
RESUBMIT_WAIT_S = 2.0
"""How long a resubmit waits for more dead letters before it is done."""


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


def holder(entity: str) -> Flow[dict[str, Any]]:
    """The definition of the queue or subscription `entity` names; `InvalidOperationError` for a
    topic (which holds no messages of its own), `MessagingEntityNotFoundError` when absent."""
    topic, subscription = split_path(entity)
    name = topic if subscription is None else f"{topic}{SUBSCRIPTIONS_SEGMENT}{subscription}"
    definition = yield request("definition", name, True, timeout=MANAGEMENT_TIMEOUT_S)
    if definition["kind"] == "topic":
        raise InvalidOperationError(f"{entity!r} is a topic, which holds no messages of its own: name one of its "
                                    f"subscriptions as {entity}/Subscriptions/SUB", entity=entity)
    return definition  # type: ignore[no-any-return]


def purge_batch(entity: str, subq: int) -> Flow[dict[str, Any]]:
    """Remove up to `PURGE_BATCH` messages of sub-queue `subq` of `entity` on each of its
    partitions: `{"removed", "more"}`."""
    return (yield request("purge", entity, subq, PURGE_BATCH, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S))


def destination(to: str | None, definition: dict[str, Any]) -> Flow[Target]:
    """Where resubmitted dead letters of the entity `definition` describes go: `to` (a queue or a
    topic), or back to the entity (a subscription's to its topic, for its rules to select again)."""
    if to is None:
        deduplicating = _deduplicating(definition)  # a subscription's is its topic's
        if definition["kind"] == "subscription":
            return Target("topic", str(definition["topic"]), deduplicating)
        return Target("queue", str(definition["name"]), deduplicating)
    try:
        found = yield request("definition", to, True, timeout=MANAGEMENT_TIMEOUT_S)
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
