"""Receives on the router: rounds of partition calls (`rounds.ReceiveRounds`) over the partitions
known to hold messages, on the loop (`ReceiveCoordinator.receive`, which retries and waits on
every host partition at once, no polling, when none has any) or one round on the caller's
thread (`receive_now`); settlements ride on the receive calls or go to their partitions; a
receiver's cache, its waits under way and what they bring are released, uncounted, when it
closes, is cancelled or its process dies.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Iterator, Sequence

from ..protocol import PEEK_LOCK
from ..router_requests import ReceiveReply, ReceiveRequest
from ..wire import HeldSession, Settle, Settlement
from . import planner
from .definitions import Definitions
from .reaching import ATTEMPT_TIMEOUT_S, PartitionReach
from .receive_state import RECEIVER_IDLE_S, Hints, ReceiverState, Watch, brought, releases
from .rounds import RELEASING, ReceiveRounds, RoundCall, fewest
from .waiting import WATCH_TIMEOUT_S, PartitionWaits

GATHER_WINDOW_S = 0.003
"""After the first waiting receive brings messages, how long the others get to bring theirs."""
SETTLE_TIMEOUT_S = 60.0
"""How long settlements sent apart from a receive are retried on their partition."""


@dataclass
class ReceiveRound:
    """What one round of a receive on the caller's thread did: the reply so far, and what it left
    for the router's loop (`rest` settlement positions still to apply; `finished` False when more
    messages may be had by asking again or waiting)."""

    reply: ReceiveReply
    rest: list[int] = field(default_factory=list)
    finished: bool = True

    @property
    def complete(self) -> bool:
        """Whether the reply is the whole receive."""
        return self.finished and not self.rest

    def merged(self, later: ReceiveReply) -> ReceiveReply:
        """The reply with the loop's reply for what was left (the `rest` settlements) added."""
        settled = list(self.reply.settled)
        for i, result in zip(self.rest, later.settled):
            settled[i] = result
        return ReceiveReply(self.reply.messages + later.messages, settled)


@dataclass
class InFlightRound:
    """A receive round's partition calls under way: what they ask, and their outcomes to come."""

    calls: list[RoundCall]
    outcomes: asyncio.Future[list[list[Any] | BaseException]]

    def locked(self, outcomes: Sequence[list[Any] | BaseException]) -> list[tuple[int, dict[str, Any]]]:
        """The `(partition, record)` pairs the round's receives took."""
        return [(call.partition, record) for call, outcome in zip(self.calls, outcomes)
                if call.receives and not isinstance(outcome, BaseException) for record in outcome[-1].messages]


