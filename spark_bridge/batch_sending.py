"""Sending encoded messages (envelopes) in batches that fit the namespace's tier, many partitions at once."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import ray_broker as rb
from ray_broker.errors import MessageSizeExceededError

from .entity import Entity

IN_FLIGHT = 8
"""The most send calls one writer keeps in flight (to different partitions, or unkeyed)."""
BATCHES_PER_CALL = 8
"""How many batches of a keyed group one send call carries (`send_message_batches`: one call and
one store commit on the group's partition, each batch within the tier's limit)."""


Envelope = dict[str, Any]
"""A message encoded once, as `rb.Message.to_envelope` and `rb.encode_messages` make it
(`WriteSpec.envelopes` makes them from a table's rows)."""


def batches(max_size_in_bytes: int, envelopes: Iterable[Envelope]) -> Iterator[rb.MessageBatch]:
    """The encoded messages packed in order into batches of up to `max_size_in_bytes` each (the
    `max_size_in_bytes` of a batch the sender made: the tier's limit). Made without I/O, for a
    sync or an async sender alike."""
    batch = rb.MessageBatch(max_size_in_bytes)
    for envelope in envelopes:
        try:
            batch.add_envelope(envelope)
        except MessageSizeExceededError:
            if not len(batch):
                raise
            yield batch
            batch = rb.MessageBatch(max_size_in_bytes)
            batch.add_envelope(envelope)
    if len(batch):
        yield batch


def send_all(sender: rb.Sender, messages: Iterable[rb.Message]) -> int:
    """Send the messages in order, in as few calls as the tier's batch size allows; returns how many."""
    sent = 0
    limit = sender.create_message_batch().max_size_in_bytes
    for batch in batches(limit, (message.to_envelope() for message in messages)):
        sender.send_messages(batch)
        sent += len(batch)
    return sent


@dataclass
class Group:
    """Encoded messages a writer sends in order, apart from its other groups."""

    envelopes: list[Envelope]
    keyed: bool
    """Whether they all go to one partition (so that one call can carry several of their batches)."""


def partition_groups(entity: Entity, envelopes: Sequence[Envelope]) -> list[Group]:
    """The encoded messages split so that groups can be sent side by side without reordering a
    key's messages: keyed ones by the partition their key routes them to, in order; unkeyed ones in
    `IN_FLIGHT` groups of their own."""
    keyed: dict[int, list[Envelope]] = {}
    unkeyed: list[Envelope] = []
    partition_of_key: dict[str, int] = {}       # rows share keys: hash each key once
    for envelope in envelopes:
        key = rb.partition_key_of(envelope, duplicate_detection=entity.duplicate_detection)
        if key is None:
            unkeyed.append(envelope)
            continue
        partition = partition_of_key.get(key)
        if partition is None:
            partition = partition_of_key[key] = rb.partition_for_key(key, len(entity.partitions))
        keyed.setdefault(partition, []).append(envelope)
    return ([Group(group, True) for group in keyed.values()]
            + [Group(group, False) for group in (unkeyed[i::IN_FLIGHT] for i in range(IN_FLIGHT)) if group])


async def _send_groups(ns: rb.Namespace, entity: Entity, groups: list[Group]) -> int:
    import ray_broker.aio as rba

    handle = rba.Namespace(ns.config)
    slots = asyncio.Semaphore(IN_FLIGHT)
    try:
        sender = entity.async_sender(handle)
        limit = (await sender.create_message_batch()).max_size_in_bytes

        async def send_group(group: Group) -> int:
            packed = list(batches(limit, group.envelopes))
            per_call = BATCHES_PER_CALL if group.keyed else 1    # an unkeyed call's batches would spread
            for i in range(0, len(packed), per_call):
                async with slots:
                    await sender.send_message_batches(packed[i:i + per_call])
            return len(group.envelopes)

        return sum(await asyncio.gather(*(send_group(g) for g in groups)))
    finally:
        await handle.close()


def send_spread(ns: rb.Namespace, entity: Entity, envelopes: Sequence[Envelope]) -> int:
    """Send the encoded messages with up to `IN_FLIGHT` calls at once, each to one partition, keeping each
    key's messages in order; returns how many were sent. Runs its own event loop (call it from
    synchronous code, such as a Ray Data write task)."""
    return asyncio.run(_send_groups(ns, entity, partition_groups(entity, envelopes)))
