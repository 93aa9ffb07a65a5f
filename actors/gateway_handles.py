"""Partition handles as the first gateway of a namespace of one replica per partition holds them:
made on first use, recreated when one died for good or when a caller's Ray lost track of one.

A partition placed by the id of a node that is gone is recreated only on a node that sees its
very store (`store_node_of`); until one does, it stays down, and its callers' reports of its death
ask again at most every `STORE_PROBE_EVERY_S`.

A recreated partition gets a new Ray actor (the same name, its store reopened) and the partition's
epoch counts up, so that callers holding the old handle learn the new one from the routing table.
A replacement is handed out only once it answers: a caller first meets it running.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from ray_broker.config import NamespaceConfig, displaced, pinned_node
from ray_broker.replies import RoutingTable
from ray_broker.routing.ray_channel import actor_identity, answers

from .handles import alive_nodes, partition_actor, store_node_of

REPLACE_WAIT_S = 10.0
"""How long a replacement waits for Ray to free a dead partition actor's name."""
REPLACE_POLL_S = 0.05
READY_WAIT_S = 10.0
"""How long a replacement may take to start answering before it is handed out anyway (callers
then wait on it as on any partition that is slow to start): callers that reported the death wait
for the replacement, so this bounds how long their calls are held beyond their own timeouts."""
STORE_PROBE_EVERY_S = 2.0
"""How often the nodes are asked again for the store of a partition whose node is gone."""
logger = logging.getLogger("ray_broker.gateway")


class GatewayHandles:
    """Partition handles made here, each with an epoch that counts its recreations."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.config = config
        self._handles: list[Any] = [None] * config.partition_count
        self.epochs = [0] * config.partition_count
        self._replacing: dict[int, asyncio.Future[None]] = {}
        """The replacement under way for a partition: reports that arrive meanwhile wait for it."""
        self._moved: dict[int, str] = {}
        """The node a partition whose own node is gone was made again on, by this gateway."""
        self._probed: dict[int, float] = {}
        """When the nodes were last asked for the store of a partition whose node is gone."""

    def handle(self, index: int) -> Any:
        """Partition `index`'s handle (the actor is created from its store if it does not exist)."""
        if self._handles[index] is None:
            self._handles[index] = partition_actor(self.config, index)
        return self._handles[index]

    async def replace(self, index: int) -> None:
        """Recreate partition `index` (from its store, on a live node when its own is gone) after
        its actor died for good; every report of that death while it is under way waits for the
        same replacement."""
        running = self._replacing.get(index)
        if running is None:
            running = self._replacing[index] = asyncio.ensure_future(self._replace(index))
            running.add_done_callback(lambda _: self._replacing.pop(index, None))
        await asyncio.shield(running)

    async def _replace(self, index: int) -> None:
        """Ray frees a dead actor's name a moment after its death is reported, and until then a
        lookup by name finds the dead actor again: so the lookup is repeated until it gives another
        actor (for up to `REPLACE_WAIT_S`); the new actor is then given up to `READY_WAIT_S` to
        answer before the routing table names it."""
        dead = self._handles[index]
        node = None
        if pinned_node(self.config, index) is not None and displaced(self.config, index, alive_nodes()):
            node = await self._store_node(index)
            if node is None:
                return
            self._moved[index] = node
        give_up = time.monotonic() + REPLACE_WAIT_S
        handle = partition_actor(self.config, index, node=node)
        while dead is not None and actor_identity(handle) == actor_identity(dead) and time.monotonic() < give_up:
            await asyncio.sleep(REPLACE_POLL_S)
            handle = partition_actor(self.config, index, node=node)
        if not await answers(handle, READY_WAIT_S):
            logger.warning("partition %d of namespace %r was recreated but did not answer within %g s; callers "
                           "are given it anyway", index, self.config.name, READY_WAIT_S)
        self._handles[index] = handle
        self.epochs[index] += 1

    async def _store_node(self, index: int) -> str | None:
        """A live node that sees the store partition `index` last ran on (the node this gateway
        made it again on, else the node it is placed on), whose own node is gone; None (the
        partition stays down) when none does, or when the nodes were asked less than
        `STORE_PROBE_EVERY_S` ago."""
        now = time.monotonic()
        if now - self._probed.get(index, -STORE_PROBE_EVERY_S) < STORE_PROBE_EVERY_S:
            return None
        self._probed[index] = now
        last_node = self._moved.get(index) or pinned_node(self.config, index)
        node = None if last_node is None else await store_node_of(self.config, index, last_node)
        if node is None:
            logger.info("partition %d of namespace %r stays down: its node is gone and no live node sees its store",
                        index, self.config.name)
        return node

    async def unreachable(self, index: int, epoch: int) -> None:
        """A caller's calls to partition `index` (as of `epoch`) went unanswered, even the quick
        `pid`. If it answers here, that caller's Ray has lost track of the actor (it holds its
        calls for a start it never hears of), and only another actor mends it: recreate the
        partition, which every caller then learns afresh from the routing table. If it does not
        answer here either, it is down or busy, and Ray's restart or time will tell."""
        handle = self.handle(index)
        if self._current(index, epoch, handle) and await answers(handle) and self._current(index, epoch, handle):
            logger.warning("partition %d of namespace %r answers the gateway but not a caller; recreating it so "
                           "that every caller learns it afresh", index, self.config.name)
            ray.kill(handle, no_restart=True)
            await self.replace(index)
        elif index in self._replacing:
            await self.replace(index)

    def _current(self, index: int, epoch: int, handle: Any) -> bool:
        """Whether `handle` is still partition `index`'s actor of `epoch`, with no replacement under way."""
        return self.epochs[index] == epoch and self._handles[index] is handle and index not in self._replacing

    async def ready(self) -> None:
        """Nothing to wait for: handles are made on first use."""

    async def refresh(self, index: int) -> None:
        """Nothing to look up: a partition that does not answer is where it was."""

    async def unanswered(self, index: int, handle: Any) -> None:
        """Nothing to report: this is where partitions are recreated, and a partition that
        does not answer the gateway is down or busy (`unreachable` judges reports from callers)."""

    def table(self) -> RoutingTable:
        """The routing table: every partition's handle and epoch."""
        return RoutingTable([self.handle(k) for k in range(self.config.partition_count)], list(self.epochs))
