"""The gateway actor: routes sends, fans receives out over partitions, applies management everywhere.

Clients never see partitions: the gateway resolves each message's key to a partition (or spreads
unkeyed batches), retries keyed work on its own partition until the caller's deadline, moves
unkeyed work to another partition when one fails, and serves receives from partitions that have
messages, waiting on them without polling.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from ray_broker.config import NamespaceConfig
from ray_broker.engine.partition import MAIN, PEEK_LOCK
from ray_broker.entities import IMMUTABLE_QUEUE_OPTIONS, normalize_queue_options
from ray_broker.errors import (
    InvalidOperationError,
    MessageSizeExceededError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    PartitionUnavailableError,
    QuotaExceededError,
    unwrap_remote_error,
)
from ray_broker.health import PartitionHealth
from ray_broker.routing import home_partition, partition_for_key, partition_of, resolve_partition_key
from ray_broker.sku import MAX_ENTITIES, get_sku

from .handles import partition_actor

ATTEMPT_TIMEOUT_S = 5.0
"""How long one call may take before its partition counts as unavailable."""
WATCH_TIMEOUT_S = 10.0
DEFINITION_TTL_S = 2.0
RECEIVER_IDLE_S = 300.0
LOCK_MARGIN_S = 0.5
_RELEASING = ("abandon", "release")
"""Settlements that make a message available again."""


class _Unavailable(Exception):
    """A partition did not answer (dead, restarting, or too slow)."""


@dataclass
class _ReceiverState:
    cache: deque[tuple[int, dict[str, Any]]] = field(default_factory=deque)
    entity: str = ""
    subq: int = MAIN
    last_used: float = field(default_factory=time.monotonic)


class Gateway:
    """Gateway logic over partition handles; `GatewayActor` is its Ray shell."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.config = config
        self.sku = get_sku(config.sku)
        self.count = config.partition_count
        self._handles: list[Any] = [None] * self.count
        self.health = PartitionHealth(self.count)
        self._definitions: dict[str, tuple[float, dict[str, Any]]] = {}
        self._spread = itertools.count(random.randrange(self.count))
        self._hints: dict[tuple[str, int, str | None], dict[int, bool]] = {}
        self._watches: dict[tuple[Any, ...], asyncio.Task[bool]] = {}
        self._receivers: dict[str, _ReceiverState] = {}

    # ------------------------------------------------------------------ partition calls

    def _partition(self, index: int, recreate: bool = False) -> Any:
        if recreate or self._handles[index] is None:
            self._handles[index] = partition_actor(self.config, index)
        return self._handles[index]

    async def _call(self, index: int, operation: str, *args: Any, timeout: float = ATTEMPT_TIMEOUT_S) -> Any:
        """One call to a partition; engine errors pass through, failures become `_Unavailable`."""
        ref = self._partition(index).run.remote(operation, *args)
        return await self._await(index, ref, timeout)

    async def _await(self, index: int, ref: Any, timeout: float) -> Any:
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=max(timeout, 0.001))
        except RayTaskError as exc:
            self.health.succeeded(index)
            raise unwrap_remote_error(exc) from None
        except ActorDiedError as exc:
            self.health.failed(index, time.monotonic())
            self._partition(index, recreate=True)
            raise _Unavailable(str(exc)) from None
        except (ActorUnavailableError, RayActorError, GetTimeoutError, asyncio.TimeoutError) as exc:
            self.health.failed(index, time.monotonic())
            ray.cancel(ref)
            raise _Unavailable(type(exc).__name__) from None
        self.health.succeeded(index)
        return result

    async def _keyed(self, index: int, operation: str, *args: Any, deadline: float, entity: str | None = None) -> Any:
        """Call partition `index` and retry it with back-off until `deadline`; never another partition."""
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            try:
                return await self._call(index, operation, *args, timeout=min(remaining, ATTEMPT_TIMEOUT_S))
            except _Unavailable as exc:
                if time.monotonic() + delay >= deadline:
                    raise PartitionUnavailableError(
                        f"partition {index} of namespace {self.config.name!r} did not answer in time ({exc}); "
                        "the operation needs that partition: retry later or with a longer timeout",
                        entity=entity, partition=index) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _everywhere(self, operation: str, *args: Any, deadline: float, entity: str | None = None) -> list[Any]:
        """Run an operation on every partition (management), each retried until `deadline`."""
        return list(await asyncio.gather(*(self._keyed(k, operation, *args, deadline=deadline, entity=entity)
                                            for k in range(self.count))))

    async def _any(self, operation: str, *args: Any, timeout: float = 30.0) -> Any:
        """Run a read-only operation on the first partition that answers."""
        deadline = time.monotonic() + timeout
        while True:
            for k in self.health.order(list(range(self.count)), time.monotonic()):
                try:
                    return await self._call(k, operation, *args, timeout=min(ATTEMPT_TIMEOUT_S, deadline - time.monotonic()))
                except _Unavailable:
                    if time.monotonic() >= deadline:
                        break
            if time.monotonic() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of namespace {self.config.name!r} answered; retry when the namespace is back")
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ entities

    async def definition(self, name: str, fresh: bool = False) -> dict[str, Any]:
        """An entity's definition, cached for a short while."""
        key = name.lower()
        cached = self._definitions.get(key)
        if cached is not None and not fresh and cached[0] > time.monotonic():
            return cached[1]
        try:
            definition = await self._any("get_entity", name)
        except MessagingEntityNotFoundError:
            self._definitions.pop(key, None)
            raise
        self._definitions[key] = (time.monotonic() + DEFINITION_TTL_S, definition)
        return definition

    def _hosts(self, definition: dict[str, Any]) -> list[int]:
        if definition["options"].get("enable_partitioning"):
            return list(range(self.count))
        return [home_partition(definition["name"], self.count)]

    def _seq_partition(self, definition: dict[str, Any], sequence_number: int) -> int:
        if definition["options"].get("enable_partitioning"):
            index = partition_of(sequence_number)
            if not 0 <= index < self.count:
                raise MessagingEntityNotFoundError(
                    f"sequence number {sequence_number} names partition {index}, which does not exist",
                    entity=definition["name"])
            return index
        return home_partition(definition["name"], self.count)

    async def create_entity(self, kind: str, name: str, options: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Create a queue on every partition, after the tier, quota and uniqueness checks."""
        options = normalize_queue_options(options)
        self._check_features(name, options)
        if self.sku.all_entities_partitioned:
            options["enable_partitioning"] = True
        existing = await self._any("list_entities")
        clash = next((d for d in existing if d["name"].lower() == name.lower()), None)
        if clash is not None:
            raise MessagingEntityAlreadyExistsError(
                f"{clash['kind']} {clash['name']!r} already exists; names are unique regardless of case", entity=name)
        if len(existing) >= MAX_ENTITIES:
            raise QuotaExceededError(f"namespace {self.config.name!r} already holds {MAX_ENTITIES} queues and topics; "
                                     "delete some before creating more", entity=name)
        quota = self.sku.partitioned_entity_quota
        if options["enable_partitioning"] and quota is not None:
            partitioned = sum(1 for d in existing if d["options"].get("enable_partitioning"))
            if partitioned >= quota:
                raise QuotaExceededError(
                    f"namespace {self.config.name!r} already holds {quota} partitioned queues and topics, the "
                    f"{self.sku.name} tier's limit; create {name!r} without enable_partitioning or delete one",
                    entity=name)
        for target in (options["forward_to"], options["forward_dead_lettered_messages_to"]):
            if target is not None:
                raise InvalidOperationError(
                    f"auto-forwarding (to {target!r}) is not available in this version; create {name!r} without it",
                    entity=name)
        now = time.time()
        definition = {"name": name, "kind": kind, "options": options, "incarnation": uuid.uuid4().hex,
                      "created_at": now, "updated_at": now}
        await self._everywhere("create_entity", definition, deadline=time.monotonic() + timeout, entity=name)
        self._definitions[name.lower()] = (time.monotonic() + DEFINITION_TTL_S, definition)
        return definition

    def _check_features(self, name: str, options: dict[str, Any]) -> None:
        if options["requires_session"]:
            self.sku.require("sessions", name)
        if options["requires_duplicate_detection"]:
            self.sku.require("duplicate detection", name)
        if options["forward_to"] or options["forward_dead_lettered_messages_to"]:
            self.sku.require("auto-forwarding", name)

    async def update_entity(self, name: str, changes: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Change an entity's settings on every partition."""
        current = await self.definition(name, fresh=True)
        for key in IMMUTABLE_QUEUE_OPTIONS:
            if key in changes and changes[key] != current["options"][key]:
                raise InvalidOperationError(
                    f"{key} of {current['name']!r} cannot change after creation; create a new entity instead",
                    entity=name)
        options = normalize_queue_options(changes, base=current["options"])
        self._check_features(name, options)
        for target in (options["forward_to"], options["forward_dead_lettered_messages_to"]):
            if target is not None:
                raise InvalidOperationError(
                    f"auto-forwarding (to {target!r}) is not available in this version", entity=name)
        definition = {**current, "options": options, "updated_at": time.time()}
        await self._everywhere("update_entity", definition, deadline=time.monotonic() + timeout, entity=name)
        self._definitions[name.lower()] = (time.monotonic() + DEFINITION_TTL_S, definition)
        return definition

    async def delete_entity(self, name: str, timeout: float) -> None:
        """Delete an entity and its messages on every partition."""
        await self.definition(name, fresh=True)
        await self._everywhere("delete_entity", name, deadline=time.monotonic() + timeout, entity=name)
        self._definitions.pop(name.lower(), None)

    async def list_entities(self, kind: str) -> list[dict[str, Any]]:
        """Every entity of one kind, in name order."""
        return [d for d in await self._any("list_entities") if d["kind"] == kind]

    async def runtime(self, name: str) -> dict[str, Any]:
        """Per-partition counts (None where a partition did not answer) and the definition."""
        definition = await self.definition(name)
        hosts = self._hosts(definition)

        async def one(k: int) -> Any:
            try:
                return await self._call(k, "runtime", name)
            except _Unavailable:
                return None

        counts = await asyncio.gather(*(one(k) for k in hosts))
        return {"definition": definition, "partitions": dict(zip(hosts, counts))}

    # ------------------------------------------------------------------ sending

    async def send(self, entity: str, envelopes: list[dict[str, Any]], timeout: float) -> list[int | None]:
        """Route and store messages; returns sequence numbers in order (None for dropped duplicates)."""
        deadline = time.monotonic() + timeout
        definition = await self.definition(entity)
        opts = definition["options"]
        self._check_size(entity, envelopes)
        dedup = bool(opts["requires_duplicate_detection"])
        if opts["requires_session"]:
            missing = [i for i, e in enumerate(envelopes) if e.get("session_id") is None]
            if missing:
                raise InvalidOperationError(
                    f"entity {definition['name']!r} requires sessions: message(s) at {missing[:5]} have no session_id",
                    entity=entity)
        if dedup:
            for env in envelopes:
                if env.get("message_id") is None:
                    raise InvalidOperationError(
                        f"entity {definition['name']!r} has duplicate detection: give every message a message_id",
                        entity=entity)
        partitioned = bool(opts["enable_partitioning"])
        groups: dict[int, list[int]] = {}
        unkeyed: list[int] = []
        for i, env in enumerate(envelopes):
            key = resolve_partition_key(env, duplicate_detection=dedup)
            if not partitioned:
                groups.setdefault(home_partition(definition["name"], self.count), []).append(i)
            elif key is None:
                unkeyed.append(i)
            else:
                groups.setdefault(partition_for_key(key, self.count), []).append(i)
        result: list[int | None] = [None] * len(envelopes)

        async def keyed(k: int, indexes: list[int]) -> None:
            seqs = await self._keyed(k, "send", entity, [envelopes[i] for i in indexes], deadline=deadline, entity=entity)
            for i, seq in zip(indexes, seqs):
                result[i] = seq
            self._hint(definition, MAIN, None, k, True)

        jobs: list[Awaitable[None]] = [keyed(k, idx) for k, idx in groups.items()]
        if unkeyed:
            jobs.append(self._send_spread(definition, [envelopes[i] for i in unkeyed], unkeyed, result, deadline))
        await asyncio.gather(*jobs)
        return result

    async def _send_spread(self, definition: dict[str, Any], batch: list[dict[str, Any]], indexes: list[int],
                           result: list[int | None], deadline: float) -> None:
        """Send an unkeyed batch to one partition, moving to another when one is unavailable."""
        start = next(self._spread) % self.count
        order = self.health.order([(start + j) % self.count for j in range(self.count)], time.monotonic())
        name = definition["name"]
        while True:
            for k in order:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    seqs = await self._call(k, "send", name, batch, timeout=min(remaining, ATTEMPT_TIMEOUT_S))
                except _Unavailable:
                    continue
                for i, seq in zip(indexes, seqs):
                    result[i] = seq
                self._hint(definition, MAIN, None, k, True)
                return
            if time.monotonic() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of {name!r} accepted the messages before the timeout; retry later", entity=name)
            await asyncio.sleep(0.05)

    def _check_size(self, entity: str, envelopes: Sequence[dict[str, Any]]) -> None:
        limit = self.sku.max_message_bytes
        total = sum(int(e["size"]) for e in envelopes)
        if total > limit:
            raise MessageSizeExceededError(
                f"the messages total {total} bytes; the {self.sku.name} tier allows {limit} bytes per message and "
                "per batch: split them into smaller batches", entity=entity)

    async def cancel_scheduled(self, entity: str, sequence_numbers: list[int], timeout: float) -> None:
        """Cancel scheduled messages on the partitions that hold them."""
        deadline = time.monotonic() + timeout
        definition = await self.definition(entity)
        groups: dict[int, list[int]] = {}
        for seq in sequence_numbers:
            groups.setdefault(self._seq_partition(definition, seq), []).append(seq)
        await asyncio.gather(*(self._keyed(k, "cancel_scheduled", entity, seqs, deadline=deadline, entity=entity)
                               for k, seqs in groups.items()))

    # ------------------------------------------------------------------ receiving

    def _hint(self, definition: dict[str, Any], subq: int, session_id: str | None, k: int, value: bool) -> None:
        self._hints.setdefault((definition["name"].lower(), subq, session_id), {})[k] = value

    async def receive(self, receiver_id: str, entity: str, subq: int, mode: str, session: dict[str, Any] | None,
                      max_count: int, max_wait: float, prefetch: int, settlements: list[list[Any]]) -> dict[str, Any]:
        """Apply the settlements the call carries, then return up to `max_count` messages: from the
        receiver's cache, then from partitions with messages, waiting up to `max_wait` seconds for
        the first one to arrive. Returns `{"messages": [...], "settled": [one result per settlement]}`.

        Settlements for the partition that serves the receive travel in the same partition call;
        the others are sent in parallel with it.
        """
        deadline = time.monotonic() + max_wait
        definition = await self.definition(entity)
        state = self._receiver(receiver_id, entity, subq)
        out = self._from_cache(state, max_count)
        session_args = None if session is None else (session["session_id"], session["lock_token"])
        session_id = None if session is None else session["session_id"]
        hosts = [session["partition"]] if session is not None else self._hosts(definition)
        hints = self._hints.setdefault((definition["name"].lower(), subq, session_id), {})
        settled: list[Any] = [None] * len(settlements)
        pending = self._settlement_groups(definition, session, settlements)
        background: list[asyncio.Future[None]] = []
        probed = False
        while len(out) < max_count:
            now = time.monotonic()
            ready = [k for k in hosts if hints.get(k) and self.health.available(k, now)]
            carried = [k for k in ready if k in pending]
            k: int | None = None
            if carried:
                k = carried[0]
            elif ready:
                k = ready[next(self._spread) % len(ready)]
            background.extend(self._settle_groups(definition, subq, session, settlements, pending, settled, keep=k))
            if k is None:
                await asyncio.gather(*background)
                background.clear()
                remaining = deadline - time.monotonic()
                if remaining <= 0 and probed:
                    break
                probed = True
                if not await self._wait_any(definition, subq, session_id, False, hosts, max(remaining, 0.0)):
                    if time.monotonic() >= deadline:
                        break
                continue
            need = max_count - len(out)
            extra = max(0, prefetch - len(state.cache)) if mode == PEEK_LOCK else 0
            calls: list[tuple[str, tuple[Any, ...]]] = []
            carried_indexes = pending.pop(k, [])
            if carried_indexes:
                calls.append(("settle", (entity, subq, [settlements[i] for i in carried_indexes], session_args)))
            seen = 0 if session is None else max([int(session.get("seen", 0))]
                                                  + [r["sequence_number"] for _, r in state.cache])
            calls.append(("receive", (entity, subq, need + extra, mode, session_args, seen)))
            try:
                replies = await self._await(k, self._partition(k).run_batch.remote(calls), ATTEMPT_TIMEOUT_S)
            except _Unavailable:
                hints[k] = False
                if carried_indexes:
                    pending[k] = carried_indexes
                continue
            if carried_indexes:
                for i, result in zip(carried_indexes, replies[0]):
                    settled[i] = result
            reply = replies[-1]
            if any(settlements[i][0] in _RELEASING for i in carried_indexes):
                reply["more"] = True
            hints[k] = reply["more"]
            records = [(k, r) for r in reply["messages"]]
            out.extend(records[:need])
            state.cache.extend(records[need:])
            if out:
                break
        background.extend(self._settle_groups(definition, subq, session, settlements, pending, settled, keep=None))
        await asyncio.gather(*background)
        state.last_used = time.monotonic()
        return {"messages": [dict(r, partition=k) for k, r in out], "settled": settled}

    def _settlement_groups(self, definition: dict[str, Any], session: dict[str, Any] | None,
                           ops: list[list[Any]]) -> dict[int, list[int]]:
        """Settlement indexes grouped by the partition that holds each message."""
        groups: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            k = session["partition"] if session is not None else self._seq_partition(definition, int(op[1]))
            groups.setdefault(k, []).append(i)
        return groups

    def _settle_groups(self, definition: dict[str, Any], subq: int, session: dict[str, Any] | None,
                       ops: list[list[Any]], pending: dict[int, list[int]], results: list[Any],
                       keep: int | None) -> list[asyncio.Future[None]]:
        """Start settling every pending group except `keep`'s; each op's result lands in `results`."""
        session_args = None if session is None else (session["session_id"], session["lock_token"])
        name = definition["name"]
        deadline = time.monotonic() + 60.0

        async def apply(k: int, indexes: list[int]) -> None:
            try:
                replies = await self._keyed(k, "settle", name, subq, [ops[i] for i in indexes], session_args,
                                            deadline=deadline, entity=name)
            except Exception as exc:  # noqa: BLE001 - each op reports what stopped it
                replies = [exc] * len(indexes)
            for i, reply in zip(indexes, replies):
                results[i] = reply
            if any(ops[i][0] in _RELEASING for i in indexes):
                self._hint(definition, subq, None if session is None else session["session_id"], k, True)

        started = [asyncio.ensure_future(apply(k, pending.pop(k))) for k in [k for k in pending if k != keep]]
        return started

    def _receiver(self, receiver_id: str, entity: str, subq: int) -> _ReceiverState:
        state = self._receivers.get(receiver_id)
        if state is None:
            state = self._receivers[receiver_id] = _ReceiverState(entity=entity, subq=subq)
        return state

    @staticmethod
    def _from_cache(state: _ReceiverState, max_count: int) -> list[tuple[int, dict[str, Any]]]:
        out = []
        wall = time.time()
        while state.cache and len(out) < max_count:
            k, record = state.cache.popleft()
            if (record.get("locked_until") or 0) > wall + LOCK_MARGIN_S:
                out.append((k, record))
        return out

    async def _wait_any(self, definition: dict[str, Any], subq: int, session_id: str | None, free_session: bool,
                        hosts: list[int], timeout: float) -> bool:
        """Wait until some host partition has messages (shared watches, no polling); set hints.

        Partitions in back-off are not watched; a watch that ends without news leaves the others
        waiting, so a failing partition cannot turn the wait into a busy loop.
        """
        name = definition["name"]
        key = name.lower()
        watch_for = min(max(timeout, 0.0), WATCH_TIMEOUT_S)
        give_up = time.monotonic() + watch_for + 1.0
        now = time.monotonic()
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
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                return False
            done, waiting = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                return True
        await asyncio.sleep(0.05)
        return False

    async def _watch(self, entity: str, subq: int, session_id: str | None, free_session: bool, k: int,
                     timeout: float) -> bool:
        ref = self._partition(k).wait_available.remote(entity, subq, session_id, free_session, timeout)
        try:
            available = bool(await self._await(k, ref, timeout + ATTEMPT_TIMEOUT_S))
        except _Unavailable:
            return False
        if not free_session:
            self._hints.setdefault((entity.lower(), subq, session_id), {})[k] = available
        return available

    async def settle(self, entity: str, subq: int, session: dict[str, Any] | None, ops: list[list[Any]],
                     timeout: float) -> list[Any]:
        """Apply settlements on the partitions holding the messages; one result per op, in order."""
        deadline = time.monotonic() + timeout
        definition = await self.definition(entity)
        session_args = None if session is None else (session["session_id"], session["lock_token"])
        groups = self._settlement_groups(definition, session, ops)
        results: list[Any] = [None] * len(ops)

        async def apply(k: int, indexes: list[int]) -> None:
            replies = await self._keyed(k, "settle", entity, subq, [ops[i] for i in indexes], session_args,
                                        deadline=deadline, entity=entity)
            for i, reply in zip(indexes, replies):
                results[i] = reply
            if any(ops[i][0] in _RELEASING for i in indexes):
                self._hint(definition, subq, None if session is None else session["session_id"], k, True)

        await asyncio.gather(*(apply(k, idx) for k, idx in groups.items()))
        return results

    async def close_receiver(self, receiver_id: str) -> int:
        """Release the messages a receiver holds but never handed out (no delivery counted)."""
        state = self._receivers.pop(receiver_id, None)
        if state is None or not state.cache:
            return 0
        ops: dict[int, list[list[Any]]] = {}
        for k, record in state.cache:
            ops.setdefault(k, []).append(["release", record["sequence_number"], record["lock_token"]])
        deadline = time.monotonic() + 30.0
        await asyncio.gather(*(self._keyed(k, "settle", state.entity, state.subq, o, None, deadline=deadline)
                               for k, o in ops.items()), return_exceptions=True)
        return len(state.cache)

    async def sweep_idle_receivers(self) -> None:
        """Release caches of receivers whose clients went away without closing them."""
        cutoff = time.monotonic() - RECEIVER_IDLE_S
        for receiver_id in [r for r, s in self._receivers.items() if s.last_used < cutoff]:
            await self.close_receiver(receiver_id)

    async def receive_deferred(self, entity: str, subq: int, mode: str, session: dict[str, Any] | None,
                               sequence_numbers: list[int], timeout: float) -> list[dict[str, Any]]:
        """Deferred messages by sequence number, from the partitions that hold them."""
        deadline = time.monotonic() + timeout
        definition = await self.definition(entity)
        session_args = None if session is None else (session["session_id"], session["lock_token"])
        groups: dict[int, list[int]] = {}
        for seq in sequence_numbers:
            k = session["partition"] if session is not None else self._seq_partition(definition, seq)
            groups.setdefault(k, []).append(seq)
        replies = await asyncio.gather(*(self._keyed(k, "receive_deferred", entity, subq, seqs, mode, session_args,
                                                     deadline=deadline, entity=entity) for k, seqs in groups.items()))
        by_seq = {r["sequence_number"]: dict(r, partition=k) for k, rs in zip(groups, replies) for r in rs}
        return [by_seq[s] for s in dict.fromkeys(sequence_numbers) if s in by_seq]

    async def peek(self, entity: str, subq: int, session: dict[str, Any] | None, from_sequence: int,
                   max_count: int) -> list[dict[str, Any]]:
        """Browse messages in sequence-number order from `from_sequence`, across partitions in index order
        (all partitions are asked at once)."""
        definition = await self.definition(entity)
        if session is not None:
            hosts = [session["partition"]]
        elif definition["options"].get("enable_partitioning"):
            hosts = list(range(min(partition_of(from_sequence), self.count), self.count))
        else:
            hosts = self._hosts(definition)
        deadline = time.monotonic() + 30.0
        session_id = None if session is None else session["session_id"]
        pages = await asyncio.gather(*(
            self._keyed(k, "peek", entity, subq, from_sequence if k == hosts[0] else (k << 48), max_count, session_id,
                        deadline=deadline, entity=entity) for k in hosts))
        return sorted((r for page in pages for r in page), key=lambda r: r["sequence_number"])[:max_count]

    # ------------------------------------------------------------------ sessions

    async def accept_session(self, entity: str, session_id: str | None, max_wait: float) -> dict[str, Any]:
        """Lock a named session, or the next available one (waiting up to `max_wait`)."""
        deadline = time.monotonic() + max_wait
        definition = await self.definition(entity)
        if not definition["options"]["requires_session"]:
            raise InvalidOperationError(
                f"entity {definition['name']!r} does not require sessions; open a receiver without session_id",
                entity=entity)
        partitioned = definition["options"].get("enable_partitioning")
        if session_id is not None:
            k = partition_for_key(session_id, self.count) if partitioned else self._hosts(definition)[0]
            lock = await self._keyed(k, "accept_session", entity, session_id,
                                     deadline=max(deadline, time.monotonic() + 30.0), entity=entity)
            return dict(lock, partition=k)
        hosts = self._hosts(definition)
        probed = False
        while True:
            start = next(self._spread)
            for j in range(len(hosts)):
                k = hosts[(start + j) % len(hosts)]
                if not self.health.available(k, time.monotonic()):
                    continue
                try:
                    lock = await self._call(k, "accept_session", entity, None)
                except _Unavailable:
                    continue
                if lock is not None:
                    return dict(lock, partition=k)
            remaining = deadline - time.monotonic()
            if remaining <= 0 and probed:
                raise OperationTimeoutError(
                    f"no session of {definition['name']!r} became available within {max_wait:g} s; "
                    "retry, or pass a longer max_wait_time", entity=entity)
            probed = True
            await self._wait_any(definition, MAIN, None, True, hosts, max(remaining, 0.0))

    async def session_call(self, entity: str, session: dict[str, Any], operation: str, *args: Any) -> Any:
        """Renew, release, or get/set the state of a held session."""
        deadline = time.monotonic() + 30.0
        return await self._keyed(session["partition"], operation, entity, session["session_id"],
                                 session["lock_token"], *args, deadline=deadline, entity=entity)


@ray.remote
class GatewayActor:
    """Gateway `i` of a namespace (a Ray shell over `Gateway`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.gateway = Gateway(NamespaceConfig(**config))
        self._sweeper: asyncio.Task[None] | None = None

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(30.0)
            await self.gateway.sweep_idle_receivers()

    async def config(self) -> dict[str, Any]:
        """The namespace configuration."""
        return self.gateway.config.to_dict()

    async def call(self, operation: str, *args: Any) -> Any:
        """Invoke a gateway operation by name."""
        self._ensure_sweeper()
        method: Callable[..., Awaitable[Any]] | None = getattr(self.gateway, operation, None)
        if operation.startswith("_") or method is None:
            raise AttributeError(f"gateway has no operation {operation!r}")
        return await method(*args)

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()
