"""The wire vocabulary shared by the engine, the actors and the clients; imports no Ray.

Sub-queue numbers and message states are stored in the partition's tables, so their values never
change. Receive modes and sub-queues are also public (`rb.ReceiveMode`, `rb.SubQueue`).
"""
from __future__ import annotations

import enum


class SubQueueNumber(enum.IntEnum):
    """The sub-queue a stored message is in (the `subq` column)."""

    MAIN = 0
    DEAD_LETTER = 1
    TRANSFER_DEAD_LETTER = 2


class MessageState(enum.IntEnum):
    """Where a message stands in its entity (the `state` column)."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2
    TRANSFER = 3
    """Taken by the forwarder: on its way to the entity's `forward_to` destination."""


class ReceiveMode(str, enum.Enum):
    """How a receiver takes messages."""

    PEEK_LOCK = "peek_lock"
    RECEIVE_AND_DELETE = "receive_and_delete"


class SubQueue(str, enum.Enum):
    """The sub-queues of a queue or subscription, as receivers name them."""

    DEAD_LETTER = "deadletter"
    TRANSFER_DEAD_LETTER = "transferdeadletter"


class SessionFilter(enum.Enum):
    """Session choices that are not a session id."""

    NEXT_AVAILABLE = 0


NEXT_AVAILABLE_SESSION = SessionFilter.NEXT_AVAILABLE
"""Lock the next session that has messages and is not locked."""

MAIN, DEAD_LETTER, TRANSFER_DEAD_LETTER = SubQueueNumber.MAIN, SubQueueNumber.DEAD_LETTER, \
    SubQueueNumber.TRANSFER_DEAD_LETTER
ACTIVE, DEFERRED, SCHEDULED, TRANSFER = MessageState.ACTIVE, MessageState.DEFERRED, MessageState.SCHEDULED, \
    MessageState.TRANSFER
PEEK_LOCK, RECEIVE_AND_DELETE = ReceiveMode.PEEK_LOCK.value, ReceiveMode.RECEIVE_AND_DELETE.value

SETTLE_ACTIONS = ("complete", "abandon", "defer", "dead_letter", "release", "renew")
"""What a settlement may do with a locked message; "release" unlocks a prefetched message that
was never handed out, without counting a delivery."""

SUB_QUEUE_NUMBERS = {None: MAIN, SubQueue.DEAD_LETTER: DEAD_LETTER,
                     SubQueue.TRANSFER_DEAD_LETTER: TRANSFER_DEAD_LETTER}
"""A receiver's sub-queue choice -> the stored sub-queue number."""

NAMED_PRODUCER_PREFIX = "named:"
"""Starts the producer id of a caller-named idempotent producer (`send_idempotent`), which
partitions remember far longer than a sender's own random one."""

MAX_TRANSACTION_OPERATIONS = 100
"""How many operations (messages sent, settlements) one transaction may hold."""
TRANSACTION_TIMEOUT_S = 120.0
"""How long after its first operation a transaction may still commit; later it is rolled back."""
MAX_TRANSFER_HOPS = 4
"""How many times a message may be auto-forwarded; the next forward dead-letters it instead."""
TRANSFER_HOPS_FIELD = "transfer_hops"
"""The field of a forwarded message's wire form that counts its hops."""
