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

With an in-sync set (`engine.in_sync`: `min_in_sync` below a majority) the gateway also records
each partition's set: the one an epoch begins with, each drop a leader asks for before it
acknowledges without a follower (`drop_from_in_sync`, refused once an election began fencing),
and each member its leader added back (read with every check). Only a member may then lead.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ray_broker.config import NamespaceConfig, displaced
from ray_broker.engine.election import (
    ANSWER_S,
    Keep,
    Lead,
    NoQuorum,
    choose,
    choose_in_sync,
    known_epoch,
    patience_after,
    sitting_leader,
)
from ray_broker.engine.in_sync import InSync, accepts_drop
from ray_broker.replies import ReplicaState, RoutingTable
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import TableHandles
from ray_broker.routing.ray_gateway import GatewayCaller

from .handles import alive_nodes, partition_actor

logger = logging.getLogger("ray_broker.leadership")

LEAD_TIMEOUT_S = 15.0
"""How long an election waits for the chosen replica to take the lead."""
CHECK_INTERVAL_S = 0.5
"""How often the deciding gateway asks every leader whether it still leads."""
CHECK_TIMEOUT_S = 1.0
"""How long a leader has to answer that check."""
REPAIR_EVERY = 4
"""Every this many checks, replicas whose node is gone for good are made again elsewhere."""
KEEP_DECIDER_S = 2.0
"""How often a gateway that does not decide asks the deciding one for its table."""
MISSED_CHECKS = 2
"""Checks in a row a leader may leave unanswered before another is elected: a process that hangs
(a frozen VM, a cut network) is replaced as one that died. One that answers it does not lead, or
that Ray reports gone, is replaced at once."""


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
        self._missed = [0] * config.partition_count
        self.in_sync: list[InSync | None] = [None] * config.partition_count
        """With an in-sync set, each partition's as recorded here (None: not known)."""
        self._fencing = [0] * config.partition_count
        """The epoch each partition's last election fenced its replicas at."""
        self._patience = [ANSWER_S] * config.partition_count
        """How long each partition's next election waits for a replica's answer (`patience_after`)."""
        self._electing: dict[int, asyncio.Task[None]] = {}
        """The elections `watch` started, by partition, while they run."""

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

    async def refresh(self, index: int) -> None:
        """Nothing to fetch: this is where leaders are decided (`watch` replaces one that hangs)."""

    async def unanswered(self, index: int, handle: Any) -> None:
        """Nothing to report: this is where leaders are decided (`watch` replaces one that hangs)."""

    async def failed(self, index: int, epoch: int) -> None:
        """A client found the leader of partition `index` of `epoch` gone: elect anew, unless that was
        done already or the leader answers as leader."""
        if self.epochs[index] != epoch:
            return
        leader = self.leaders[index]
        if leader is not None:
            state = await self._state(index, leader)
            if state is not None and state.leading == epoch:
                return
        await self.elect(index, deposing=leader)

    async def drop_from_in_sync(self, index: int, proposal: InSync) -> str | None:
        """Record the leader's smaller in-sync set `proposal` for partition `index`, or say why not
        (`accepts_drop`; an election fencing the replicas at a newer epoch refuses every drop of
        the one before)."""
        await self.ready()
        epoch = self.epochs[index] if self._fencing[index] <= self.epochs[index] else self._fencing[index]
        refusal = accepts_drop(self.in_sync[index], epoch, proposal, self.config.required_copies)
        if refusal is None:
            logger.warning("partition %d of namespace %r: its leader left replicas out of sync; its in-sync set is "
                           "now %s (version %d of epoch %d)", index, self.config.name, list(proposal.members),
                           proposal.version, proposal.epoch)
            self.in_sync[index] = proposal
        return refusal

    def _learn_in_sync(self, index: int, reported: InSync | None) -> None:
        """Take a leader's in-sync set for partition `index` when it is newer than the one recorded
        and of the partition's current epoch (a member added back)."""
        if (reported is not None and reported.epoch == self.epochs[index] and self._fencing[index] <= reported.epoch
                and reported.newer(self.in_sync[index])):
            self.in_sync[index] = reported

    def table(self) -> RoutingTable:
        """The routing table: each partition's leader (None while it has none) and epoch."""
        return RoutingTable([None if r is None else self.replica(k, r) for k, r in enumerate(self.leaders)],
                            list(self.epochs), replicated=True)

    async def watch(self) -> None:
        """Check every leader each `CHECK_INTERVAL_S`, and elect anew for one that is gone, that
        leads no more, or that left `MISSED_CHECKS` in a row unanswered, and for a partition that
        has no leader; runs as long as the gateway. An election runs beside the checks
        (`_elect_aside`), so one waiting on slow replicas holds up no other partition's check."""
        rounds = 0
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            await asyncio.gather(*(self._check(k) for k in range(self.config.partition_count)))
            rounds += 1
            if rounds % REPAIR_EVERY == 0:
                self.repair()

    def repair(self) -> None:
        """Make again, on a live node holding no other replica of its partition, every replica
        placed by id on a node that is gone (a node id never comes back); it starts from what that
        node's disk holds, or empty, and its leader brings it up to date (changes, or a whole copy)."""
        alive = alive_nodes()
        for k in range(self.config.partition_count):
            for r in range(self.config.replicas):
                if displaced(self.config, self.config.slot(k, r), alive):
                    self._handles.pop((k, r), None)
                    self.replica(k, r)

    def _elect_aside(self, index: int, deposing: int | None = None) -> None:
        """Start an election of partition `index` in the background (`_check` starts none while one runs)."""
        self._electing[index] = asyncio.ensure_future(self.elect(index, deposing=deposing))

    async def _check(self, index: int) -> None:
        running = self._electing.get(index)
        if running is not None and not running.done():
            return
        leader, epoch = self.leaders[index], self.epochs[index]
        if leader is None:
            self._elect_aside(index)
            return
        try:
            handle = self.replica(index, leader)
            if self.config.in_sync_set:
                leading, in_sync = await asyncio.wait_for(handle.in_sync_state.remote(), CHECK_TIMEOUT_S)
                if leading == epoch:
                    self._learn_in_sync(index, None if in_sync is None else InSync.decode(in_sync))
            else:
                leading = await asyncio.wait_for(handle.leads.remote(), CHECK_TIMEOUT_S)
            missed = 0 if leading == epoch else MISSED_CHECKS  # another epoch's leader, or none: at once
        except asyncio.TimeoutError:  # a slow answer is a missed check
            missed = self._missed[index] + 1
        except Exception:  # noqa: BLE001 - Ray says the process is gone or restarting: it leads no more
            missed = MISSED_CHECKS
        self._missed[index] = missed
        if missed >= MISSED_CHECKS and self.leaders[index] == leader:
            logger.warning("the leader of partition %d of namespace %r (replica %d, epoch %d) is gone, leads no more "
                           "or does not answer; electing another", index, self.config.name, leader, epoch)
            self._missed[index] = 0
            self._elect_aside(index, deposing=leader)

    async def elect(self, index: int, deposing: int | None = None) -> None:
        """Give partition `index` a leader (see the module's text); `deposing` names a leader found
        gone, which keeps the lead only if it answers as leader of the newest epoch."""
        async with self._locks[index]:
            if self.leaders[index] is not None and self.leaders[index] != deposing:
                return
            replicas = range(self.config.replicas)
            if deposing is not None:
                self._handles.pop((index, deposing), None)
            if deposing is None or not self.epochs[index]:
                answers = await self._states(index, replicas, None)
                known = known_epoch(answers, self.epochs[index])
                sitting = sitting_leader(answers, known)
                if isinstance(sitting, Keep):
                    self._patience[index] = patience_after(self._patience[index], decided=True)
                    self.leaders[index], self.epochs[index] = sitting.replica, sitting.epoch
                    self._learn_in_sync(index, answers[sitting.replica].in_sync)
                    return
            else:
                known = self.epochs[index]
            self._fencing[index] = known + 1
            fenced = await self._states(index, replicas, known + 1)
            decision = self._choose(index, fenced, known + 1)
            if isinstance(decision, NoQuorum):
                logger.warning("partition %d of namespace %r has no leader: %d of its %d replicas answer within "
                               "%g s, %d needed%s", index, self.config.name, decision.answered, self.config.replicas,
                               self._patience[index], decision.required,
                               " of its in-sync set" if self.config.in_sync_set and self.in_sync[index] else "")
                self._patience[index] = patience_after(self._patience[index], decided=False)
                self.leaders[index] = None
                return
            chosen, epoch = decision.chosen, decision.epoch
            try:
                states = {r: fenced[r].encode() for r in decision.followers if r in fenced}
                in_sync = None if decision.in_sync is None else decision.in_sync.encode()
                await asyncio.wait_for(self.replica(index, chosen).lead.remote(epoch, list(decision.followers),
                                                                                 states, in_sync), LEAD_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - no leader this time; the next report elects again
                logger.warning("replica %d of partition %d of namespace %r did not take the lead of epoch %d",
                               chosen, index, self.config.name, epoch, exc_info=True)
                self.leaders[index] = None
                return
            logger.info("replica %d leads partition %d of namespace %r in epoch %d", chosen, index,
                        self.config.name, epoch)
            self.leaders[index], self.epochs[index] = chosen, epoch
            self.in_sync[index] = decision.in_sync
            self._patience[index] = patience_after(self._patience[index], decided=True)

    def _choose(self, index: int, fenced: dict[int, ReplicaState], epoch: int) -> Lead | NoQuorum:
        """Who leads `epoch` of partition `index`, by the states of the replicas `fenced` at it."""
        replicas = range(self.config.replicas)
        if self.config.in_sync_set:
            return choose_in_sync(fenced, replicas, self.in_sync[index], self.config.required_copies, epoch)
        return choose(fenced, replicas, self.config.majority, epoch)

    def _fenced_enough(self, index: int, states: dict[int, ReplicaState]) -> bool:
        """Whether the replicas of partition `index` fenced so far (`states`) settle the election:
        a majority; with an in-sync set, every member of it (when known), else every replica but
        `min_in_sync - 1`."""
        if not self.config.in_sync_set:
            return len(states) >= self.config.majority
        known = self.in_sync[index]
        if known is None:
            return len(states) >= self.config.replicas - self.config.required_copies + 1
        return set(known.members) <= set(states)

    async def _states(self, index: int, replicas: range, fence: int | None) -> dict[int, ReplicaState]:
        """The replicas' states (fenced at `fence` first, when given), of those that answer; a
        fencing round ends as soon as enough are fenced (`_fenced_enough`: a majority holds every
        acknowledged change), so a replica that hangs does not hold the election up."""
        tasks = {asyncio.ensure_future(self._state(index, r, fence)): r for r in replicas}
        states: dict[int, ReplicaState] = {}
        pending = set(tasks)
        while pending and (fence is None or not self._fenced_enough(index, states)):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.result() is not None:
                    states[tasks[task]] = task.result()
        for task in pending:
            task.cancel()
        return states

    async def _state(self, index: int, replica: int, fence: int | None = None) -> ReplicaState | None:
        """Where replica `replica` of partition `index` stands (fenced at `fence` first, when
        given); None when it does not answer within the partition's patience (`patience_after`)."""
        try:
            handle = self.replica(index, replica)
            call = handle.replica_state.remote() if fence is None else handle.fence.remote(fence)
            return ReplicaState.decode(await asyncio.wait_for(call, self._patience[index]))
        except Exception:  # noqa: BLE001 - a replica out of reach has no say
            return None


class DecidedElsewhere(TableHandles):
    """The routing table of a gateway that does not decide leadership: the deciding gateway's
    (`make` gets it, creating it again when it is gone for good). A client asking for the table
    looks for a leader, so the gateway fetches it again (`reload`) before it answers."""

    def __init__(self, config: NamespaceConfig, make: Callable[[], Any]) -> None:
        super().__init__(GatewayCaller(config, 0, lambda _: make()))
        self.config = config

    async def ready(self) -> None:
        """Fetch the deciding gateway's table unless it is here already."""
        await self.load()

    async def keep_decider(self) -> None:
        """Fetch the table every `KEEP_DECIDER_S`, so that a deciding gateway lost with its node is
        made again (and resumes its checks and repairs) even while no client turns to it; runs as
        long as this gateway."""
        while True:
            await asyncio.sleep(KEEP_DECIDER_S)
            try:
                await self.reload()
            except Exception:  # noqa: BLE001 - tried again at the next round
                logger.warning("the deciding gateway of namespace %r did not answer", self.config.name, exc_info=True)

    async def failed(self, index: int, epoch: int) -> None:
        """Report the leader of partition `index` of `epoch` gone to the deciding gateway, and take its table."""
        await self._take("partition_failed", index, epoch)

    @property
    def epochs(self) -> list[int]:
        """Each partition's epoch, as last fetched."""
        return list(self.table().epochs)

    def table(self) -> RoutingTable:
        """The routing table, as last fetched."""
        assert self._table is not None, "the table is fetched (ready) before it is published"
        return self._table
