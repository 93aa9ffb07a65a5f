"""A `PartitionChannel` over real engines in this process: routing policy tested without Ray.

Partitions can be taken down (they then raise `PartitionUnavailable`, as a dead or restarting
actor does; as one that may have run the call, or, when `unreachable`, as one that refused it
unsent) and brought back; every call is counted (by operation name); requests run through the
partition operation table, and waits wake when one may have made messages available, as the
partition actor's do.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Sequence

from ray_broker.clock import ManualClock
from ray_broker.engine.operations import operation
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.routing.channel import PartitionUnavailable, Request
from ray_broker.wire import PartitionRequest, Receive, SessionRef


class StubChannel:
    """Engines 0..N-1 on a shared manual clock, reached as a router reaches partitions."""

    def __init__(self, partition_count: int, clock: ManualClock) -> None:
        self.partition_count = partition_count
        self.engines = [PartitionEngine(k, partition_count, Store(None, "memory"), clock)
                        for k in range(partition_count)]
        self.down: set[int] = set()
        self.unreachable: set[int] = set()
        """Partitions that refuse every call before it is sent (as Ray does while an actor
        restarts or has nowhere to run)."""
        self.lost_replies: set[int] = set()
        """Partitions whose next call runs but whose reply is lost (as when a partition dies after
        its commit)."""
        self.calls: Counter[tuple[int, str]] = Counter()
        self.round_trips: Counter[int] = Counter()
        self._events = [asyncio.Event() for _ in range(partition_count)]
        self._ended: set[tuple[int, str]] = set()
        self._waiting: Counter[tuple[int, str]] = Counter()

    def _check(self, index: int) -> None:
        if index in self.unreachable:
            raise PartitionUnavailable(index, "refused unsent (stub)", reached=False)
        if index in self.down:
            raise PartitionUnavailable(index, "down (stub)")

    def _notify(self, index: int) -> None:
        event, self._events[index] = self._events[index], asyncio.Event()
        event.set()

    async def call(self, index: int, calls: Sequence[PartitionRequest], timeout: float) -> list[Any]:
        await asyncio.sleep(0)
        return self._run(index, calls)

    def call_now(self, requests: Sequence[Request], timeout: float) -> list[list[Any] | BaseException]:
        outcomes: list[list[Any] | BaseException] = []
        for index, calls in requests:
            try:
                outcomes.append(self._run(index, calls))
            except Exception as exc:  # noqa: BLE001 - each request reports its own outcome, as the Ray channel's
                outcomes.append(exc)
        return outcomes

    def _run(self, index: int, calls: Sequence[PartitionRequest]) -> list[Any]:
        self._check(index)
        self.round_trips[index] += 1
        results = []
        for request in calls:
            self.calls[(index, request.OPERATION)] += 1
            how = operation(request)
            results.append(how.run(self.engines[index], request))
            if how.wakes:
                self._notify(index)
        if index in self.lost_replies:
            self.lost_replies.discard(index)
            raise PartitionUnavailable(index, "reply lost (stub)")
        return results

    async def _wait(self, index: int, check: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._check(index)
            event = self._events[index]
            result = check()
            if result is not None or loop.time() >= deadline:
                return result
            try:
                await asyncio.wait_for(event.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                pass

    async def wait_available(self, index: int, entity: str, subq: int, session_id: str | None, free_session: bool,
                             timeout: float) -> bool:
        engine = self.engines[index]
        return await self._wait(index, lambda: engine.has_available(entity, subq, session_id, free_session) or None,
                                timeout) is not None

    async def receive_waiting(self, index: int, receiver_id: str, entity: str, subq: int, max_count: int, mode: str,
                              session: SessionRef | None, seen: int | None, timeout: float) -> dict[str, Any]:
        engine = self.engines[index]
        request = Receive(entity, subq, max_count, mode, session, seen)

        def ready() -> dict[str, Any] | None:
            if (index, receiver_id) in self._ended:
                return {"messages": [], "more": False}
            reply: dict[str, Any] = operation(request).run(engine, request)
            return reply if reply["messages"] else None

        self.calls[(index, "receive_waiting")] += 1
        key = (index, receiver_id)
        self._waiting[key] += 1
        try:
            return await self._wait(index, ready, timeout) or {"messages": [], "more": False}
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                self._ended.discard(key)

    async def end_waits(self, index: int, receiver_id: str) -> None:
        """End the receiver's waits under way here (as the actor does: later ones wait again)."""
        if self._waiting[(index, receiver_id)]:
            self._ended.add((index, receiver_id))
            self._notify(index)
