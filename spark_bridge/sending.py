"""Sending messages in batches that fit the namespace's tier, many partitions at once."""
from __future__ import annotations

import asyncio
from typing import Iterable, Iterator, Sequence

import ray_broker as rb
from ray_broker.client.sending import SenderBase
from ray_broker.errors import MessageSizeExceededError
from ray_broker.routing import partition_for_key, resolve_partition_key

from .entity import Entity

IN_FLIGHT = 8
"""The most send calls one writer keeps in flight (to different partitions, or unkeyed)."""


def batches(sender: SenderBase, messages: Iterable[rb.Message]) -> Iterator[rb.MessageBatch]:
    """The messages packed in order into batches as large as the tier allows."""
    batch = sender.create_message_batch()
    for message in messages:
        try:
            batch.add_message(message)
        except MessageSizeExceededError:
            if not len(batch):
                raise
            yield batch
            batch = sender.create_message_batch()
            batch.add_message(message)
    if len(batch):
        yield batch


def send_all(sender: rb.Sender, messages: Iterable[rb.Message]) -> int:
    """Send the messages in order, in as few calls as the tier's batch size allows; returns how many."""
    sent = 0
    for batch in batches(sender, messages):
        sender.send_messages(batch)
        sent += len(batch)
    return sent


def partition_groups(entity: Entity, messages: Sequence[rb.Message]) -> list[list[rb.Message]]:
    """The messages split so that groups can be sent side by side without reordering a key's
    messages: keyed ones by the partition their key routes them to, in order; unkeyed ones in
    `IN_FLIGHT` groups of their own."""
    keyed: dict[int, list[rb.Message]] = {}
    unkeyed: list[rb.Message] = []
    for message in messages:
        key = resolve_partition_key({"session_id": message.session_id, "partition_key": message.partition_key,
                                     "message_id": message.message_id},
                                    duplicate_detection=entity.duplicate_detection)
        if key is None:
            unkeyed.append(message)
        else:
            keyed.setdefault(partition_for_key(key, len(entity.partitions)), []).append(message)
    return list(keyed.values()) + [group for group in (unkeyed[i::IN_FLIGHT] for i in range(IN_FLIGHT)) if group]


async def _send_groups(ns: rb.Namespace, entity: Entity, groups: list[list[rb.Message]]) -> int:
    import ray_broker.aio as rba

    handle = rba.Namespace(ns.config)
    slots = asyncio.Semaphore(IN_FLIGHT)
    try:
        sender = entity.async_sender(handle)

        async def send_group(group: list[rb.Message]) -> int:
            for batch in batches(sender, group):
                async with slots:
                    await sender.send_messages(batch)
            return len(group)

        return sum(await asyncio.gather(*(send_group(g) for g in groups)))
    finally:
        await handle.close()


def send_spread(ns: rb.Namespace, entity: Entity, messages: Sequence[rb.Message]) -> int:
    """Send the messages with up to `IN_FLIGHT` calls at once, each to one partition, keeping each
    key's messages in order; returns how many were sent. Runs its own event loop (call it from
    synchronous code, such as a Ray Data write task)."""
    return asyncio.run(_send_groups(ns, entity, partition_groups(entity, messages)))
