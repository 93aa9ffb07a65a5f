"""Partition routing: key resolution and the stable hash every component agrees on.

Pure functions with no Ray: the gateway, the tests and any smart client route the same way.
"""
from __future__ import annotations

from typing import Mapping

import xxhash

from ..message import check_keys

COUNTER_BITS = 48
COUNTER_MASK = (1 << COUNTER_BITS) - 1


def resolve_partition_key(message: Mapping[str, object], *, duplicate_detection: bool) -> str | None:
    """Return the key that pins a message to a partition, or None for an unkeyed message.

    The order is session id, then partition key, then message id when the entity has duplicate
    detection. A partition key that differs from the session id is an invalid operation.
    """
    session_id = message.get("session_id")
    partition_key = message.get("partition_key")
    if session_id is not None:
        check_keys(session_id, partition_key)
        return str(session_id)
    if partition_key is not None:
        return str(partition_key)
    if duplicate_detection and message.get("message_id") is not None:
        return str(message["message_id"])
    return None


def partition_for_key(key: str, partition_count: int) -> int:
    """Map a key to a partition index with a stable 64-bit hash (xxh64, seed 0)."""
    return xxhash.xxh64_intdigest(key.encode("utf-8")) % partition_count


def home_partition(entity_name: str, partition_count: int) -> int:
    """The partition that hosts the whole of a non-partitioned entity (by its lower-cased name)."""
    return partition_for_key("entity:" + entity_name.lower(), partition_count)


def partition_of(sequence_number: int) -> int:
    """The partition index held in the top 16 bits of a partitioned entity's sequence number."""
    return sequence_number >> COUNTER_BITS


def make_sequence_number(partition: int, counter: int) -> int:
    """Compose a sequence number from a partition index and that partition's counter."""
    return (partition << COUNTER_BITS) | (counter & COUNTER_MASK)
