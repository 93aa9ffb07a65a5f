"""Who leads each replicated partition: decided by one gateway, the namespace's first.

For each partition the deciding gateway keeps the leader's replica and its epoch, and publishes
them in the routing table. It elects a leader when it has none (at the namespace's start, after its
own restart) and when a client reports the leader gone (`failed`): it asks every replica where it
stands; a replica still leading the newest epoch keeps the lead; otherwise it fences the replicas at
a new, higher epoch (from then on they refuse changes of older ones, so a deposed leader can no
longer get a change held), and once a majority is fenced it tells the one holding the most changes
(by its last epoch, then position) to lead. A majority always holds every acknowledged change, so
the new leader has them all. With fewer replicas reachable than a majority the partition has no
leader: its keyed calls fail with `PartitionUnavailableError` in their timeout and unkeyed sends go
elsewhere, as when a partition is down. Other gateways take the table from this one.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray_broker.config import NamespaceConfig
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import TableHandles

from .gateway_caller import GatewayCaller
from .handles import partition_actor

logger = logging.getLogger("ray_broker.leadership")

STATE_TIMEOUT_S = 3.0
"""How long an election waits for each replica's answer."""
LEAD_TIMEOUT_S = 15.0
"""How long an election waits for the chosen replica to take the lead (it reaches its followers)."""


def newest(states: dict[int, dict[str, Any]]) -> int:
    """The replica holding the most changes: by the epoch of its last change, then its position
    (then the lowest replica number)."""
    def rank(r: int) -> tuple[int, int, int]:
        state = states[r]
        history = state["history"]
        return (history[-1][0] if history else 0, state["position"], -r)

    return max(states, key=rank)


class ReplicaSets:
    """Each replicated partition's replicas, leader and epoch, as the deciding gateway keeps them
    (a `HandleSource` for its router)."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.config = config
        self.leaders: list[int | None] = [None] * config.partition_count
        self.epochs = [0] * config.partition_count
        self._locks = [asyncio.Lock() for _ in range(config.partition_count)]
        self._handles: dict[tuple[int, int], Any] = {}
        self._ready = False

    def replica(self, index: int, replica: int) -> Any:
        """Replica `replica` of partition `index` (created from its store if it does not exist)."""
        handle = self._handles.get((index, replica))
        if handle is None:
            handle = self._handles[(index, replica)] = partition_actor(self.config, index, replica)
        return handle

    def handle(self, index: int) -> Any:
        """The leader of partition `index`; `PartitionUnavailable` while it has none."""
        leader = self.leaders[index]
        if leader is None:
            raise PartitionUnavailable(index, "no leader", reached=False)
        return self.replica(index, leader)

    async def ready(self) -> None:
        """Elect a leader for every partition, once (later elections follow reports of a leader gone)."""
        if not self._ready:
            await asyncio.gather(*(self.elect(k) for k in range(self.config.partition_count)
                                   if self.leaders[k] is None))
            self._ready = True

    async def replace(self, index: int) -> None:
        """The leader of partition `index` was found gone: elect anew."""
        await self.elect(index, deposing=self.leaders[index])

    async def failed(self, index: int, epoch: int) -> None:
        """A client found the leader of partition `index` of `epoch` gone: elect anew, unless that was
        done already or the leader answers as leader."""
        if self.epochs[index] != epoch:
            return
        leader = self.leaders[index]
        if leader is not None:
            state = await self._state(index, leader)
            if state is not None and state["leading"] == epoch:
                return
        await self.elect(index, deposing=leader)

    def table(self) -> dict[str, Any]:
        """The routing table: each partition's leader (None while it has none) and epoch."""
        return {"handles": [None if r is None else self.replica(k, r) for k, r in enumerate(self.leaders)],
                "epochs": list(self.epochs)}

    async def elect(self, index: int, deposing: int | None = None) -> None:
        """Give partition `index` a leader (see the module's text); `deposing` names a leader found
        gone, which keeps the lead only if it answers as leader of the newest epoch."""
        async with self._locks[index]:
            if self.leaders[index] is not None and self.leaders[index] != deposing:
                return
            replicas = range(self.config.replicas)
            if deposing is not None:
                self._handles.pop((index, deposing), None)
            states = await self._states(index, replicas, None)
            known = max([self.epochs[index], *(max(s["epoch"], s["followed"]) for s in states.values())])
            for r, state in states.items():
                if state["leading"] is not None and state["leading"] >= known:
                    self.leaders[index], self.epochs[index] = r, state["leading"]
                    return
            epoch = known + 1
            fenced = await self._states(index, replicas, epoch)
            if len(fenced) < self.config.required_copies:
                logger.warning("partition %d of namespace %r has no leader: %d of its %d replicas answer, %d needed",
                               index, self.config.name, len(fenced), self.config.replicas,
                               self.config.required_copies)
                self.leaders[index] = None
                return
            chosen = newest(fenced)
            followers = [r for r in replicas if r != chosen]
            try:
                await asyncio.wait_for(self.replica(index, chosen).lead.remote(epoch, followers), LEAD_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - no leader this time; the next report elects again
                logger.warning("replica %d of partition %d of namespace %r did not take the lead of epoch %d",
                               chosen, index, self.config.name, epoch, exc_info=True)
                self.leaders[index] = None
                return
            logger.info("replica %d leads partition %d of namespace %r in epoch %d", chosen, index,
                        self.config.name, epoch)
            self.leaders[index], self.epochs[index] = chosen, epoch

    async def _states(self, index: int, replicas: range, fence: int | None) -> dict[int, dict[str, Any]]:
        """The replicas' states (fenced at `fence` first, when given), of those that answer."""
        answers = await asyncio.gather(*(self._state(index, r, fence) for r in replicas))
        return {r: state for r, state in zip(replicas, answers) if state is not None}

    async def _state(self, index: int, replica: int, fence: int | None = None) -> dict[str, Any] | None:
        try:
            handle = self.replica(index, replica)
            call = handle.replica_state.remote() if fence is None else handle.fence.remote(fence)
            return dict(await asyncio.wait_for(call, STATE_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - a replica out of reach has no say
            return None


class DecidedElsewhere(TableHandles):
    """The routing table of a gateway that does not decide leadership: the deciding gateway's."""

    def __init__(self, config: NamespaceConfig) -> None:
        super().__init__(GatewayCaller(config, 0))
        self.config = config

    async def ready(self) -> None:
        """Fetch the deciding gateway's table unless it is here already."""
        await self.load()

    async def failed(self, index: int, epoch: int) -> None:
        """Report the leader of partition `index` of `epoch` gone to the deciding gateway, and take its table."""
        self._table = await self._gateway.call_async("partition_failed", index, epoch, timeout=60.0)

    def table(self) -> dict[str, Any]:
        """The routing table, as last fetched."""
        assert self._table is not None, "the table is fetched (ready) before it is published"
        return self._table
