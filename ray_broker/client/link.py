"""The synchronous link from a client to its gateway, with retry and gateway re-creation."""
from __future__ import annotations

import enum
import time
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

from ..config import NamespaceConfig
from ..errors import OperationTimeoutError, unwrap_remote_error
from .core import CALL_GRACE_S


class RetryAction(enum.Enum):
    """What a client does after a failed gateway call."""

    RAISE = 0
    RECREATE = 1
    BACKOFF = 2


def classify_gateway_failure(exc: BaseException) -> tuple[RetryAction, BaseException]:
    """Decide how to handle an exception from a gateway call; returns the action and the error to raise."""
    if isinstance(exc, RayTaskError):
        return RetryAction.RAISE, unwrap_remote_error(exc)
    if isinstance(exc, ActorDiedError):
        return RetryAction.RECREATE, exc
    if isinstance(exc, (ActorUnavailableError, RayActorError)):
        return RetryAction.BACKOFF, exc
    return RetryAction.RAISE, exc


class GatewayLink:
    """Calls one gateway of a namespace; a client sticks to it, re-creating it if it is gone."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        self.config = config
        self.index = index
        self._handle: Any = None

    def handle(self) -> Any:
        """The gateway's actor handle (created again if the gateway was killed for good)."""
        if self._handle is None:
            from actors.deploy import gateway_actor

            self._handle = gateway_actor(self.config, self.index)
        return self._handle

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation, retrying while the gateway restarts, until `timeout` (+ grace)."""
        deadline = time.monotonic() + timeout + CALL_GRACE_S
        delay = 0.05
        while True:
            ref = self.handle().call.remote(operation, *args)
            try:
                return ray.get(ref, timeout=max(deadline - time.monotonic(), 0.1))
            except GetTimeoutError:
                ray.cancel(ref)
                raise OperationTimeoutError(
                    f"gateway {self.index} of namespace {self.config.name!r} did not answer {operation} in "
                    f"{timeout + CALL_GRACE_S:g} s; retry later") from None
            except Exception as exc:  # noqa: BLE001 - classified below
                action, error = classify_gateway_failure(exc)
                if action is RetryAction.RAISE:
                    raise error from None
                if action is RetryAction.RECREATE:
                    self._handle = None
                if time.monotonic() + delay >= deadline:
                    raise OperationTimeoutError(
                        f"gateway {self.index} of namespace {self.config.name!r} stayed unavailable; retry later") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
