"""The wire vocabulary shared by the engine, the actors and the clients; imports no Ray.

Sequence numbers carry their partition, and keys and entities map to partitions by one stable
hash: every client, gateway and partition agrees on both.

Sub-queue numbers and message states are stored in the partition's tables, so their values never
change. Receive modes and sub-queues are also public (`rb.ReceiveMode`, `rb.SubQueue`).
"""
from __future__ import annotations

import enum

import xxhash

COUNTER_BITS = 48
"""A sequence number holds its partition's index above this many bits, the partition's counter below."""
COUNTER_MASK = (1 << COUNTER_BITS) - 1


def partition_of(sequence_number: int) -> int:
    """The partition index held in the top 16 bits of a partitioned entity's sequence number."""
    return sequence_number >> COUNTER_BITS


def make_sequence_number(partition: int, counter: int) -> int:
    """Compose a sequence number from a partition index and that partition's counter."""
    return (partition << COUNTER_BITS) | (counter & COUNTER_MASK)


def partition_for_key(key: str, partition_count: int) -> int:
    """Map a key to a partition index with a stable 64-bit hash (xxh64, seed 0)."""
    return xxhash.xxh64_intdigest(key.encode("utf-8")) % partition_count


def home_partition(entity_name: str, partition_count: int) -> int:
    """The partition that hosts the whole of a non-partitioned entity (by its lower-cased name)."""
    return partition_for_key("entity:" + entity_name.lower(), partition_count)


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
