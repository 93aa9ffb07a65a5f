"""A gateway of the namespace called by name, from inside other actors."""
from __future__ import annotations

import asyncio
from typing import Any

import ray

from ray_broker.config import RAY_NAMESPACE, NamespaceConfig


class GatewayCaller:
    """Gateway `index` of a namespace as partitions (their forwarders) and other gateways call it:
    looked up by name on every call, so a recreated gateway is found."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        self._name = config.gateway_name(index)

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a gateway operation."""
        gateway = ray.get_actor(self._name, namespace=RAY_NAMESPACE)
        return await asyncio.wait_for(gateway.call.remote(operation, *args), timeout)
