"""Client logic shared by the sync and async clients: everything that is not I/O.

Validation of arguments, sub-queue paths, envelopes and batch sizes, settlement requests and the
mapping of their results to errors. Sans-I/O: it imports no Ray.
"""
from __future__ import annotations

import enum
import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from ..clock import duration_seconds, to_datetime
from ..protocol import NEXT_AVAILABLE_SESSION, SUB_QUEUE_NUMBERS, ReceiveMode, SessionFilter, SubQueue
from ..entities import check_entity_name
from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageAlreadySettled,
    MessageLockLostError,
    MessageSizeExceededError,
    ServiceBusError,
    SessionLockLostError,
)
from ..message import MAX_ID_LENGTH, Message, ReceivedMessage, envelope_from_wire, schedule_time_epoch
from ..sku import Sku
from ..wire import Settlement

DEFAULT_MAX_WAIT_S = 60.0
DEFAULT_TIMEOUT_S = 60.0
MAX_RECEIVE_COUNT = 10_000
MAX_SEQUENCE_NUMBER = (1 << 63) - 1
"""The largest sequence number the store can hold (a signed 64-bit integer)."""
MAX_WAIT_S = 30 * 86_400.0
"""The longest a call waits; longer waits are shortened to this."""
CALL_GRACE_S = 30.0
"""Extra time a client allows a gateway call beyond the operation's own timeout."""


_PATH_SUFFIXES = (("/$transfer/$deadletterqueue", SubQueue.TRANSFER_DEAD_LETTER),
                  ("/$deadletterqueue", SubQueue.DEAD_LETTER))


@dataclass(frozen=True)
class ReceiveTarget:
    """What a receiver reads: entity, sub-queue, mode, session choice and waiting defaults."""

    entity: str
    subq: int
    mode: ReceiveMode
    session_id: str | SessionFilter | None
    prefetch_count: int
    max_wait_time: float
    partitions: tuple[int, ...] | None = None
    """The partitions it takes messages from (None: all), as sequence numbers name them."""


def receive_target(entity: str, *, receive_mode: Any, sub_queue: Any, session_id: Any, prefetch_count: Any,
                   max_wait_time: Any, partitions: Any = None, partition_count: int = 1) -> ReceiveTarget:
    """Validate receiver arguments (sub-queue paths included) into a `ReceiveTarget`; `partitions`
    are checked against the namespace's `partition_count`."""
    if not isinstance(entity, str):
        raise InvalidArgumentError(f"entity name must be a str, not {type(entity).__name__}")
    lowered = entity.lower()
    for suffix, queue in _PATH_SUFFIXES:
        if lowered.endswith(suffix):
            if sub_queue not in (None, queue):
                raise InvalidArgumentError(f"path {entity!r} names {queue.name}; do not also pass sub_queue={sub_queue!r}")
            entity, sub_queue = entity[: -len(suffix)], queue
            break
    check_entity_name(entity, "entity")
    try:
        mode = ReceiveMode(receive_mode)
    except ValueError:
        raise InvalidArgumentError(f"receive_mode must be a ReceiveMode, got {receive_mode!r}") from None
    if sub_queue is not None:
        try:
            sub_queue = SubQueue(sub_queue)
        except ValueError:
            raise InvalidArgumentError(f"sub_queue must be a SubQueue, got {sub_queue!r}") from None
    if session_id is not None:
        if sub_queue is not None:
            raise InvalidOperationError("dead-letter sub-queues have no sessions; open them without session_id")
        if session_id is not NEXT_AVAILABLE_SESSION:
            if not isinstance(session_id, str) or len(session_id) > MAX_ID_LENGTH:  # "" is a session too, as on Service Bus
                raise InvalidArgumentError(
                    f"session_id must be a str of at most {MAX_ID_LENGTH} characters or NEXT_AVAILABLE_SESSION, "
                    f"got {session_id!r}")
    if isinstance(prefetch_count, bool) or not isinstance(prefetch_count, int) or not 0 <= prefetch_count <= MAX_RECEIVE_COUNT:
        raise InvalidArgumentError(f"prefetch_count must be an int from 0 to {MAX_RECEIVE_COUNT}, got {prefetch_count!r}")
    if partitions is not None and session_id is not None:
        raise InvalidOperationError("a session receiver reads the partition of its session; open it without partitions")
    return ReceiveTarget(entity, SUB_QUEUE_NUMBERS[sub_queue], mode, session_id, prefetch_count,
                         wait_seconds(max_wait_time, DEFAULT_MAX_WAIT_S),
                         None if partitions is None else partition_share(partitions, partition_count))


