"""A gateway of the namespace as other actors call it: partitions' forwarders, and gateways that
take the routing table from the one that decides leadership."""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, ActorUnschedulableError

from ray_broker.config import RAY_NAMESPACE, NamespaceConfig
from ray_broker.routing.health import BACKOFF

GONE = (ActorDiedError, ActorUnavailableError, ActorUnschedulableError)
ATTEMPTS = 8
"""Tries of a call whose gateway is gone or restarting (with `BACKOFF` between them)."""


class GatewayCaller:
    """Gateway `index` of a namespace: found by name on every call (or got from `make`, which may
    create it again when it is gone for good), and called again while it is gone or restarting."""

    def __init__(self, config: NamespaceConfig, index: int, make: Callable[[], Any] | None = None) -> None:
        name = config.gateway_name(index)
        self._make = make or (lambda: ray.get_actor(name, namespace=RAY_NAMESPACE))

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation."""
        for attempt in range(ATTEMPTS):
            try:
                return await asyncio.wait_for(self._make().call.remote(operation, *args), timeout)
            except GONE:
                if attempt == ATTEMPTS - 1:
                    raise
                await asyncio.sleep(BACKOFF.delay(attempt))
        raise AssertionError("unreachable")