class ReceiveCoordinator:
    """A router's receives, settlements and receivers.

    Args:
        reach: the partitions.
        definitions: the entity definitions cache.
        hints: where messages are known to be.
        waits: the router's waits on partitions.
        spread: a rotating partition index (where a round starts).
    """

    def __init__(self, reach: PartitionReach, definitions: Definitions, hints: Hints, waits: PartitionWaits,
                 spread: Iterator[int]) -> None:
        self._reach = reach
        self._definitions = definitions
        self.hints = hints
        self._waits = waits
        self._spread = spread
        self._receivers: dict[str, ReceiverState] = {}
        self._background: set[asyncio.Future[Any]] = set()

    def settlement_groups(self, definition: dict[str, Any], session: HeldSession | None,
                          ops: list[Settlement]) -> dict[int, list[int]]:
        """Positions of settlements grouped by the partition holding each one's message."""
        return planner.group_by_sequence(definition, [op.sequence_number for op in ops], self._reach.count,
                                         None if session is None else session.partition)

    async def receive(self, receiver_id: str, entity: str, subq: int, mode: str, session: HeldSession | None,
                      max_count: int, max_wait: float, prefetch: int, settlements: list[Settlement],
                      partitions: Sequence[int] | None = None) -> ReceiveReply:
        """Apply the settlements the call carries, then return up to `max_count` messages: from the
        receiver's cache, then from every partition (of `partitions`, when given) known (or not yet
        known not) to hold messages at once (the count shared out among them), waiting up to
        `max_wait` seconds for the first one to arrive. Returns the messages and one result per
        settlement.

        Runs `rounds.ReceiveRounds` round after round. Settlements for a partition that serves the
        receive travel in the same partition call; the others are sent in parallel with it (and
        retried on their partition). A partition that answers with an engine error ends the
        receive with that error; the messages the receive had taken go back to the receiver's
        cache.
        """
        reach = self._reach
        deadline = reach.clock() + max_wait
        definition = await self._definitions.get(entity)
        state = self.receiver(receiver_id, entity, subq)
        state.harvest()
        session_id = None if session is None else session.session_id
        hosts = self.receive_hosts(definition, session, partitions)
        hints = self.hints.of(definition["name"], subq, session_id)
        job = ReceiveRounds(state, hints, entity, subq, mode, session, max_count, prefetch, settlements,
                            self.settlement_groups(definition, session, settlements), time.time())
        background: list[asyncio.Future[None]] = []
        in_flight: InFlightRound | None = None
        probed = False
        state.busy += 1
        try:
            while job.wanted > 0 and not state.closed:
                chosen = self.choose(hosts, hints, job.pending, job.wanted)
                background.extend(self._settle_groups(definition, subq, session, settlements, job.pending,
                                                      job.settled, keep=set(chosen)))
                if not chosen:
                    if job.out:
                        break
                    await asyncio.gather(*background)
                    background.clear()
                    remaining = deadline - reach.clock()
                    if remaining <= 0 and probed:
                        break
                    probed = True
                    if mode == PEEK_LOCK and session is None:
                        await self._fetch_any(state, receiver_id, definition, subq, hosts, max(remaining, 0.0), hints,
                                              job.wanted)
                        job.out.extend(state.take(job.wanted, time.time()))
                    elif not await self._waits.wait_any(definition, subq, session_id, False, hosts, max(remaining, 0.0)):
                        if reach.clock() >= deadline:
                            break
                    continue
                calls = job.calls(chosen, settle_others=False)
                in_flight = InFlightRound(calls, asyncio.ensure_future(
                    reach.call_each([(c.partition, c.calls) for c in calls])))
                outcomes = await asyncio.shield(in_flight.outcomes)
                in_flight = None
                if not job.apply(calls, outcomes):
                    hints.update(dict.fromkeys(chosen, 0))
            if state.closed and self._returnable(job.out, mode, session):
                self._in_background(self._give_back(receiver_id, state.entity, subq, job.out, {}))
                job.out = []
            background.extend(self._settle_groups(definition, subq, session, settlements, job.pending, job.settled,
                                                  keep=None))
            await asyncio.gather(*background)
        except asyncio.CancelledError:
            watches, cached = state.detach()
            returns = self._gives_back(mode, session)
            self._in_background(self._give_back(receiver_id, state.entity, subq,
                                                self._returnable(job.out, mode, session) + cached, watches,
                                                in_flight if returns else None))
            raise
        finally:
            state.busy -= 1
        state.last_used = reach.clock()
        return job.reply()

    def receive_now(self, request: ReceiveRequest) -> ReceiveRound | None:
        """One round of `receive` on the caller's thread: the receiver's cache, then the
        partitions known to hold messages, every carried settlement going in the same calls.
        Returns None (having done nothing) when the round would need the router's loop: no cached
        definition, the receiver busy there (a receive or waits under way), or nothing cached or
        known to be there."""
        definition = self._definitions.cached(request.entity)
        state = self.receiver(request.receiver_id, request.entity, request.subq)
        if definition is None or state.watches or state.busy:
            return None
        session = request.session
        hosts = self.receive_hosts(definition, session, request.partitions)
        hints = self.hints.of(definition["name"], request.subq, None if session is None else session.session_id)
        if not state.cache and not any(hints.get(k, 1) for k in hosts):
            return None
        job = ReceiveRounds(state, hints, request.entity, request.subq, request.mode, session, request.max_count,
                            request.prefetch, request.settlements,
                            self.settlement_groups(definition, session, request.settlements), time.time())
        chosen = self.choose(hosts, hints, job.pending, job.wanted) if job.wanted > 0 else []
        calls = job.calls(chosen, settle_others=True)
        outcomes = self._reach.call_now([(c.partition, c.calls) for c in calls])
        try:
            job.apply(calls, outcomes)
        finally:
            state.last_used = self._reach.clock()
        more = job.wanted > 0 and bool(self.choose(hosts, hints, {}, 1))
        return ReceiveRound(job.reply(), job.left(), finished=bool(job.out) and not more)

    @staticmethod
    def _returnable(out: list[tuple[int, dict[str, Any]]], mode: str,
                    session: HeldSession | None) -> list[tuple[int, dict[str, Any]]]:
        """The messages of a receive that never reached its caller that go back to the entity: locked
        ones (receive-and-delete removed its messages), and not a session's (a session receiver's
        next receive hands those out again, in order)."""
        return out if ReceiveCoordinator._gives_back(mode, session) else []

    @staticmethod
    def _gives_back(mode: str, session: HeldSession | None) -> bool:
        """Whether what a receive took and never handed out goes back to the entity (locked
        messages, not a session's)."""
        return mode == PEEK_LOCK and session is None

    def receive_hosts(self, definition: dict[str, Any], session: HeldSession | None,
                      partitions: Sequence[int] | None = None) -> list[int]:
        """The partitions a receive reads: a held session's, else every one holding the entity (of
        `partitions`, when given: indexes as sequence numbers name them, so a non-partitioned
        entity's home is 0)."""
        if session is not None:
            return [session.partition]
        hosts = planner.hosts(definition, self._reach.count)
        if partitions is None:
            return hosts
        if not planner.is_partitioned(definition):
            return hosts if 0 in partitions else []
        return [k for k in hosts if k in partitions]

    def choose(self, hosts: list[int], hints: dict[int, int], pending: dict[int, list[int]], need: int) -> list[int]:
        """The partitions one round of a receive asks: of those that may hold messages and are
        available, taken from a rotating start, the fewest that can fill it (`rounds.fewest`)."""
        now = self._reach.clock()
        ready = [k for k in hosts if hints.get(k, 1) and self._reach.health.available(k, now)]
        offset = next(self._spread) % len(ready) if ready else 0
        return fewest(ready[offset:] + ready[:offset], hints, pending, need)

    def _settle_groups(self, definition: dict[str, Any], subq: int, session: HeldSession | None,
                       ops: list[Settlement], pending: dict[int, list[int]], results: list[Any],
                       keep: set[int] | None) -> list[asyncio.Future[None]]:
        """Start settling every pending group except those of `keep`; each op's result lands in `results`."""
        deadline = self._reach.clock() + SETTLE_TIMEOUT_S

        async def apply(k: int, indexes: list[int]) -> None:
            try:
                replies = await self._settle_on(k, definition, subq, session, [ops[i] for i in indexes], deadline)
            except Exception as exc:  # noqa: BLE001 - each op reports what stopped it
                replies = [exc] * len(indexes)
            for i, reply in zip(indexes, replies):
                results[i] = reply

        return [asyncio.ensure_future(apply(k, pending.pop(k))) for k in [k for k in pending if not keep or k not in keep]]

    async def _settle_on(self, k: int, definition: dict[str, Any], subq: int, session: HeldSession | None,
                         ops: list[Settlement], deadline: float) -> list[Any]:
        name = definition["name"]
        replies = await self._reach.keyed(k, Settle(name, subq, ops, None if session is None else session.ref),
                                          deadline=deadline, entity=name)
        if any(op.action in RELEASING for op in ops):
            self.hints.mark(name, subq, None if session is None else session.session_id, [k], True)
        return replies  # type: ignore[no-any-return]

    def receiver(self, receiver_id: str, entity: str, subq: int) -> ReceiverState:
        """A receiver's state (made on its first receive)."""
        state = self._receivers.get(receiver_id)
        if state is None:
            state = self._receivers[receiver_id] = ReceiverState(entity=entity, subq=subq)
        return state

    async def _fetch_any(self, state: ReceiverState, receiver_id: str, definition: dict[str, Any], subq: int,
                         hosts: list[int], timeout: float, hints: dict[int, int], wanted: int) -> None:
        """Wait on every host partition at once with receives that carry the messages that wake
        them, until one brings some or `timeout` passes (then, when more than one message is
        `wanted`, `GATHER_WINDOW_S` more for the others); what they bring lands in the receiver's
        cache. On an entity's only partition a wait brings what the receive wants; on several, one
        message each (the receive then gathers the rest), so a receiver never locks much more than
        it asked for. Waits still under way stay with the receiver (the next receive, or its close,
        collects them), so nothing they lock is lost."""
        name = definition["name"]
        watch_for = min(timeout, WATCH_TIMEOUT_S)
        count = 1 if len(hosts) > 1 else wanted
        now = self._reach.clock()
        for k in hosts:
            if k not in state.watches and self._reach.health.available(k, now) and not state.closed:
                state.watches[k] = asyncio.ensure_future(
                    self._fetch(k, receiver_id, name, subq, count, watch_for, hints))
        if state.watches:
            done, pending = await asyncio.wait(list(state.watches.values()),
                                               timeout=self._waits.bound(hosts, watch_for + 1.0, now),
                                               return_when=asyncio.FIRST_COMPLETED)
            if done and pending and wanted > 1:
                await asyncio.wait(pending, timeout=GATHER_WINDOW_S)
        before = len(state.cache)
        state.harvest()
        if len(state.cache) == before and not state.watches:
            await self._reach.sleep(0.05)

    async def _fetch(self, k: int, receiver_id: str, entity: str, subq: int, count: int, timeout: float,
                     hints: dict[int, int]) -> list[tuple[int, dict[str, Any]]]:
        reply = await self._reach.receive_waiting(k, receiver_id, entity, subq, count, PEEK_LOCK, None, None, timeout)
        if reply is None:
            return []
        hints[k] = reply.backlog
        return [(k, r) for r in reply.messages]

    async def settle(self, entity: str, subq: int, session: HeldSession | None, settlements: list[Settlement],
                     timeout: float) -> list[Any]:
        """Apply settlements on the partitions holding the messages; one result per settlement, in
        order."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        groups = self.settlement_groups(definition, session, settlements)
        results: list[Any] = [None] * len(settlements)

        async def apply(k: int, indexes: list[int]) -> None:
            replies = await self._settle_on(k, definition, subq, session, [settlements[i] for i in indexes], deadline)
            for i, reply in zip(indexes, replies):
                results[i] = reply

        await asyncio.gather(*(apply(k, idx) for k, idx in groups.items()))
        return results

    async def close_receiver(self, receiver_id: str) -> int:
        """End a receiver's waiting receives and release the messages it holds but never handed out
        (no delivery counted); a receive of it still under way ends at once with no messages."""
        state = self._receivers.pop(receiver_id, None)
        if state is None:
            return 0
        state.closed = True
        watches, cached = state.detach()
        return await self._give_back(receiver_id, state.entity, state.subq, cached, watches)

    async def receiver_gone(self, request: ReceiveRequest, reply: ReceiveReply) -> ReceiveReply:
        """The reply to `request` that its receiver, gone, will never get: the receiver is closed and
        the reply's locked messages released without counting a delivery (a session's are left to
        its lock). Returns the reply without them."""
        await self.close_receiver(request.receiver_id)
        held = [(r["partition"], r) for r in reply.messages]
        await self._release(request.entity, request.subq, self._returnable(held, request.mode, request.session))
        return reply._replace(messages=[])

    async def _give_back(self, receiver_id: str, entity: str, subq: int, held: list[tuple[int, dict[str, Any]]],
                         watches: dict[int, Watch], in_flight: InFlightRound | None = None) -> int:
        """End the waiting receives `watches` of a receiver, then release, without counting a
        delivery, the messages `held` for it, those the waits brought and those a round of
        partition calls still `in_flight` when its receive was cancelled locks; returns how many
        were released. A wait that does not end within `ATTEMPT_TIMEOUT_S` releases what it brings
        when it ends."""
        if in_flight is not None:
            held = held + in_flight.locked(await in_flight.outcomes)
        if watches:
            await self._reach.end_waits(list(watches), receiver_id)
            done, late = await asyncio.wait(list(watches.values()), timeout=ATTEMPT_TIMEOUT_S)
            held = held + brought(done)
            for task in late:
                task.add_done_callback(
                    lambda t: self._in_background(self._release(entity, subq, brought([t]))))
        return await self._release(entity, subq, held)

    async def _release(self, entity: str, subq: int, held: list[tuple[int, dict[str, Any]]]) -> int:
        """Release locked messages without counting a delivery; returns how many."""
        if not held:
            return 0
        deadline = self._reach.clock() + SETTLE_TIMEOUT_S
        groups = releases(held)
        await asyncio.gather(*(self._reach.keyed(k, Settle(entity, subq, ops, None), deadline=deadline)
                               for k, ops in groups.items()), return_exceptions=True)
        self.hints.mark(entity, subq, None, groups, True)
        return len(held)

    def _in_background(self, work: Awaitable[Any]) -> None:
        """Run `work` on this loop without waiting for it (kept referenced until it ends)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def sweep_idle_receivers(self) -> None:
        """Release caches of receivers whose clients went away without closing them."""
        cutoff = self._reach.clock() - RECEIVER_IDLE_S
        for receiver_id in [r for r, s in self._receivers.items() if s.last_used < cutoff]:
            await self.close_receiver(receiver_id)
