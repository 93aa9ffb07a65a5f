"""Reaching partitions: one round trip, a keyed call retried on its partition until its deadline,
an operation on every partition, a read from whichever partition answers; each outcome recorded
in the partitions' health. All I/O goes through a `PartitionChannel`; time comes from `clock`
(monotonic seconds) and back-offs are waited out with `sleep` (both injectable for tests).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Sequence

from ..errors import PartitionUnavailableError
from ..wire import PartitionRequest
from .channel import PartitionChannel, PartitionUnavailable
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
        except PartitionUnavailable:
            self.health.failed(index, self.clock())
            raise
        self.health.succeeded(index)
        return results

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