def partition_share(partitions: Any, partition_count: int) -> tuple[int, ...]:
    """Partition indexes a receiver takes messages from: distinct ints from 0 to `partition_count`
    - 1, at least one, in order."""
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Iterable):
        raise InvalidArgumentError(f"partitions must be a collection of partition indexes, got {partitions!r}")
    share = list(partitions)
    if not share or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < partition_count for k in share):
        raise InvalidArgumentError(
            f"partitions must name at least one partition, each an int from 0 to {partition_count - 1}, "
            f"got {partitions!r}")
    return tuple(sorted(set(share)))


def wait_seconds(value: Any, default: float) -> float:
    """A waiting time in seconds: None means `default`; negative, NaN or non-numbers are errors.

    Waits beyond MAX_WAIT_S (30 days) are taken as MAX_WAIT_S, which the timers of Ray and of
    the standard library can still hold.
    """
    if value is None:
        return default
    seconds = duration_seconds(value)
    if seconds is None or not 0 <= seconds < math.inf:
        raise InvalidArgumentError(
            f"a waiting time must be a finite, non-negative number of seconds or a timedelta, got {value!r}")
    return min(seconds, MAX_WAIT_S)


def check_count(value: Any, name: str = "max_message_count") -> int:
    """A message count from 1 to MAX_RECEIVE_COUNT."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RECEIVE_COUNT:
        raise InvalidArgumentError(f"{name} must be an int from 1 to {MAX_RECEIVE_COUNT}, got {value!r}")
    return value


class MessageBatch:
    """Messages sent together in one call, bounded by the tier's batch size.

    Args:
        max_size_in_bytes: the most bytes of encoded messages the batch takes. A sender's
            `create_message_batch()` gives the tier's limit (or a smaller one it is asked for);
            a bulk writer that packs many batches may make the next ones as
            `rb.MessageBatch(first.max_size_in_bytes)`, without a call to the sender (an async
            sender's `create_message_batch` is awaited). A send checks the tier's limits whatever
            the batch was made with.
    """

    def __init__(self, max_size_in_bytes: int) -> None:
        self.max_size_in_bytes = max_size_in_bytes
        self.size_in_bytes = 0
        self._envelopes: list[dict[str, Any]] = []

    def add_message(self, message: Message) -> None:
        """Add a message; `MessageSizeExceededError` if it does not fit (the batch is unchanged)."""
        self.add_envelope(to_envelope(message))

    def add_envelope(self, envelope: dict[str, Any]) -> None:
        """Add a message already encoded into its envelope (`Message.to_envelope`, or
        `rb.encode_messages`, with which bulk writers encode many without building `Message`s);
        `MessageSizeExceededError` as `add_message`."""
        if self.size_in_bytes + envelope["size"] > self.max_size_in_bytes:
            raise MessageSizeExceededError(
                f"the batch holds {self.size_in_bytes} of {self.max_size_in_bytes} bytes and this message needs "
                f"{envelope['size']}: send this batch and start a new one")
        self._envelopes.append(envelope)
        self.size_in_bytes += envelope["size"]

    def __len__(self) -> int:
        return len(self._envelopes)

    @property
    def envelopes(self) -> list[dict[str, Any]]:
        """The encoded messages."""
        return list(self._envelopes)


def new_batch(sku: Sku, max_size_in_bytes: int | None) -> MessageBatch:
    """A batch no larger than the tier allows."""
    if max_size_in_bytes is None:
        return MessageBatch(sku.max_message_bytes)
    if isinstance(max_size_in_bytes, bool) or not isinstance(max_size_in_bytes, int) or not 0 < max_size_in_bytes <= sku.max_message_bytes:
        raise InvalidArgumentError(
            f"max_size_in_bytes must be from 1 to {sku.max_message_bytes} on the {sku.name} tier, got {max_size_in_bytes!r}")
    return MessageBatch(max_size_in_bytes)


def to_envelope(message: Any) -> dict[str, Any]:
    """The envelope of one `Message`; anything else is a TypeError.

    A message without a message id goes with a new one (uuid hex), as Service Bus, the CLI and the
    AMQP front end give every message an id; the `Message` itself is left as it is. The new id is
    the message's alone: it keys neither routing nor duplicate detection, so the message stays
    unkeyed (spread over the partitions) as it was sent."""
    if not isinstance(message, Message):
        raise TypeError(f"expected a ray_broker.Message, got {type(message).__name__}")
    if message.message_id is not None:
        return message.to_envelope()
    envelope = envelope_from_wire(dict(message.to_wire(), message_id=uuid.uuid4().hex))
    del envelope["message_id"]  # routing and duplicate detection see the message as sent: no id
    return envelope


def envelopes_for_send(sku: Sku, messages: Any, *, schedule_at: float | None = None) -> list[dict[str, Any]]:
    """Envelopes of a message, a list of messages or a batch, checked against the tier's size limit.

    `schedule_at` (epoch seconds) schedules them all for that time."""
    if isinstance(messages, MessageBatch):
        envelopes = messages.envelopes
    elif isinstance(messages, Message):
        envelopes = [to_envelope(messages)]
    elif isinstance(messages, Iterable) and not isinstance(messages, (str, bytes, dict)):
        envelopes = [to_envelope(m) for m in messages]
    else:
        raise TypeError(f"expected a Message, a list of Messages or a MessageBatch, got {type(messages).__name__}")
    limit = sku.max_message_bytes
    for env in envelopes:
        if env["size"] > limit:
            raise MessageSizeExceededError(
                f"a message is {env['size']} bytes; the {sku.name} tier allows {limit} bytes per message: "
                "make it smaller (for example, store large content elsewhere and send a reference)")
    total = sum(e["size"] for e in envelopes)
    if total > limit:
        raise MessageSizeExceededError(
            f"the messages total {total} bytes; the {sku.name} tier allows {limit} bytes per batch: "
            "send them in smaller batches (create_message_batch() packs them for you)")
    if schedule_at is not None:
        envelopes = [dict(e, scheduled=schedule_at) for e in envelopes]
    return envelopes


def settlement_op(message: Any, action: str, receiver_key: str, closed: bool,
                  reason: Any = None, description: Any = None, session_until: float | None = None,
                  now: float | None = None) -> Settlement:
    """Check that `message` may be settled by this receiver now and build the settlement.

    The checks that decide the outcome run here, in the caller: a message settled before (or
    received in RECEIVE_AND_DELETE mode), another receiver's message, and an expired message or
    session lock each raise at once. `now` is the current epoch time (read when None).
    """
    if closed:
        raise InvalidOperationError("the receiver is closed; settle messages before closing it")
    if not isinstance(message, ReceivedMessage):
        raise TypeError(f"expected a ReceivedMessage, got {type(message).__name__}")
    if message._settled:
        raise MessageAlreadySettled(
            f"message {message.sequence_number} was already settled or was received in RECEIVE_AND_DELETE mode")
    if message._receiver_key != receiver_key:
        raise InvalidOperationError(
            f"message {message.sequence_number} was received by another receiver; settle it with the receiver "
            "that received it (its lock token is not this receiver's)")
    if reason is not None and not isinstance(reason, str):
        raise TypeError("reason must be a str or None")
    if description is not None and not isinstance(description, str):
        raise TypeError("error_description must be a str or None")
    if now is None:
        now = time.time()
    if session_until is not None and session_until <= now:
        raise SessionLockLostError(
            f"the session lock expired before message {message.sequence_number} was settled; accept the session again")
    if session_until is None and message.locked_until is not None and message.locked_until <= now:
        raise MessageLockLostError(
            f"the lock on message {message.sequence_number} expired before it was settled; receive it again "
            "(renew locks of messages that take long to process)")
    assert message.lock_token_bytes is not None
    return Settlement(action, message.sequence_number, message.lock_token_bytes, reason, description)


def apply_settlement(message: ReceivedMessage, action: str, result: Any) -> datetime | None:
    """Raise the error a settlement met, or mark the message settled (renew: return the new expiry)."""
    if isinstance(result, BaseException):
        raise result
    if action == "renew":
        message.locked_until_utc = to_datetime(result)
        return message.locked_until_utc
    message._settled = True
    return None


class Flush(enum.Enum):
    """When buffered settlements are to be sent, as `SettlementBuffer.add` decides."""

    NONE = 0
    """A flush is already scheduled (the buffer was not empty)."""
    LATER = 1
    """The buffer was empty: schedule a flush in FLUSH_DELAY_S."""
    NOW = 2
    """The buffer is full, or a lock in it is about to expire."""


FLUSH_DELAY_S = 0.05
"""How long a settlement waits for a receive call to carry it before it is sent on its own."""


class SettlementBuffer:
    """Settlements accepted by a receiver that travel with its next call to the gateway.

    A message is marked settled when it enters the buffer, so settling it again raises at once.
    Should the broker later refuse a buffered settlement (a lock lost in a partition restart, say),
    the error is kept and raised by the receiver's next operation.
    """

    URGENT_MARGIN_S = 2.0
    MAX_PENDING = MAX_RECEIVE_COUNT
    """The most settlements left for the receiver's next call to carry: a whole page of the largest
    receive, so settling every message of a page costs no call of its own; one more sends them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[Settlement] = []
        self._errors: list[BaseException] = []
        self._oldest_deadline = math.inf

    def add(self, message: ReceivedMessage, op: Settlement, lock_deadline: float, now: float) -> Flush:
        """Buffer a settlement of a lock that expires at `lock_deadline` (epoch seconds, as `now`);
        says when to send the buffer."""
        with self._lock:
            ops = self._ops
            ops.append(op)
            message._settled = True
            if lock_deadline < self._oldest_deadline:
                self._oldest_deadline = lock_deadline
            if len(ops) > self.MAX_PENDING or self._oldest_deadline - now <= self.URGENT_MARGIN_S:
                return Flush.NOW
            return Flush.LATER if len(ops) == 1 else Flush.NONE

    def drain(self) -> list[Settlement]:
        """Take every buffered settlement."""
        with self._lock:
            ops, self._ops = self._ops, []
            self._oldest_deadline = math.inf
            return ops

    def __len__(self) -> int:
        return len(self._ops)

    def record(self, results: list[Any]) -> None:
        """Keep the errors among the results of sent settlements."""
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            with self._lock:
                self._errors.extend(errors)

    def fail(self, error: BaseException, count: int) -> None:
        """Keep the error that stopped `count` buffered settlements from being sent (or confirmed).

        An interruption that is not an `Exception` (a cancelled task, Ctrl-C) is kept as a
        `ServiceBusError` saying that their outcome is unknown, and propagates as it is.
        """
        if not isinstance(error, Exception):
            error = ServiceBusError(
                f"{count} settlements were sent by a call that was interrupted ({type(error).__name__}); whether "
                "the broker applied them is unknown: their messages may be delivered again")
        with self._lock:
            self._errors.append(error)

    def raise_deferred(self) -> None:
        """Raise the first error a buffered settlement met (once)."""
        if not self._errors:
            return
        with self._lock:
            if not self._errors:
                return
            first, self._errors = self._errors[0], []
        raise first


def check_sequence_number(value: Any) -> int:
    """One sequence number: an int from 0 to 2**63 - 1 (what the store holds)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQUENCE_NUMBER:
        raise InvalidArgumentError(f"a sequence number must be an int from 0 to {MAX_SEQUENCE_NUMBER}, got {value!r}")
    return value


def sequence_list(sequence_numbers: Any) -> list[int]:
    """One sequence number or a list (any iterable but text) of them, as a list of ints."""
    if isinstance(sequence_numbers, int):
        return [check_sequence_number(sequence_numbers)]
    if isinstance(sequence_numbers, (str, bytes, bytearray)) or not isinstance(sequence_numbers, Iterable):
        raise InvalidArgumentError(
            f"expected a sequence number or a list of them, got {type(sequence_numbers).__name__} {sequence_numbers!r}")
    return [check_sequence_number(seq) for seq in sequence_numbers]


def schedule_epoch(value: Any) -> float:
    """The time a `schedule_messages` call names, as epoch seconds (a datetime; naive means UTC)."""
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"schedule_time_utc must be a datetime, not {type(value).__name__}")
    return schedule_time_epoch(value, "schedule_time_utc")


def session_state_bytes(state: Any, sku: Sku) -> bytes | None:
    """Session state as bytes (str is encoded UTF-8), at most one message in size."""
    if state is None:
        return None
    if isinstance(state, str):
        state = state.encode("utf-8")
    if not isinstance(state, (bytes, bytearray, memoryview)):
        raise TypeError("session state must be bytes, str or None")
    data = bytes(state)
    if len(data) > sku.max_message_bytes:
        raise MessageSizeExceededError(f"session state is {len(data)} bytes; at most {sku.max_message_bytes} are allowed")
    return data
