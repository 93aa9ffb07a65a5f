"""The Ray implementation of `PartitionChannel`: partition actors called through their handles.

Where the handles come from is a `HandleSource`: the gateway creates partition actors itself
(and recreates one Ray will not restart); a client takes them from the gateway's routing table
and asks the gateway again when one has died.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import ray
from ray.exceptions import (
    ActorDiedError,
    ActorPlacementGroupRemoved,
    ActorUnavailableError,
    ActorUnschedulableError,
    RayError,
    RayTaskError,
)

from ..callers import caller_token
from ..errors import NotLeaderError, unwrap_remote_error
from ..replies import RoutingTable
from ..wire import PartitionRequest, SessionRef, encode
from .channel import PartitionUnavailable, Request

logger = logging.getLogger("ray_broker.routing")
REFRESH_EVERY_S = 0.5
"""How often at most a client fetches the routing table again because a replicated partition did
not answer."""
GONE_FOR_GOOD: tuple[type[RayError], ...] = (ActorDiedError, ActorUnschedulableError, ActorPlacementGroupRemoved)
"""Ray's errors for an actor that is dead and that Ray will not restart: its callers have it made again."""
UNPLACEABLE: tuple[type[RayError], ...] = (ActorUnschedulableError, ActorPlacementGroupRemoved)
"""Ray's errors for an actor that has nowhere to run: a call to it is never sent."""
REFUSED_RESTARTING = "The actor is restarting."
"""How Ray's `ActorUnavailableError` says it refused a call, unsent, because the actor is
restarting (an actor with `max_task_retries=0`, as partitions are)."""
NEVER_STARTED = "The actor never ran"
"""How Ray's `ActorDiedError` says the actor was cancelled before it ever started."""
TABLE_TIMEOUT_S = 60.0
"""How long a caller gives a gateway to answer with the routing table."""
PROBE_TIMEOUT_S = 5.0
"""How long an actor has to answer `pid` (a call that waits on nothing) to count as answering."""


def never_sent(exc: BaseException) -> bool:
    """Whether Ray's error (as the caller got it, not raised inside the actor) says the call was
    refused before it was sent, so it cannot have run: the actor has nowhere to run, is
    restarting, or never started."""
    if isinstance(exc, UNPLACEABLE):
        return True
    if isinstance(exc, ActorUnavailableError):
        return REFUSED_RESTARTING in str(exc)
    return isinstance(exc, ActorDiedError) and NEVER_STARTED in str(exc)


def classify_ray_failure(index: int, exc: BaseException) -> BaseException:
    """What a failed partition call means to a router: the engine's typed error when the partition
    answered with one, else `PartitionUnavailable` for any of Ray's errors (died, restarting,
    unschedulable, its node or the caller's object lost, timed out, ...), so that no Ray exception
    reaches a caller; it says whether the call may have run (`reached`: not when `never_sent`).
    Any other exception is returned as it is."""
    remote = isinstance(exc, RayTaskError)
    if remote:
        exc = unwrap_remote_error(exc)
    if isinstance(exc, NotLeaderError):
        return PartitionUnavailable(index, type(exc).__name__)
    if isinstance(exc, (RayError, asyncio.TimeoutError)):
        return PartitionUnavailable(index, type(exc).__name__, reached=remote or not never_sent(exc))
    return exc


