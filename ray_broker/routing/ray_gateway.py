"""Calling a gateway over Ray: `GatewayCaller`, the one caller of a gateway, used by clients
(`client.link.GatewayLink`), by partitions' forwarders and by gateways that take the routing table
from the one that decides leadership. What a failure means and what follows is `gateway_retry`'s
to decide; this module reads Ray's errors for it and makes the Ray calls.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from ..config import NamespaceConfig
from ..errors import unwrap_remote_error
from .gateway_retry import Failure, GatewayRetry
from .ray_channel import GONE_FOR_GOOD

WAITING_OPERATIONS = frozenset({"receive"})
"""Gateway operations that may wait long on the caller's behalf. They carry the caller's token (the
gateway hands nothing to a caller that died meanwhile), and a client that stops waiting for one
(interrupted or cancelled) ends it at the gateway (`client.link.GatewayLink`): a receive given up
on ends its waits and gives back what it locked, uncounted. Other operations run to their end (a
management change left half done would be worse)."""


def failure_of(exc: BaseException) -> tuple[Failure, BaseException]:
    """What a gateway call's exception is to `GatewayRetry`, and the error behind it: the
    gateway's own error is unwrapped from Ray's task error (`TYPED`, or `PASSING` when it is one of
    Ray's, met by the gateway); Ray's errors for an actor gone for good are `GONE`, its other
    errors `PASSING`; a time-out is `UNANSWERED`; anything else is raised as it is (`TYPED`)."""
    if isinstance(exc, (GetTimeoutError, asyncio.TimeoutError)):
        return Failure.UNANSWERED, exc
    if isinstance(exc, RayTaskError):
        error = unwrap_remote_error(exc)
        return (Failure.PASSING, error) if isinstance(error, RayError) else (Failure.TYPED, error)
    if isinstance(exc, GONE_FOR_GOOD):
        return Failure.GONE, exc
    if isinstance(exc, RayError):
        return Failure.PASSING, exc
    return Failure.TYPED, exc


class GatewayCaller:
    """Calls gateway `index` of a namespace (sync or async), retrying as `GatewayRetry` decides: it
    keeps one handle, found again when the gateway is gone for good or the caller moves on.

    Args:
        config: the namespace.
        index: the gateway called first.
        find: gateway i's actor handle: found by name, or made when it does not exist (clients,
            and gateways calling the deciding one, make it again when it is gone for good).
        moves: with several gateways, move to the next one when this one fails (clients do;
            forwarders and gateways stick to theirs, waiting while it restarts).
        grace: how long past an operation's timeout its caller waits for the answer.

    Example:
        >>> caller = GatewayCaller(config, 0, lambda i: ray.get_actor(config.gateway_name(i),  # doctest: +SKIP
        ...                                                          namespace=RAY_NAMESPACE))
        >>> table = RoutingTable.decode(caller.call("routing_table", timeout=60.0))  # doctest: +SKIP
    """

    def __init__(self, config: NamespaceConfig, index: int, find: Callable[[int], Any], *, moves: bool = False,
                 grace: float = 0.0) -> None:
        self.config = config
        self.index = index
        self._find = find
        self._moves = moves
        self._grace = grace
        self._handle: Any = None

    def handle(self) -> Any:
        """The gateway's actor handle (found on first use, and again after a failure says so)."""
        if self._handle is None:
            self._handle = self._find(self.index)
        return self._handle

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation, retrying while the gateway restarts, until `timeout` (+ grace)."""
        retry = self._retry(operation, timeout)
        while True:
            ref = self._submit(operation, args)
            try:
                return ray.get(ref, timeout=retry.remaining())
            except Exception as exc:  # noqa: BLE001 - read by failure_of, decided by GatewayRetry
                delay = self._failed(retry, exc, ref)
            except BaseException:
                self._abandoned(operation, args, ref)
                raise
            time.sleep(delay)

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """`call` for an event loop: the gateway's reply is awaited, never waited for in a thread."""
        retry = self._retry(operation, timeout)
        while True:
            ref = self._submit(operation, args)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout=retry.remaining())
            except Exception as exc:  # noqa: BLE001 - read by failure_of, decided by GatewayRetry
                delay = self._failed(retry, exc, ref)
            except BaseException:
                self._abandoned(operation, args, ref)
                raise
            await asyncio.sleep(delay)

    def _abandoned(self, operation: str, args: tuple[Any, ...], ref: Any) -> None:
        """The caller stopped waiting for call `ref` of `operation` (interrupted or cancelled):
        the call runs to its end (`WAITING_OPERATIONS` are ended by the client's link)."""

    def _retry(self, operation: str, timeout: float) -> GatewayRetry:
        return GatewayRetry(self.config.name, operation, index=self.index,
                            gateways=self.config.gateways if self._moves else 1, timeout=timeout + self._grace)

    def _submit(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Send one call to the gateway."""
        return self.handle().call.remote(operation, *args)

    def _failed(self, retry: GatewayRetry, exc: BaseException, ref: Any) -> float:
        """After call `ref` failed with `exc`: the back-off before the next try (on the gateway
        and handle `retry` says), or the error to raise. A call that got no answer is cancelled."""
        failure, error = failure_of(exc)
        if failure is Failure.UNANSWERED:
            ray.cancel(ref)
        step = retry.after(failure, error)
        if step.find:
            self._handle = None
        self.index = step.index
        return step.delay
