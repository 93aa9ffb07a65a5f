"""The link from a client to its gateway (sync and async), with retry and gateway re-creation."""
from __future__ import annotations

import asyncio
import enum
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from ..callers import caller_token
from ..config import NamespaceConfig
from ..errors import OperationTimeoutError, unwrap_remote_error
from ..routing.health import RETRY_BACKOFF
from ..routing.ray_channel import GONE_FOR_GOOD
from ..router_requests import RouterRequest, decode_router_reply, encode_router_request
from .core import CALL_GRACE_S


class RetryAction(enum.Enum):
    """What a client does after a failed gateway call."""

    RAISE = 0
    RECREATE = 1
    BACKOFF = 2


def classify_gateway_failure(exc: BaseException) -> tuple[RetryAction, BaseException]:
    """Decide how to handle an exception from a gateway call; returns the action and the error to raise.

    The gateway's own (typed) errors are raised; when Ray will not restart the gateway (died for
    good, unschedulable) it is made again; any other error of Ray's (restarting, its node lost, ...)
    is waited out: a Ray exception is never raised as it is."""
    if isinstance(exc, RayTaskError):
        error = unwrap_remote_error(exc)
        return (RetryAction.BACKOFF, error) if isinstance(error, RayError) else (RetryAction.RAISE, error)
    if isinstance(exc, GONE_FOR_GOOD):
        return RetryAction.RECREATE, exc
    if isinstance(exc, RayError):
        return RetryAction.BACKOFF, exc
    return RetryAction.RAISE, exc


WAITING_OPERATIONS = frozenset({"receive"})
"""Gateway operations that may wait long on the caller's behalf. They carry the caller's token (the
gateway hands nothing to a caller that died meanwhile) and are cancelled at the gateway when the
caller stops waiting (interrupted or cancelled): a receive given up on ends its waits and gives
back what it locked, uncounted. Other operations run to their end (a management change left half
done would be worse)."""


def abandon(operation: str, ref: Any) -> None:
    """The caller stopped waiting for gateway call `ref` of `operation`: cancel it if it is one of
    `WAITING_OPERATIONS`."""
    if operation in WAITING_OPERATIONS:
        ray.cancel(ref, recursive=False)  # the gateway's own partition calls are ended by the receive


class GatewayLink:
    """Calls one gateway of a namespace; a client sticks to it, moving to the next one when it
    fails (with a single gateway: waiting while it restarts, re-creating it if it is gone)."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        self.config = config
        self.index = index
        self._handle: Any = None

    def handle(self) -> Any:
        """The gateway's actor handle (created again if the gateway was killed for good)."""
        if self._handle is None:
            from actors.gateway_actor import gateway_actor

            self._handle = gateway_actor(self.config, self.index)
        return self._handle

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        """Run a router request at the gateway's router (the relay path); its typed reply."""
        return decode_router_reply(request, self.call(*encode_router_request(request), timeout=timeout))

    async def route_async(self, request: RouterRequest, *, timeout: float) -> Any:
        """`route` for an event loop."""
        return decode_router_reply(request, await self.call_async(*encode_router_request(request), timeout=timeout))

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation (a router request's as `encode_router_request` gives it), retrying while the gateway restarts, until `timeout` (+ grace)."""
        deadline = time.monotonic() + timeout + CALL_GRACE_S
        attempt = 0
        while True:
            ref = self._submit(operation, args)
            try:
                return ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
            except Exception as exc:  # noqa: BLE001 - classified by _retry_delay
                delay = self._retry_delay(exc, ref, operation, timeout, deadline, attempt)
            except BaseException:
                abandon(operation, ref)
                raise
            attempt += 1
            time.sleep(delay)

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """`call` for an event loop: the gateway's reply is awaited, never waited for in a thread."""
        deadline = time.monotonic() + timeout + CALL_GRACE_S
        attempt = 0
        while True:
            ref = self._submit(operation, args)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(ref.future()),
                                              timeout=max(deadline - time.monotonic(), 0.1))
            except asyncio.TimeoutError:
                delay = self._retry_delay(GetTimeoutError(), ref, operation, timeout, deadline, attempt)
            except Exception as exc:  # noqa: BLE001 - classified by _retry_delay
                delay = self._retry_delay(exc, ref, operation, timeout, deadline, attempt)
            except BaseException:
                abandon(operation, ref)
                raise
            attempt += 1
            await asyncio.sleep(delay)

    def _submit(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Send one call to the gateway; a waiting one carries this process's `caller_token`."""
        if operation in WAITING_OPERATIONS:
            return self.handle().call.remote(operation, *args, caller=caller_token())
        return self.handle().call.remote(operation, *args)

    def _retry_delay(self, exc: BaseException, ref: Any, operation: str, timeout: float, deadline: float,
                     attempt: int) -> float:
        """After a failed call: the back-off before the next try, or the error to raise."""
        if isinstance(exc, GetTimeoutError):
            ray.cancel(ref)
            raise OperationTimeoutError(
                f"gateway {self.index} of namespace {self.config.name!r} did not answer {operation} in "
                f"{timeout + CALL_GRACE_S:g} s; retry later") from None
        action, error = classify_gateway_failure(exc)
        if action is RetryAction.RAISE:
            raise error from None
        if self.config.gateways > 1:
            self.index = (self.index + 1) % self.config.gateways
            self._handle = None
        elif action is RetryAction.RECREATE:
            self._handle = None
        delay = RETRY_BACKOFF.delay(attempt)
        if time.monotonic() + delay >= deadline:
            raise OperationTimeoutError(
                f"gateway {self.index} of namespace {self.config.name!r} stayed unavailable; retry later") from None
        return delay
