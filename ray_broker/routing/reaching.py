"""Reaching partitions, the router's one door to them: one round trip (or several at once, on the
loop or from the caller's thread), a keyed call retried on its partition until its deadline, an
operation on every partition, a read from whichever partition answers, a wait for messages;
each outcome recorded in the partitions' health here and nowhere else. All I/O goes through a
`PartitionChannel`; time comes from `clock` (monotonic seconds) and back-offs are waited out
with `sleep` (both injectable for tests).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Sequence

from ..errors import PartitionUnavailableError
from ..wire import Delivered, PartitionRequest, SessionRef, delivered, typed_results
from .channel import PartitionChannel, PartitionUnavailable, Request
from .health import RETRY_BACKOFF, PartitionHealth

ATTEMPT_TIMEOUT_S = 5.0
"""How long one call may take before its partition counts as unavailable."""


class PartitionReach:
    """Calls to the partitions of one namespace, with their health.

    Args:
        name: the namespace's name (for messages).
        channel: how partitions are reached.
        clock: monotonic seconds.
        sleep: how a back-off is waited out.
    """

    def __init__(self, name: str, channel: PartitionChannel,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self.channel = channel
        self.clock = clock
        self.sleep = sleep
        self.count = channel.partition_count
        self.health = PartitionHealth(self.count)

    async def call(self, index: int, calls: Sequence[PartitionRequest],
                   timeout: float = ATTEMPT_TIMEOUT_S) -> list[Any]:
        """One round trip to a partition; engine errors pass through, failures are recorded and raised
        as `PartitionUnavailable`."""
        try:
            results = await self.channel.call(index, calls, min(timeout, ATTEMPT_TIMEOUT_S))
        except Exception as exc:  # an engine error is an answer: only `PartitionUnavailable` is none
            self._record(index, exc)
            raise
        self._record(index, results)
        return typed_results(calls, results)

    def _record(self, index: int, outcome: Any) -> None:
        """Record in the health what a call to partition `index` met: no answer, or an answer (an
        engine error is one)."""
        if isinstance(outcome, PartitionUnavailable):
            self.health.failed(index, self.clock())
        else:
            self.health.succeeded(index)

    async def call_each(self, requests: Sequence[Request],
                        timeout: float = ATTEMPT_TIMEOUT_S) -> list[list[Any] | BaseException]:
        """Several round trips at once on the loop: for each, its results or the error it met (an
        engine error, or `PartitionUnavailable`)."""
        outcomes = await asyncio.gather(*(self.channel.call(k, calls, min(timeout, ATTEMPT_TIMEOUT_S))
                                          for k, calls in requests), return_exceptions=True)
        return self._taken(requests, outcomes)

    def call_now(self, requests: Sequence[Request],
                 timeout: float = ATTEMPT_TIMEOUT_S) -> list[list[Any] | BaseException]:
        """`call_each` from the caller's thread, blocking (the channel's `call_now`): nothing is
        retried and no dead partition replaced."""
        return self._taken(requests, self.channel.call_now(requests, min(timeout, ATTEMPT_TIMEOUT_S)))

    def _taken(self, requests: Sequence[Request],
               outcomes: Sequence[list[Any] | BaseException]) -> list[list[Any] | BaseException]:
        """Round trips' outcomes recorded in the health, their results typed (`wire.typed_results`)."""
        taken: list[list[Any] | BaseException] = []
        for (k, calls), outcome in zip(requests, outcomes):
            self._record(k, outcome)
            taken.append(outcome if isinstance(outcome, BaseException) else typed_results(calls, outcome))
        return taken

    async def wait_available(self, index: int, entity: str, subq: int, session_id: str | None,
                             free_session: bool, timeout: float) -> bool | None:
        """Wait until a receive on partition `index` could get a message (True) or `timeout`
        passes (False); None when the partition did not answer."""
        try:
            available = await self.channel.wait_available(index, entity, subq, session_id, free_session, timeout)
        except PartitionUnavailable as exc:
            self._record(index, exc)
            return None
        self._record(index, available)
        return available

    async def receive_waiting(self, index: int, receiver_id: str, entity: str, subq: int, max_count: int,
                              mode: str, session: SessionRef | None, seen: int | None,
                              timeout: float) -> Delivered | None:
        """A receive on partition `index` that waits up to `timeout` for messages (the channel's
        `receive_waiting`); None when the partition did not answer."""
        try:
            reply = await self.channel.receive_waiting(index, receiver_id, entity, subq, max_count, mode, session,
                                                       seen, timeout)
        except PartitionUnavailable as exc:
            self._record(index, exc)
            return None
        self._record(index, reply)
        return delivered(reply)

    async def end_waits(self, indexes: Sequence[int], receiver_id: str) -> None:
        """End `receiver_id`'s waiting receives on `indexes` now (a partition that does not answer
        ends them itself when they time out)."""
        await asyncio.gather(*(self.channel.end_waits(k, receiver_id) for k in indexes), return_exceptions=True)

    async def call_one(self, index: int, request: PartitionRequest, timeout: float = ATTEMPT_TIMEOUT_S) -> Any:
        """`call` with a single request; returns its result."""
        return (await self.call(index, [request], timeout))[0]

    async def keyed(self, index: int, request: PartitionRequest, *, deadline: float, entity: str | None = None) -> Any:
        """Call partition `index`, retrying it with back-off until `deadline`; never another partition."""
        return (await self.keyed_calls(index, [request], deadline=deadline, entity=entity))[0]

    async def keyed_calls(self, index: int, calls: Sequence[PartitionRequest], *, deadline: float,
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

    async def everywhere(self, request: PartitionRequest, *, deadline: float, entity: str | None = None) -> list[Any]:
        """Run a request on every partition (management), each retried until `deadline`."""
        return list(await asyncio.gather(*(self.keyed(k, request, deadline=deadline, entity=entity)
                                            for k in range(self.count))))

    async def any(self, request: PartitionRequest, timeout: float = 30.0) -> Any:
        """Run a read-only request on the first partition that answers."""
        deadline = self.clock() + timeout
        while True:
            for k in self.health.order(list(range(self.count)), self.clock()):
                try:
                    return await self.call_one(k, request, timeout=deadline - self.clock())
                except PartitionUnavailable:
                    if self.clock() >= deadline:
                        break
            if self.clock() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of namespace {self.name!r} answered; retry when the namespace is back")
            await self.sleep(0.1)
