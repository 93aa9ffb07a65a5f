"""The partition-call interface a router talks to; imports no Ray.

A channel runs partition requests (`ray_broker.wire`) on partition `index` and reports the outcome in two kinds: an
engine error (a typed `ServiceBusError`, raised as it is: the partition answered) or
`PartitionUnavailable` (it did not answer: dead, restarting, or too slow). The Ray channel
(`routing.ray_channel`) calls partition actors; the stub channel of the tests calls engines in
this process.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from ..wire import PartitionRequest, SessionRef

Request = tuple[int, Sequence[PartitionRequest]]
"""One round trip to a partition: its index and the requests it runs, in order."""


class PartitionUnavailable(Exception):
    """A partition did not answer (dead, restarting, or too slow).

    `reached` is True when the call may have run on the partition before it failed (the actor
    died or its reply was lost or late), False when it certainly did not (it was refused before
    it was sent: the actor is restarting, cannot be scheduled, or was already known dead). A
    tagged batch that failed unreached cannot have been stored there, so it may go elsewhere at
    once.
    """

    def __init__(self, index: int, reason: str, *, reached: bool = True) -> None:
        super().__init__(f"partition {index}: {reason}")
        self.index = index
        self.reason = reason
        self.reached = reached


class PartitionChannel(Protocol):
    """How a router reaches partitions."""

    partition_count: int

    async def call(self, index: int, calls: Sequence[PartitionRequest], timeout: float) -> list[Any]:
        """Run `calls` on partition `index` in one round trip, in order; one result per call.

        Raises the first engine error, or `PartitionUnavailable` when no answer came in `timeout`.
        """
        ...

    def call_now(self, requests: Sequence[Request], timeout: float) -> list[list[Any] | BaseException]:
        """Run several round trips at once from the caller's thread (no event loop), blocking until
        all answered or `timeout` passed; for each, its results or the error it met (an engine
        error, or `PartitionUnavailable`). Nothing is retried and no dead partition replaced:
        `call` does that."""
        ...

    async def wait_available(self, index: int, entity: str, subq: int, session_id: str | None, free_session: bool,
                             timeout: float) -> bool:
        """Wait until a receive on partition `index` could get a message (True), or `timeout` passes (False)."""
        ...

    async def receive_waiting(self, index: int, receiver_id: str, entity: str, subq: int, max_count: int, mode: str,
                              session: SessionRef | None, seen: int | None,
                              timeout: float) -> dict[str, Any]:
        """A receive on partition `index` that waits up to `timeout` for messages and returns them
        locked for `receiver_id` (`{"messages": [...], "more": bool, "backlog": int}`; empty after the timeout)."""
        ...

    async def end_waits(self, index: int, receiver_id: str) -> None:
        """End `receiver_id`'s `receive_waiting` on partition `index` now."""
        ...
