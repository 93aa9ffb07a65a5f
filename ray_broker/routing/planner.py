"""Pure plans: which partitions serve an operation. No I/O, no clock, no Ray.

Every function takes an entity's definition (the dict partitions store: `name`, `options`) and
the namespace's partition count, so the gateway and every client plan alike.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
)
from .keys import home_partition, partition_for_key, partition_of, resolve_partition_key

Definition = Mapping[str, Any]


def is_partitioned(definition: Definition) -> bool:
    """Whether the entity is spread over every partition."""
    return bool(definition["options"].get("enable_partitioning"))


def home(definition: Definition, partition_count: int) -> int:
    """The partition that holds the whole of a non-partitioned entity: a subscription lives where
    its topic does."""
    return home_partition(definition.get("topic") or definition["name"], partition_count)


def hosts(definition: Definition, partition_count: int) -> list[int]:
    """The partitions that hold the entity: all of them, or its home partition."""
    if is_partitioned(definition):
        return list(range(partition_count))
    return [home(definition, partition_count)]


def partition_of_sequence(definition: Definition, sequence_number: int, partition_count: int) -> int:
    """The partition that holds the message with `sequence_number`."""
    if not is_partitioned(definition):
        return home(definition, partition_count)
    index = partition_of(sequence_number)
    if not 0 <= index < partition_count:
        raise MessagingEntityNotFoundError(
            f"sequence number {sequence_number} names partition {index}, which does not exist",
            entity=definition["name"])
    return index


def key_partition(definition: Definition, key: str, partition_count: int) -> int:
    """The partition that holds the messages keyed `key` (a session id, partition key or message id)."""
    if is_partitioned(definition):
        return partition_for_key(key, partition_count)
    return home(definition, partition_count)


def session_partition(definition: Definition, session_id: str, partition_count: int) -> int:
    """The partition that holds session `session_id`."""
    return key_partition(definition, session_id, partition_count)


def check_send(definition: Definition, envelopes: Sequence[Mapping[str, Any]], max_bytes: int, tier: str) -> None:
    """Refuse a send the entity cannot take: missing session ids or message ids, or too many bytes."""
    name, options = definition["name"], definition["options"]
    if definition.get("kind") == "subscription":
        raise InvalidOperationError(f"{name!r} is a subscription: send to its topic {definition['topic']!r}",
                                    entity=name)
    total = sum(int(e["size"]) for e in envelopes)
    if total > max_bytes:
        raise MessageSizeExceededError(
            f"the messages total {total} bytes; the {tier} tier allows {max_bytes} bytes per message and "
            "per batch: split them into smaller batches", entity=name)
    if options["requires_session"]:
        missing = [i for i, e in enumerate(envelopes) if e.get("session_id") is None]
        if missing:
            raise InvalidOperationError(
                f"entity {name!r} requires sessions: message(s) at {missing[:5]} have no session_id", entity=name)
    if options["requires_duplicate_detection"] and any(e.get("message_id") is None for e in envelopes):
        raise InvalidOperationError(
            f"entity {name!r} has duplicate detection: give every message a message_id", entity=name)


def plan_send(definition: Definition, envelopes: Sequence[Mapping[str, Any]],
              partition_count: int) -> tuple[dict[int, list[int]], list[int]]:
    """Split a send: `(keyed, unkeyed)` where `keyed` maps a partition to the indexes of the
    messages that must go there, and `unkeyed` lists the indexes free to go anywhere."""
    dedup = bool(definition["options"]["requires_duplicate_detection"])
    keyed: dict[int, list[int]] = {}
    unkeyed: list[int] = []
    home_index = None if is_partitioned(definition) else home(definition, partition_count)
    for i, env in enumerate(envelopes):
        key = resolve_partition_key(env, duplicate_detection=dedup)
        if home_index is not None:
            keyed.setdefault(home_index, []).append(i)
        elif key is None:
            unkeyed.append(i)
        else:
            keyed.setdefault(partition_for_key(key, partition_count), []).append(i)
    return keyed, unkeyed


def spread_start(producer: tuple[str, int], partition_count: int) -> int:
    """Where an unkeyed batch tagged `producer` (sender id, batch number) goes first: the same
    partition for every retry of that batch, and the next partition for the next number (round
    robin from where the sender's id hashes to)."""
    return (partition_for_key(producer[0], partition_count) + producer[1]) % partition_count


def check_sticky_batches(sticky_batches: Any) -> int:
    """`sticky_batches` (how many consecutive batches of a sender share a partition for their
    unkeyed messages) checked: an int >= 1."""
    if not isinstance(sticky_batches, int) or isinstance(sticky_batches, bool) or sticky_batches < 1:
        raise InvalidArgumentError(
            f"sticky_batches must be an int >= 1 (1, the default, sends each batch to the next partition), "
            f"got {sticky_batches!r}")
    return sticky_batches


def batch_number(call: int, sticky_batches: int, partition_count: int) -> int:
    """The producer batch number of a sender's `call`-th batch (0, 1, ...): `call` itself, so that
    consecutive batches go to consecutive partitions; with `sticky_batches` > 1, a number that
    `spread_start` sends to the same partition as the rest of its run of `sticky_batches` calls,
    each run on the partition after the last one's. Numbers grow with `call` and never repeat."""
    if sticky_batches == 1:
        return call
    return call * partition_count + (call // sticky_batches) % partition_count


def next_run(call: int, sticky_batches: int) -> int:
    """The first call of a run of `sticky_batches` that `call - 1` is not in: `call` when it
    starts one, else the start of the next (a batch sent beside one still in flight takes it, so
    concurrent sends of one sender go to different partitions)."""
    return -(-call // sticky_batches) * sticky_batches


def unkeyed_tag(producer: tuple[str, int] | None) -> tuple[str, int] | None:
    """The tag of a send's unkeyed part: its own, since it may land on a partition that one of the
    send's keyed parts goes to, and each part must be recognized apart."""
    return None if producer is None else (producer[0] + "/unkeyed", producer[1])


def group_by_sequence(definition: Definition, sequence_numbers: Iterable[int], partition_count: int,
                      session_partition_index: int | None = None) -> dict[int, list[int]]:
    """Positions of `sequence_numbers` grouped by the partition holding each (a session's own
    partition when `session_partition_index` is given)."""
    groups: dict[int, list[int]] = {}
    for i, seq in enumerate(sequence_numbers):
        k = session_partition_index if session_partition_index is not None else \
            partition_of_sequence(definition, int(seq), partition_count)
        groups.setdefault(k, []).append(i)
    return groups


def peek_hosts(definition: Definition, partition_count: int, from_sequence: int,
               session_partition_index: int | None, to_sequence: int | None = None) -> list[int]:
    """The partitions a peek of sequence numbers from `from_sequence` (to `to_sequence`, exclusive,
    when given) reads, in sequence-number order."""
    if session_partition_index is not None:
        return [session_partition_index]
    if is_partitioned(definition):
        last = partition_count - 1 if to_sequence is None else min(partition_of(max(to_sequence - 1, 0)),
                                                                     partition_count - 1)
        return list(range(min(partition_of(from_sequence), partition_count), last + 1))
    return hosts(definition, partition_count)


def merge_peeks(pages: Iterable[Sequence[dict[str, Any]]], max_count: int) -> list[dict[str, Any]]:
    """Pages of peeked records merged by sequence number, the first `max_count`."""
    return sorted((r for page in pages for r in page), key=lambda r: r["sequence_number"])[:max_count]
