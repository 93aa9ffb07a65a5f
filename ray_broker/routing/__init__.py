"""Routing: which partition serves what, and the policy for reaching it; one implementation for the
gateway and every client. Importing this package imports no Ray (the Ray channel is
`routing.ray_channel`, loaded by those that use it).
"""
from .keys import (
    COUNTER_BITS,
    COUNTER_MASK,
    home_partition,
    make_sequence_number,
    partition_for_key,
    partition_of,
    resolve_partition_key,
)

__all__ = ["COUNTER_BITS", "COUNTER_MASK", "home_partition", "make_sequence_number", "partition_for_key",
           "partition_of", "resolve_partition_key"]
