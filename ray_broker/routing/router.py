"""The router: where each operation goes and what happens when a partition does not answer.

One implementation, used by the gateway (for callers without partition handles) and embedded in
every client (which then sends and receives straight from partitions):
- keyed work goes to its partition and is retried there with back-off until the caller's
  deadline, then `PartitionUnavailableError`; it is never rerouted;
- an unkeyed batch goes to one partition (round robin, a sender's next batch to the next
  partition: `planner.spread_start`) and moves to another when that one is unavailable;
- a receive is served from the partitions known to hold messages, with the receiver's carried
  settlements in the same partition call, and waits on every host partition at once (no polling)
  when none has any.
All I/O goes through a `PartitionChannel`; time comes from `clock` (monotonic seconds).
"""
from __future__ import annotations

import asyncio
import itertools
import random
import time
from typing import Any, Awaitable, Callable, Sequence

from ..entities import SUBSCRIPTIONS_SEGMENT
from ..errors import (
    InvalidOperationError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    PartitionUnavailableError,
)
from ..protocol import MAIN, PEEK_LOCK
from ..sku import Sku
from . import planner
from .channel import Call, PartitionChannel, PartitionUnavailable
from .health import RETRY_BACKOFF, PartitionHealth
from .receiving import RECEIVER_IDLE_S, ReceiverState, Watch, brought, releases

ATTEMPT_TIMEOUT_S = 5.0
"""How long one call may take before its partition counts as unavailable."""
WATCH_TIMEOUT_S = 10.0
"""The longest one wait on a partition lasts before it is renewed."""
UNKEYED_SETTLE_S = 10.0
"""How long an unkeyed tagged batch keeps to a partition that failed with it, maybe having stored
it, before moving on; a partition failing longer is taken as away (its node likely lost, not
restarting) and held (`health.AWAY_BACKOFF`)."""
GATHER_WINDOW_S = 0.003
"""After the first waiting receive brings messages, how long the others get to bring theirs."""
DATA_OPERATIONS = frozenset({"send", "send_batches", "cancel_scheduled", "receive", "settle", "close_receiver",
                             "receive_deferred", "peek", "accept_session", "session_call", "commit_transaction",
                             "definition"})
"""The router methods that clients call (a definition too: a direct client keeps its own cache of
them); everything else a gateway serves is management."""
DEFINITION_TTL_S = 2.0
"""How long an entity's definition is cached."""
SETTLE_TIMEOUT_S = 60.0
_RELEASING = ("abandon", "release")
"""Settlements that make a message available again."""

Session = dict[str, Any]
"""A held session lock as clients carry it: `session_id`, `lock_token`, `partition`, `seen`."""


def session_args(session: Session | None) -> tuple[str, bytes] | None:
    """A held session as partitions take it: `(session_id, lock_token)`, or None."""
    return None if session is None else (session["session_id"], session["lock_token"])


def settle_call(entity: str, subq: int, settlements: list[list[Any]], positions: list[int],
                session: Session | None) -> Call:
    """The partition call applying the settlements at `positions`."""
    return "settle", (entity, subq, [settlements[i] for i in positions], session_args(session))


def receive_reply(out: list[tuple[int, dict[str, Any]]], settled: list[Any]) -> dict[str, Any]:
    """A receive's reply: the messages handed out, each with its partition, and the results of
    the settlements it carried."""
    return {"messages": [dict(r, partition=k) for k, r in out], "settled": settled}


