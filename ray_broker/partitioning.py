"""Partitions as a user of the broker sees them: which partition a message's key pins it to, and
how a sequence number names its partition. Imports no Ray; every name here is also `rb.<name>`.

Readers and writers that share an entity out among themselves use these to plan their work
without asking the broker: a bulk writer groups messages by the partition their key routes them
to (and sends the groups side by side, each key's messages still in order), and a reader pages
through one partition by its range of sequence numbers.

    >>> import ray_broker as rb
    >>> message = rb.Message(b"order 1", partition_key="customer-7")
    >>> rb.partition_key_of(message)
    'customer-7'
    >>> rb.partition_for_key("customer-7", 16) == rb.partition_for_key("customer-7", 16) < 16
    True
    >>> rb.partition_key_of(rb.Message(b"x", message_id="m1")) is None
    True
    >>> rb.partition_key_of(rb.Message(b"x", message_id="m1"), duplicate_detection=True)
    'm1'
    >>> first = rb.sequence_number(3)
    >>> rb.partition_of(first), rb.partition_of(rb.sequence_number(3, 41)), first == 3 << 48
    (3, 3, True)
"""
from __future__ import annotations

from typing import Any, Mapping

from .errors import InvalidArgumentError
from .message import Message, ReceivedMessage
from .protocol import COUNTER_BITS, make_sequence_number, partition_of
from .protocol import partition_for_key as _hash_to_partition
from .routing.keys import resolve_partition_key

MAX_PARTITION_INDEX = (1 << 16) - 1
"""The largest partition index a sequence number can carry (its top 16 bits)."""
MAX_COUNTER = (1 << COUNTER_BITS) - 1
"""The largest number a partition's own counter (a sequence number's low 48 bits) reaches."""

_KEY_FIELDS = ("session_id", "partition_key", "message_id")


def partition_key_of(message: Message | ReceivedMessage | Mapping[str, Any], *,
                     duplicate_detection: bool = False) -> str | None:
    """The key that pins `message` to one partition, or None for an unkeyed message.

    The key is the message's `session_id`, else its `partition_key`, else its `message_id` when
    the entity it goes to has duplicate detection (`duplicate_detection=True`), as the broker
    routes it. `message` is a `Message`, a `ReceivedMessage`, or an envelope (what
    `Message.to_envelope` and `encode_messages` make). `InvalidOperationError` when its session id
    and partition key differ.

    Example:
        rb.partition_key_of(rb.Message(b"x", session_id="s1"))          # 's1'
    """
    if type(message) is not dict and isinstance(message, (Message, ReceivedMessage)):
        message = {name: getattr(message, name) for name in _KEY_FIELDS}
    return resolve_partition_key(message, duplicate_detection=duplicate_detection)


def partition_for_key(key: str, partition_count: int) -> int:
    """The partition, of `partition_count`, that messages with the key `key` go to (see
    `partition_key_of`): a stable hash of the key (xxh64 of its UTF-8, seed 0) modulo the count, as
    every client and gateway of the broker computes it. Same key, same partition, always.

    `partition_count` is the namespace's (`ns.partition_count`) for a partitioned entity; a
    non-partitioned entity keeps all its messages on one partition, whose sequence numbers name
    partition 0. `InvalidArgumentError` unless `key` is a str and `partition_count` an int >= 1.
    """
    if not isinstance(key, str):
        raise InvalidArgumentError(f"key must be a str, got {type(key).__name__}")
    if isinstance(partition_count, bool) or not isinstance(partition_count, int) or partition_count < 1:
        raise InvalidArgumentError(f"partition_count must be an int >= 1, got {partition_count!r}")
    return _hash_to_partition(key, partition_count)


def sequence_number(partition: int, counter: int = 0) -> int:
    """The sequence number that partition `partition`'s own counter gives as `counter`: the
    partition index in the top 16 bits, the counter in the low 48 (`rb.partition_of` reads the
    partition back).

    `sequence_number(k)` is where partition k's messages start and `sequence_number(k + 1)` where
    they end, so `receiver.peek_messages(n, sequence_number=rb.sequence_number(k),
    end_sequence_number=rb.sequence_number(k + 1))` browses partition k alone. A non-partitioned
    entity's sequence numbers name partition 0. `InvalidArgumentError` for a partition outside
    0..65535 or a counter outside 0..2**48 - 1.
    """
    if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= MAX_PARTITION_INDEX:
        raise InvalidArgumentError(f"partition must be an int from 0 to {MAX_PARTITION_INDEX}, got {partition!r}")
    if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= MAX_COUNTER:
        raise InvalidArgumentError(f"counter must be an int from 0 to 2**{COUNTER_BITS} - 1, got {counter!r}")
    return make_sequence_number(partition, counter)


__all__ = ["partition_for_key", "partition_key_of", "partition_of", "sequence_number"]
