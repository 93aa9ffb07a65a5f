"""Partition routing: which key pins a message to a partition (the hash and the sequence-number
layout every component agrees on are in `protocol`).

Pure functions with no Ray: the gateway, the tests and any smart client route the same way.
"""
from __future__ import annotations

from typing import Mapping

from ..message import check_keys
from ..protocol import COUNTER_BITS, COUNTER_MASK, home_partition, make_sequence_number, partition_for_key, partition_of

__all__ = ["COUNTER_BITS", "COUNTER_MASK", "home_partition", "make_sequence_number", "partition_for_key",
           "partition_of", "resolve_partition_key"]


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