class GatewayCalls(Protocol):
    """What a `TableHandles` needs of a gateway: its operations, awaited (`ray_gateway.GatewayCaller`,
    the one caller of a gateway, which imports this module)."""

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation."""
        ...


class TableHandles:
    """Partition handles from a gateway's routing table (a `HandleSource`), for callers that do
    not create partitions: clients, partitions forwarding to others, and gateways that take the
    table from the one deciding leadership."""

    def __init__(self, gateway: GatewayCalls, clock: Callable[[], float] = time.monotonic) -> None:
        self._gateway = gateway
        self._table: RoutingTable | None = None
        self._clock = clock
        self._refreshed = -REFRESH_EVERY_S
        self._looking: dict[int, asyncio.Future[None]] = {}
        """Partitions that let a call time out, being looked into (`unanswered`)."""

    @property
    def loaded(self) -> bool:
        """Whether the routing table is here."""
        return self._table is not None

    async def load(self) -> None:
        """Fetch the routing table unless it is here already."""
        if self._table is None:
            await self.reload()

    async def reload(self) -> None:
        """Fetch the routing table now."""
        await self._take("routing_table")

    async def _take(self, operation: str, *args: Any) -> None:
        """Run gateway `operation`, which answers with the routing table, and keep the table."""
        self._table = RoutingTable.decode(await self._gateway.call_async(operation, *args, timeout=TABLE_TIMEOUT_S))

    def handle(self, index: int) -> Any:
        """Partition `index`'s handle, as of the last table (`PartitionUnavailable` while a
        replicated partition has no leader)."""
        assert self._table is not None, "the routing table is loaded before the first partition call"
        handle = self._table.handles[index]
        if handle is None:
            raise PartitionUnavailable(index, "no leader", reached=False)
        return handle

    async def replace(self, index: int) -> None:
        """Report partition `index` dead for good; the gateway recreates it and sends the new table."""
        assert self._table is not None
        await self._take("partition_failed", index, self._table.epochs[index])

    async def refresh(self, index: int) -> None:
        """Partition `index` did not answer: with replicated partitions, fetch the table again (at
        most every `REFRESH_EVERY_S`), since the control plane may have replaced a leader that hangs."""
        now = self._clock()
        if self._table is None or not self._table.replicated or now - self._refreshed < REFRESH_EVERY_S:
            return
        self._refreshed = now
        await self.reload()

    async def unanswered(self, index: int, handle: Any) -> None:
        """A call to partition `index` on `handle` timed out: look into it in the background, so
        that the caller's failure is not held up, once at a time per partition (`_look_into`).
        With replicated partitions the control plane watches leaders itself, and a timeout
        refetches the table (`refresh`)."""
        assert self._table is not None
        if self._table.replicated or index in self._looking:
            return
        looking = self._looking[index] = asyncio.ensure_future(
            self._look_into(index, handle, self._table.epochs[index]))
        looking.add_done_callback(lambda _: self._looking.pop(index, None))

    async def _look_into(self, index: int, handle: Any, epoch: int) -> None:
        """Unless a probe of `handle` answers, tell the gateway, which recreates the partition if it
        answers there (this process's Ray then lost track of the actor), and take its table."""
        if await answers(handle):
            return
        try:
            await self._take("partition_unreachable", index, epoch)
        except Exception:  # noqa: BLE001 - the next call that times out reports it again
            logger.warning("could not report partition %d, which does not answer this process, to the gateway",
                           index, exc_info=True)


async def answers(handle: Any, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the actor behind `handle` answers `pid` within `timeout` (False when Ray reports
    a failure instead)."""
    try:
        await asyncio.wait_for(asyncio.wrap_future(handle.pid.remote().future()), timeout=timeout)
    except (RayError, asyncio.TimeoutError):
        return False
    return True


def actor_identity(handle: Any) -> Any:
    """What tells actors apart across handle objects: a Ray actor handle's actor id (every routing
    table fetch makes new handle objects for the same actors), or the object itself."""
    return getattr(handle, "_actor_id", handle)


@dataclass(frozen=True)
class Sent:
    """A call sent to a partition: the handle it went on, its object ref, and whether that actor
    was already known dead for good when it was sent (Ray then fails the call without sending it,
    so it cannot have run)."""

    handle: Any
    ref: Any
    to_dead: bool


class HandleSource(Protocol):
    """Where a channel gets partition actor handles."""

    def handle(self, index: int) -> Any:
        """The current handle of partition `index`."""
        ...

    async def replace(self, index: int) -> None:
        """Partition `index`'s actor died for good: get (or have someone make) its replacement."""
        ...

    async def refresh(self, index: int) -> None:
        """Partition `index` did not answer in time: look again where it is (if that can change)."""
        ...

    async def unanswered(self, index: int, handle: Any) -> None:
        """A call to partition `index` on `handle` got no answer in time: have it looked at by
        whoever can replace it, if anyone."""
        ...


class RayChannel:
    """Calls partition actors (`run` / `run_batch` / `wait_available`) and classifies failures.

    Args:
        partition_count: how many partitions the namespace has.
        source: where handles come from.
    """

    def __init__(self, partition_count: int, source: HandleSource) -> None:
        self.partition_count = partition_count
        self.source = source
        self._dead: dict[int, Any] = {}
        """Each partition's actor (`actor_identity`) last found dead for good: Ray sends no call on it."""
        self._answered: dict[int, Any] = {}
        """Each partition's actor (`actor_identity`) that last answered a call: it was placed and ran."""

    def _send(self, index: int, submit: Callable[[Any], Any]) -> Sent:
        """Send a call to partition `index` (`submit` makes it on the current handle), noting
        first whether that actor is known dead for good."""
        handle = self.source.handle(index)
        to_dead = self._dead.get(index) == actor_identity(handle)
        return Sent(handle, submit(handle), to_dead)

    def _submit(self, index: int, calls: Sequence[PartitionRequest]) -> Sent:
        """Send `calls` to partition `index`, encoded (`wire.encode`), in one actor call."""
        if len(calls) == 1:
            return self._send(index, lambda handle: handle.run.remote(*encode(calls[0])))
        return self._send(index, lambda handle: handle.run_batch.remote([encode(call) for call in calls]))

    @staticmethod
    def _results(calls: Sequence[PartitionRequest], value: Any) -> list[Any]:
        return [value] if len(calls) == 1 else list(value)

    async def call(self, index: int, calls: Sequence[PartitionRequest], timeout: float) -> list[Any]:
        """Run `calls` on partition `index` in one actor call; engine errors come back typed."""
        return self._results(calls, await self._await(index, self._submit(index, calls), timeout))

    def call_now(self, requests: Sequence[Request], timeout: float) -> list[list[Any] | BaseException]:
        """Run round trips at once with `ray.get` on the caller's thread; each one's results or error."""
        submitted: list[Sent | PartitionUnavailable] = []
        for index, calls in requests:
            try:
                submitted.append(self._submit(index, calls))
            except PartitionUnavailable as unavailable:
                submitted.append(unavailable)
        deadline = time.monotonic() + timeout
        outcomes: list[list[Any] | BaseException] = []
        for (index, calls), sent in zip(requests, submitted):
            if isinstance(sent, PartitionUnavailable):
                outcomes.append(sent)
                continue
            try:
                value = ray.get(sent.ref, timeout=max(deadline - time.monotonic(), 0.001))
                self._answered[index] = actor_identity(sent.handle)
                outcomes.append(self._results(calls, value))
            except RayError as exc:
                outcomes.append(self._failure(index, sent, exc))
        return outcomes

    def _classify(self, index: int, sent: Sent, exc: BaseException) -> BaseException:
        """`classify_ray_failure`, where a call sent on a handle already known dead for good
        never reached the partition, and one that found no place to run on a handle that answered
        before may have: Ray reports the death of an actor that cannot be made again on its lost
        node as unschedulable to the calls that were under way too. A call under way when another
        found the actor dead may have run, however it failed."""
        error = classify_ray_failure(index, exc)
        if not isinstance(error, PartitionUnavailable):
            return error
        if error.reached and sent.to_dead:
            return PartitionUnavailable(index, error.reason, reached=False)
        if not error.reached and isinstance(exc, UNPLACEABLE) and not sent.to_dead \
                and self._answered.get(index) == actor_identity(sent.handle):
            return PartitionUnavailable(index, error.reason, reached=True)
        return error

    def _failure(self, index: int, sent: Sent, exc: BaseException) -> BaseException:
        """The error a failed call stands for (`_classify`); a call that got no answer is cancelled."""
        error = self._classify(index, sent, exc)
        if isinstance(error, PartitionUnavailable):
            ray.cancel(sent.ref)
        return error

    async def wait_available(self, index: int, entity: str, subq: int, session_id: str | None, free_session: bool,
                             timeout: float) -> bool:
        """Wait on partition `index` (it wakes its waiters when a message arrives); False after `timeout`."""
        sent = self._send(index, lambda handle: handle.wait_available.remote(entity, subq, session_id, free_session,
                                                                             timeout))
        return bool(await self._await(index, sent, timeout + 5.0))

    async def receive_waiting(self, index: int, receiver_id: str, entity: str, subq: int, max_count: int, mode: str,
                              session: SessionRef | None, seen: int | None,
                              timeout: float) -> dict[str, Any]:
        """A waiting receive on partition `index`: its reply carries the messages that woke it (to
        this process only while it lives: the call carries its `caller_token`)."""
        sent = self._send(index, lambda handle: handle.receive_waiting.remote(
            receiver_id, entity, subq, max_count, mode, None if session is None else list(session), seen, timeout,
            caller_token()))
        return dict(await self._await(index, sent, timeout + 5.0))

    async def end_waits(self, index: int, receiver_id: str) -> None:
        """End `receiver_id`'s waiting receive on partition `index`."""
        await self._await(index, self._send(index, lambda handle: handle.end_waits.remote(receiver_id)), 5.0)

    async def _await(self, index: int, sent: Sent, timeout: float) -> Any:
        """The result of `sent`, or its failure; an actor found dead for good is remembered as
        dead and replaced, and one that let the call time out is reported (`unanswered`), through
        the handle source."""
        try:
            value = await asyncio.wait_for(asyncio.wrap_future(sent.ref.future()), timeout=max(timeout, 0.001))
        except (RayError, asyncio.TimeoutError) as exc:
            if isinstance(exc, GONE_FOR_GOOD) and not isinstance(exc, RayTaskError):
                error = self._classify(index, sent, exc)
                self._dead[index] = actor_identity(sent.handle)
                await self.source.replace(index)
                raise error from None
            if isinstance(exc, RayTaskError) and isinstance(unwrap_remote_error(exc), NotLeaderError):
                await self.source.replace(index)
                raise self._classify(index, sent, exc) from None
            if isinstance(exc, (asyncio.TimeoutError, ActorUnavailableError)):
                await self.source.refresh(index)
            error = self._failure(index, sent, exc)
            if isinstance(exc, asyncio.TimeoutError):
                await self.source.unanswered(index, sent.handle)
            raise error from None
        self._answered[index] = actor_identity(sent.handle)
        return value
