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
ACTIVE, DEFERRED, SCHEDULED = MessageState.ACTIVE, MessageState.DEFERRED, MessageState.SCHEDULED
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