class Router:
    """Routing policy over a channel to the partitions of one namespace.

    Args:
        name: the namespace's name (for messages).
        channel: how partitions are reached.
        sku: the namespace's tier (size limits).
        clock: monotonic seconds (injectable for tests).
        sleep: how the router waits out a back-off (injectable with `clock`).
    """

    def __init__(self, name: str, channel: PartitionChannel, sku: Sku,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self.sleep = sleep
        self.channel = channel
        self.sku = sku
        self.count = channel.partition_count
        self.clock = clock
        self.health = PartitionHealth(self.count)
        self._definitions: dict[str, tuple[float, dict[str, Any]]] = {}
        self._spread = itertools.count(random.randrange(self.count))
        self._hints: dict[tuple[str, int, str | None], dict[int, bool]] = {}
        self._watches: dict[tuple[Any, ...], asyncio.Task[bool]] = {}
        self._receivers: dict[str, ReceiverState] = {}
        self._background: set[asyncio.Future[Any]] = set()

    # ------------------------------------------------------------------ partition calls

    async def call(self, index: int, calls: Sequence[Call], timeout: float = ATTEMPT_TIMEOUT_S) -> list[Any]:
        """One round trip to a partition; engine errors pass through, failures are recorded and raised
        as `PartitionUnavailable`."""
        try:
            results = await self.channel.call(index, calls, min(timeout, ATTEMPT_TIMEOUT_S))
        except PartitionUnavailable:
            self.health.failed(index, self.clock())
            raise
        self.health.succeeded(index)
        return results

    async def call_one(self, index: int, operation: str, *args: Any, timeout: float = ATTEMPT_TIMEOUT_S) -> Any:
        """`call` with a single operation; returns its result."""
        return (await self.call(index, [(operation, args)], timeout))[0]

    async def keyed(self, index: int, operation: str, *args: Any, deadline: float, entity: str | None = None) -> Any:
        """Call partition `index`, retrying it with back-off until `deadline`; never another partition."""
        return (await self.keyed_calls(index, [(operation, args)], deadline=deadline, entity=entity))[0]

    async def keyed_calls(self, index: int, calls: Sequence[Call], *, deadline: float,
                          entity: str | None = None) -> list[Any]:
        """`keyed` with several operations in one round trip (one commit); results in order."""
        attempt = 0
        while True:
            remaining = deadline - self.clock()
            try:
                return await self.call(index, calls, timeout=remaining)
            except PartitionUnavailable as exc:
                delay = RETRY_BACKOFF.delay(attempt)
                attempt += 1
                if self.clock() + delay >= deadline:
                    raise PartitionUnavailableError(
                        f"partition {index} of namespace {self.name!r} did not answer in time ({exc.reason}); "
                        "the operation needs that partition: retry later or with a longer timeout",
                        entity=entity, partition=index) from None
                await self.sleep(delay)

    async def everywhere(self, operation: str, *args: Any, deadline: float, entity: str | None = None) -> list[Any]:
        """Run an operation on every partition (management), each retried until `deadline`."""
        return list(await asyncio.gather(*(self.keyed(k, operation, *args, deadline=deadline, entity=entity)
                                            for k in range(self.count))))

    async def any(self, operation: str, *args: Any, timeout: float = 30.0) -> Any:
        """Run a read-only operation on the first partition that answers."""
        deadline = self.clock() + timeout
        while True:
            for k in self.health.order(list(range(self.count)), self.clock()):
                try:
                    return await self.call_one(k, operation, *args, timeout=deadline - self.clock())
                except PartitionUnavailable:
                    if self.clock() >= deadline:
                        break
            if self.clock() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of namespace {self.name!r} answered; retry when the namespace is back")
            await self.sleep(0.1)

    # ------------------------------------------------------------------ definitions

    def cached_definition(self, name: str) -> dict[str, Any] | None:
        """An entity's definition if it is cached and fresh, else None."""
        cached = self._definitions.get(name.lower())
        return cached[1] if cached is not None and cached[0] > self.clock() else None

    async def definition(self, name: str, fresh: bool = False) -> dict[str, Any]:
        """An entity's definition, cached for `DEFINITION_TTL_S`."""
        cached = None if fresh else self.cached_definition(name)
        if cached is not None:
            return cached
        try:
            definition = await self.any("get_entity", name)
        except MessagingEntityNotFoundError:
            self._definitions.pop(name.lower(), None)
            raise
        self.remember(definition)
        return definition  # type: ignore[no-any-return]

    def remember(self, definition: dict[str, Any]) -> None:
        """Cache a definition just created or changed."""
        self._definitions[definition["name"].lower()] = (self.clock() + DEFINITION_TTL_S, definition)

    def forget(self, name: str) -> None:
        """Drop a deleted entity's definition."""
        self._definitions.pop(name.lower(), None)

    def forget_subscriptions(self, topic: str) -> None:
        """Drop the definitions of a deleted topic's subscriptions."""
        prefix = topic.lower() + SUBSCRIPTIONS_SEGMENT
        for key in [key for key in self._definitions if key.startswith(prefix)]:
            del self._definitions[key]

    # ------------------------------------------------------------------ sending

    async def send(self, entity: str, envelopes: list[dict[str, Any]], timeout: float,
                   producer: tuple[str, int] | None = None) -> list[int | None]:
        """Route and store messages; returns sequence numbers in order (None for dropped duplicates).

        `producer` tags the batch (the sender's id and its batch number): every partition it
        reaches stores the tag with the messages and answers a repeat of it (a retry after a lost
        reply) with the original sequence numbers, storing nothing twice. An unkeyed batch with
        a tag starts at the partition the tag hashes to, so a retry goes where the batch went.
        """
        return (await self.send_batches(entity, [(envelopes, producer)], timeout))[0]

    async def send_batches(self, entity: str, batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]],
                           timeout: float) -> list[list[int | None]]:
        """Store several batches, each as `send` stores it (under its own producer tag), in as few
        partition calls as routing allows: the keyed parts of every batch bound for one partition
        go in one call there (one store commit); unkeyed parts spread batch by batch. Every batch
        is checked before any is sent. Returns each batch's sequence numbers."""
        deadline = self.clock() + timeout
        definition = await self.definition(entity)
        plans = [self.plan_send(definition, envelopes) for envelopes, _ in batches]
        results: list[list[int | None]] = [[None] * len(envelopes) for envelopes, _ in batches]
        shares: dict[int, list[tuple[int, list[int]]]] = {}
        for b, (keyed, _) in enumerate(plans):
            for k, indexes in keyed.items():
                shares.setdefault(k, []).append((b, indexes))

        async def to_partition(k: int, parts: list[tuple[int, list[int]]]) -> None:
            calls = [("send", (entity, [batches[b][0][i] for i in indexes], batches[b][1])) for b, indexes in parts]
            replies = await self.keyed_calls(k, calls, deadline=deadline, entity=entity)
            for (b, indexes), seqs in zip(parts, replies):
                self.place(results[b], indexes, seqs, definition, k)

        jobs: list[Awaitable[None]] = [to_partition(k, parts) for k, parts in shares.items()]
        for b, (_, unkeyed) in enumerate(plans):
            if unkeyed:
                envelopes, producer = batches[b]
                start = next(self._spread) if producer is None else planner.spread_start(producer, self.count)
                jobs.append(self._send_spread(definition, [envelopes[i] for i in unkeyed], unkeyed, results[b],
                                              deadline, start % self.count, planner.unkeyed_tag(producer)))
        await asyncio.gather(*jobs)
        return results

    def plan_send(self, definition: dict[str, Any],
                  envelopes: list[dict[str, Any]]) -> tuple[dict[int, list[int]], list[int]]:
        """Check a send against the entity and the tier, and split it: `(keyed, unkeyed)` as
        `planner.plan_send` gives them."""
        planner.check_send(definition, envelopes, self.sku.max_message_bytes, self.sku.name)
        return planner.plan_send(definition, envelopes, self.count)

    def place(self, result: list[int | None], indexes: list[int], seqs: Sequence[int | None],
              definition: dict[str, Any], k: int) -> None:
        """Record partition `k`'s sequence numbers for the messages at `indexes` of a send."""
        for i, seq in zip(indexes, seqs):
            result[i] = seq
        self._hint(definition, MAIN, None, k, True)

    async def _send_spread(self, definition: dict[str, Any], batch: list[dict[str, Any]], indexes: list[int],
                           result: list[int | None], deadline: float, start: int,
                           producer: tuple[str, int] | None) -> None:
        """Send an unkeyed batch to one partition (from `start` on), moving to another when one is
        unavailable.

        A partition that failed after the batch was sent to it may have stored it, and only that
        partition recognizes a repeat of a tagged batch: so it is retried for up to
        `UNKEYED_SETTLE_S` (a restart takes a second or two) before the batch moves on, once per
        batch. Only a partition that stays away longer can leave a copy behind (at-least-once, as
        Service Bus). A call that cannot have reached its partition (refused before it was sent)
        leaves no doubt: the batch moves on at once. A partition failing for longer than
        `UNKEYED_SETTLE_S` is held away (`PartitionHealth.hold_away`), longer each time it is still
        away after a hold.
        """
        name = definition["name"]
        doubted = False
        while True:
            order = self.health.order([(start + j) % self.count for j in range(self.count)], self.clock())
            for k in order:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    break
                try:
                    seqs = await self.call_one(k, "send", name, batch, producer, timeout=remaining)
                except PartitionUnavailable as exc:
                    seqs = None
                    if exc.reached and producer is not None and not doubted:
                        doubted = True
                        seqs = await self._settle_doubt(k, name, batch, producer, deadline)
                    if seqs is None:
                        if self.health.failing_for(k, self.clock()) >= UNKEYED_SETTLE_S:
                            self.health.hold_away(k, self.clock())
                        continue
                self.place(result, indexes, seqs, definition, k)
                return
            if self.clock() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of {name!r} accepted the messages before the timeout; retry later", entity=name)
            await self.sleep(0.05)

    async def _settle_doubt(self, k: int, name: str, batch: list[dict[str, Any]], producer: tuple[str, int],
                            deadline: float) -> list[int | None] | None:
        """Retry a tagged batch on partition `k`, which failed with it, for up to `UNKEYED_SETTLE_S`:
        its reply (the first one, if `k` had stored the batch) or None if `k` stayed away."""
        give_up = min(deadline, self.clock() + UNKEYED_SETTLE_S)
        attempt = 0
        while self.clock() < give_up:
            await self.sleep(min(RETRY_BACKOFF.delay(attempt), max(give_up - self.clock(), 0.0)))
            attempt += 1
            try:
                return await self.call_one(k, "send", name, batch, producer,  # type: ignore[no-any-return]
                                           timeout=give_up - self.clock())
            except PartitionUnavailable:
                continue
        return None

    async def commit_transaction(self, index: int, transaction_id: str, deadline: float,
                                 operations: list[list[Any]], timeout: float) -> list[Any]:
        """Commit a transaction's operations on partition `index` (the one they are pinned to),
        retried there until `timeout` (a repeat of a commit that took effect answers with its
        results). Operations are `["send", entity, envelopes]` or `["settle", entity, subq,
        session, ops]` with the session as clients carry it."""
        calls = [op if op[0] == "send" else ["settle", op[1], op[2], op[4], session_args(op[3])]
                 for op in operations]
        return await self.keyed(index, "commit_transaction", transaction_id, deadline,  # type: ignore[no-any-return]
                                calls, deadline=self.clock() + timeout)

    async def cancel_scheduled(self, entity: str, sequence_numbers: list[int], timeout: float) -> None:
        """Cancel scheduled messages on the partitions that hold them."""
        deadline = self.clock() + timeout
        definition = await self.definition(entity)
        groups = planner.group_by_sequence(definition, sequence_numbers, self.count)
        await asyncio.gather(*(self.keyed(k, "cancel_scheduled", entity, [sequence_numbers[i] for i in idx],
                                          deadline=deadline, entity=entity) for k, idx in groups.items()))

    # ------------------------------------------------------------------ receiving

    def _hint(self, definition: dict[str, Any], subq: int, session_id: str | None, k: int, value: bool) -> None:
        self._hints.setdefault((definition["name"].lower(), subq, session_id), {})[k] = value

    def settlement_groups(self, definition: dict[str, Any], session: Session | None,
                          ops: list[list[Any]]) -> dict[int, list[int]]:
        """Positions of settlements grouped by the partition holding each one's message."""
        return planner.group_by_sequence(definition, [op[1] for op in ops], self.count,
                                         None if session is None else session["partition"])

    async def receive(self, receiver_id: str, entity: str, subq: int, mode: str, session: Session | None,
                      max_count: int, max_wait: float, prefetch: int, settlements: list[list[Any]],
                      partitions: Sequence[int] | None = None) -> dict[str, Any]:
        """Apply the settlements the call carries, then return up to `max_count` messages: from the
        receiver's cache, then from every partition (of `partitions`, when given) known (or not yet
        known not) to hold messages at once (the count shared out among them), waiting up to
        `max_wait` seconds for the first one to arrive. Returns
        `{"messages": [...], "settled": [one result per settlement]}`.

        Settlements for a partition that serves the receive travel in the same partition call; the
        others are sent in parallel with it. A partition that answers with an engine error ends the
        receive with that error; the messages the receive had taken go back to the receiver's
        cache.
        """
        deadline = self.clock() + max_wait
        definition = await self.definition(entity)
        state = self.receiver(receiver_id, entity, subq)
        state.harvest()
        out = state.take(max_count, time.time())
        session_id = None if session is None else session["session_id"]
        hosts = self.receive_hosts(definition, session, partitions)
        hints = self.hints(definition, subq, session_id)
        settled: list[Any] = [None] * len(settlements)
        pending = self.settlement_groups(definition, session, settlements)
        background: list[asyncio.Future[None]] = []
        probed = False
        try:
            while len(out) < max_count and not state.closed:
                chosen = self.choose(hosts, hints, pending, max_count - len(out))
                background.extend(self._settle_groups(definition, subq, session, settlements, pending, settled,
                                                      keep=set(chosen)))
                if not chosen:
                    if out:
                        break
                    await asyncio.gather(*background)
                    background.clear()
                    remaining = deadline - self.clock()
                    if remaining <= 0 and probed:
                        break
                    probed = True
                    if mode == PEEK_LOCK and session is None:
                        await self._fetch_any(state, receiver_id, definition, subq, hosts, max(remaining, 0.0), hints,
                                              max_count - len(out))
                        out.extend(state.take(max_count - len(out), time.time()))
                    elif not await self._wait_any(definition, subq, session_id, False, hosts, max(remaining, 0.0)):
                        if self.clock() >= deadline:
                            break
                    continue
                requests = self.receive_requests(state, entity, subq, mode, session, chosen, max_count - len(out),
                                                 prefetch, settlements, pending)
                outcomes = await asyncio.gather(*(self._receive_from(k, calls, carried, settlements, pending,
                                                                     settled, hints) for k, calls, carried in requests),
                                                return_exceptions=True)
                fetched = [outcome for outcome in outcomes if isinstance(outcome, list)]
                failure = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
                if failure is not None:
                    out.extend(self.hand_out(state, fetched, max_count - len(out)))
                    state.cache.extendleft(reversed(out))
                    raise failure
                if not any(fetched):
                    for k in chosen:
                        hints[k] = False
                    continue
                out.extend(self.hand_out(state, fetched, max_count - len(out)))
        except asyncio.CancelledError:
            watches, cached = state.detach()
            self._in_background(self._give_back(receiver_id, state.entity, subq, self._returnable(out, mode, session)
                                                + cached, watches))
            raise
        if state.closed and self._returnable(out, mode, session):
            self._in_background(self._give_back(receiver_id, state.entity, subq, out, {}))
            out = []
        background.extend(self._settle_groups(definition, subq, session, settlements, pending, settled, keep=None))
        await asyncio.gather(*background)
        state.last_used = self.clock()
        return receive_reply(out, settled)

    @staticmethod
    def _returnable(out: list[tuple[int, dict[str, Any]]], mode: str,
                    session: Session | None) -> list[tuple[int, dict[str, Any]]]:
        """The messages of a receive that never reached its caller that go back to the entity: locked
        ones (receive-and-delete removed its messages), and not a session's (a session receiver's
        next receive hands those out again, in order)."""
        return out if mode == PEEK_LOCK and session is None else []

    def receive_hosts(self, definition: dict[str, Any], session: Session | None,
                      partitions: Sequence[int] | None = None) -> list[int]:
        """The partitions a receive reads: a held session's, else every one holding the entity (of
        `partitions`, when given: indexes as sequence numbers name them, so a non-partitioned
        entity's home is 0)."""
        if session is not None:
            return [session["partition"]]
        hosts = planner.hosts(definition, self.count)
        if partitions is None:
            return hosts
        if not planner.is_partitioned(definition):
            return hosts if 0 in partitions else []
        return [k for k in hosts if k in partitions]

    def hints(self, definition: dict[str, Any], subq: int, session_id: str | None) -> dict[int, bool]:
        """Which partitions are known to hold messages of an entity's sub-queue (or session);
        a partition not in it may."""
        return self._hints.setdefault((definition["name"].lower(), subq, session_id), {})

    def choose(self, hosts: list[int], hints: dict[int, bool], pending: dict[int, list[int]], need: int) -> list[int]:
        """The partitions one round of a receive asks: those that may hold messages and are
        available, from a rotating start, those with carried settlements first, at most `need`."""
        now = self.clock()
        ready = [k for k in hosts if hints.get(k, True) and self.health.available(k, now)]
        offset = next(self._spread) % len(ready) if ready else 0
        return sorted(ready[offset:] + ready[:offset], key=lambda k: k not in pending)[:need]

    def receive_requests(self, state: ReceiverState, entity: str, subq: int, mode: str, session: Session | None,
                         chosen: list[int], need: int, prefetch: int, settlements: list[list[Any]],
                         pending: dict[int, list[int]]) -> list[tuple[int, list[Call], list[int]]]:
        """One round's partition calls: for each chosen partition, its share of `need` (the first
        also the prefetch the cache lacks) with the settlements pending for it, which leave
        `pending`. Each request is `(partition, calls, positions of the settlements carried)`."""
        shares = [need // len(chosen) + (1 if j < need % len(chosen) else 0) for j in range(len(chosen))]
        extra = max(0, prefetch - len(state.cache)) if mode == PEEK_LOCK else 0
        seen = 0 if session is None else state.highest_sequence(int(session.get("seen", 0)))
        requests = []
        for j, (k, share) in enumerate(zip(chosen, shares)):
            carried = pending.pop(k, [])
            calls = [settle_call(entity, subq, settlements, carried, session)] if carried else []
            calls.append(("receive", (entity, subq, share + (extra if j == 0 else 0), mode, session_args(session), seen)))
            requests.append((k, calls, carried))
        return requests

    def received(self, k: int, replies: list[Any], carried: list[int], settlements: list[list[Any]],
                 settled: list[Any], hints: dict[int, bool]) -> list[tuple[int, dict[str, Any]]]:
        """Apply partition `k`'s replies to a round's request: the carried settlements' results,
        what `k` still holds; returns the messages it sent, with their partition."""
        if carried:
            for i, result in zip(carried, replies[0]):
                settled[i] = result
        reply = replies[-1]
        hints[k] = bool(reply["more"]) or any(settlements[i][0] in _RELEASING for i in carried)
        return [(k, r) for r in reply["messages"]]

    @staticmethod
    def hand_out(state: ReceiverState, fetched: list[list[tuple[int, dict[str, Any]]]],
                 wanted: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to `wanted` of a round's messages; the rest go to the receiver's cache."""
        out: list[tuple[int, dict[str, Any]]] = []
        for records in fetched:
            take = wanted - len(out)
            out.extend(records[:take])
            state.cache.extend(records[take:])
        return out

    async def _receive_from(self, k: int, calls: list[Call], carried: list[int], settlements: list[list[Any]],
                            pending: dict[int, list[int]], settled: list[Any],
                            hints: dict[int, bool]) -> list[tuple[int, dict[str, Any]]]:
        """One round's call to partition `k`; a partition that does not answer gives nothing (its
        settlements go back to `pending`)."""
        try:
            replies = await self.call(k, calls)
        except PartitionUnavailable:
            hints[k] = False
            if carried:
                pending[k] = carried
            return []
        return self.received(k, replies, carried, settlements, settled, hints)

    def _settle_groups(self, definition: dict[str, Any], subq: int, session: Session | None,
                       ops: list[list[Any]], pending: dict[int, list[int]], results: list[Any],
                       keep: set[int] | None) -> list[asyncio.Future[None]]:
        """Start settling every pending group except those of `keep`; each op's result lands in `results`."""
        deadline = self.clock() + SETTLE_TIMEOUT_S

        async def apply(k: int, indexes: list[int]) -> None:
            try:
                replies = await self._settle_on(k, definition, subq, session, [ops[i] for i in indexes], deadline)
            except Exception as exc:  # noqa: BLE001 - each op reports what stopped it
                replies = [exc] * len(indexes)
            for i, reply in zip(indexes, replies):
                results[i] = reply

        return [asyncio.ensure_future(apply(k, pending.pop(k))) for k in [k for k in pending if not keep or k not in keep]]

    async def _settle_on(self, k: int, definition: dict[str, Any], subq: int, session: Session | None,
                         ops: list[list[Any]], deadline: float) -> list[Any]:
        name = definition["name"]
        replies = await self.keyed(k, "settle", name, subq, ops, session_args(session), deadline=deadline,
                                   entity=name)
        if any(op[0] in _RELEASING for op in ops):
            self._hint(definition, subq, None if session is None else session["session_id"], k, True)
        return replies  # type: ignore[no-any-return]

    def receiver(self, receiver_id: str, entity: str, subq: int) -> ReceiverState:
        """A receiver's state (made on its first receive)."""
        state = self._receivers.get(receiver_id)
        if state is None:
            state = self._receivers[receiver_id] = ReceiverState(entity=entity, subq=subq)
        return state

    async def _fetch_any(self, state: ReceiverState, receiver_id: str, definition: dict[str, Any], subq: int,
                         hosts: list[int], timeout: float, hints: dict[int, bool], wanted: int) -> None:
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
        now = self.clock()
        for k in hosts:
            if k not in state.watches and self.health.available(k, now) and not state.closed:
                state.watches[k] = asyncio.ensure_future(
                    self._fetch(k, receiver_id, name, subq, count, watch_for, hints))
        if state.watches:
            done, pending = await asyncio.wait(list(state.watches.values()),
                                               timeout=self._watch_bound(hosts, watch_for + 1.0, now),
                                               return_when=asyncio.FIRST_COMPLETED)
            if done and pending and wanted > 1:
                await asyncio.wait(pending, timeout=GATHER_WINDOW_S)
        before = len(state.cache)
        state.harvest()
        if len(state.cache) == before and not state.watches:
            await self.sleep(0.05)

    async def _fetch(self, k: int, receiver_id: str, entity: str, subq: int, count: int, timeout: float,
                     hints: dict[int, bool]) -> list[tuple[int, dict[str, Any]]]:
        try:
            reply = await self.channel.receive_waiting(k, receiver_id, entity, subq, count, PEEK_LOCK, None, None,
                                                       timeout)
        except PartitionUnavailable:
            self.health.failed(k, self.clock())
            return []
        self.health.succeeded(k)
        hints[k] = bool(reply["more"])
        return [(k, r) for r in reply["messages"]]

    async def _wait_any(self, definition: dict[str, Any], subq: int, session_id: str | None, free_session: bool,
                        hosts: list[int], timeout: float) -> bool:
        """Wait until some host partition has messages (shared watches, no polling); set hints.

        Partitions in back-off are not watched; a watch that ends without news leaves the others
        waiting, so a failing partition cannot turn the wait into a busy loop.
        """
        name = definition["name"]
        key = name.lower()
        watch_for = min(max(timeout, 0.0), WATCH_TIMEOUT_S)
        now = self.clock()
        give_up = now + self._watch_bound(hosts, watch_for + 1.0, now)
        waiting: set[asyncio.Task[bool]] = set()
        for k in hosts:
            if not self.health.available(k, now):
                continue
            wkey = (key, subq, session_id, free_session, k)
            task = self._watches.get(wkey)
            if task is None or task.done():
                task = asyncio.ensure_future(self._watch(name, subq, session_id, free_session, k, watch_for))
                self._watches[wkey] = task
                task.add_done_callback(lambda t, w=wkey: self._watches.pop(w, None) if self._watches.get(w) is t else None)
            waiting.add(task)
        while waiting:
            remaining = give_up - self.clock()
            if remaining <= 0:
                return False
            done, waiting = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                return True
        await self.sleep(0.05)
        return False

    def _watch_bound(self, hosts: list[int], longest: float, now: float) -> float:
        """How long a receive's waits may go on before it looks at its hosts again: `longest`, or
        less when a host left out for its back-off may be asked again sooner (so a partition that
        failed once, say a dead actor since replaced, is not passed over for the whole wait)."""
        retry = self.health.next_retry(hosts, now)
        return longest if retry is None else min(longest, retry)

    async def _watch(self, entity: str, subq: int, session_id: str | None, free_session: bool, k: int,
                     timeout: float) -> bool:
        try:
            available = await self.channel.wait_available(k, entity, subq, session_id, free_session, timeout)
        except PartitionUnavailable:
            self.health.failed(k, self.clock())
            return False
        self.health.succeeded(k)
        if not free_session:
            self._hints.setdefault((entity.lower(), subq, session_id), {})[k] = available
        return available

    async def settle(self, entity: str, subq: int, session: Session | None, ops: list[list[Any]],
                     timeout: float) -> list[Any]:
        """Apply settlements on the partitions holding the messages; one result per op, in order."""
        deadline = self.clock() + timeout
        definition = await self.definition(entity)
        groups = self.settlement_groups(definition, session, ops)
        results: list[Any] = [None] * len(ops)

        async def apply(k: int, indexes: list[int]) -> None:
            replies = await self._settle_on(k, definition, subq, session, [ops[i] for i in indexes], deadline)
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

    async def receiver_gone(self, receiver_id: str, entity: str, subq: int, mode: str, session: Session | None,
                            reply: dict[str, Any]) -> dict[str, Any]:
        """A receive's reply that its receiver, gone, will never get: the receiver is closed and the
        reply's locked messages released without counting a delivery (a session's are left to its
        lock). Returns the reply without them."""
        await self.close_receiver(receiver_id)
        held = [(r["partition"], r) for r in reply["messages"]]
        await self._release(entity, subq, self._returnable(held, mode, session))
        return dict(reply, messages=[])

    async def _give_back(self, receiver_id: str, entity: str, subq: int, held: list[tuple[int, dict[str, Any]]],
                         watches: dict[int, Watch]) -> int:
        """End the waiting receives `watches` of a receiver, then release, without counting a
        delivery, the messages `held` for it and those the waits brought; returns how many were
        released. A wait that does not end within `ATTEMPT_TIMEOUT_S` releases what it brings
        when it ends."""
        if watches:
            await asyncio.gather(*(self.channel.end_waits(k, receiver_id) for k in watches), return_exceptions=True)
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
        deadline = self.clock() + SETTLE_TIMEOUT_S
        groups = releases(held)
        await asyncio.gather(*(self.keyed(k, "settle", entity, subq, ops, None, deadline=deadline)
                               for k, ops in groups.items()), return_exceptions=True)
        self._hints.setdefault((entity.lower(), subq, None), {}).update(dict.fromkeys(groups, True))
        return len(held)

    def _in_background(self, work: Awaitable[Any]) -> None:
        """Run `work` on this loop without waiting for it (kept referenced until it ends)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def sweep_idle_receivers(self) -> None:
        """Release caches of receivers whose clients went away without closing them."""
        cutoff = self.clock() - RECEIVER_IDLE_S
        for receiver_id in [r for r, s in self._receivers.items() if s.last_used < cutoff]:
            await self.close_receiver(receiver_id)

    async def receive_deferred(self, entity: str, subq: int, mode: str, session: Session | None,
                               sequence_numbers: list[int], timeout: float) -> list[dict[str, Any]]:
        """Deferred messages by sequence number, from the partitions that hold them."""
        deadline = self.clock() + timeout
        definition = await self.definition(entity)
        groups = planner.group_by_sequence(definition, sequence_numbers, self.count,
                                           None if session is None else session["partition"])
        replies = await asyncio.gather(*(
            self.keyed(k, "receive_deferred", entity, subq, [sequence_numbers[i] for i in idx], mode,
                       session_args(session), deadline=deadline, entity=entity) for k, idx in groups.items()))
        by_seq = {r["sequence_number"]: dict(r, partition=k) for k, rs in zip(groups, replies) for r in rs}
        return [by_seq[s] for s in dict.fromkeys(sequence_numbers) if s in by_seq]

    async def peek(self, entity: str, subq: int, session: Session | None, from_sequence: int,
                   max_count: int, to_sequence: int | None = None) -> list[dict[str, Any]]:
        """Browse messages in sequence-number order from `from_sequence` (up to `to_sequence`,
        exclusive, when given), across partitions in index order (those holding the range are all
        asked at once)."""
        definition = await self.definition(entity)
        hosts = planner.peek_hosts(definition, self.count, from_sequence,
                                   None if session is None else session["partition"], to_sequence)
        deadline = self.clock() + 30.0
        session_id = None if session is None else session["session_id"]
        pages = await asyncio.gather(*(
            self.keyed(k, "peek", entity, subq, from_sequence if k == hosts[0] else (k << 48), max_count, session_id,
                       to_sequence, deadline=deadline, entity=entity) for k in hosts))
        return planner.merge_peeks(pages, max_count)

    # ------------------------------------------------------------------ sessions

    async def accept_session(self, entity: str, session_id: str | None, max_wait: float) -> dict[str, Any]:
        """Lock a named session, or the next available one (waiting up to `max_wait`)."""
        deadline = self.clock() + max_wait
        definition = await self.definition(entity)
        if not definition["options"]["requires_session"]:
            raise InvalidOperationError(
                f"entity {definition['name']!r} does not require sessions; open a receiver without session_id",
                entity=entity)
        if session_id is not None:
            k = planner.session_partition(definition, session_id, self.count)
            lock = await self.keyed(k, "accept_session", entity, session_id,
                                    deadline=max(deadline, self.clock() + 30.0), entity=entity)
            return dict(lock, partition=k)
        hosts = planner.hosts(definition, self.count)
        probed = False
        while True:
            start = next(self._spread)
            for j in range(len(hosts)):
                k = hosts[(start + j) % len(hosts)]
                if not self.health.available(k, self.clock()):
                    continue
                try:
                    lock = await self.call_one(k, "accept_session", entity, None)
                except PartitionUnavailable:
                    continue
                if lock is not None:
                    return dict(lock, partition=k)
            remaining = deadline - self.clock()
            if remaining <= 0 and probed:
                raise OperationTimeoutError(
                    f"no session of {definition['name']!r} became available within {max_wait:g} s; "
                    "retry, or pass a longer max_wait_time", entity=entity)
            probed = True
            await self._wait_any(definition, MAIN, None, True, hosts, max(remaining, 0.0))

    async def session_call(self, entity: str, session: Session, operation: str, *args: Any) -> Any:
        """Renew, release, or get/set the state of a held session."""
        deadline = self.clock() + 30.0
        return await self.keyed(session["partition"], operation, entity, session["session_id"],
                                session["lock_token"], *args, deadline=deadline, entity=entity)
