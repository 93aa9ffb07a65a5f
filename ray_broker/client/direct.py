"""The direct transport: data straight to partitions, through a `Router` embedded in this process.

The gateway remains the routing authority: it hands out the routing table (each partition's
actor handle and epoch) and recreates a partition Ray will not restart; this client reports such
a partition and takes the new table. Everything else a client does (management) still goes to
the gateway. The router runs on one background event loop per process, shared by every direct
link in it, so the sync client drives the same async code the async client awaits.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from ..config import NamespaceConfig
from ..errors import OperationTimeoutError
from ..routing.ray_channel import RayChannel
from ..routing.router import DATA_OPERATIONS, Router
from ..sku import get_sku
from .core import CALL_GRACE_S
from .link import GatewayLink

_ENTITY_CHANGES = ("create_entity", "update_entity")


class _LoopThread:
    """One daemon thread running an asyncio loop for this process's direct links."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started on first use)."""
        with self._lock:
            if self._loop is None or not self._loop.is_running():
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(target=self._run, args=(loop, started), name="ray-broker-router",
                                          daemon=True)
                thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()


ROUTER_LOOP = _LoopThread()


class TableHandles:
    """Partition handles from the gateway's routing table (a `HandleSource`)."""

    def __init__(self, gateway: GatewayLink) -> None:
        self._gateway = gateway
        self._table: dict[str, Any] | None = None

    async def load(self) -> None:
        """Fetch the routing table unless it is here already."""
        if self._table is None:
            self._table = await self._gateway.call_async("routing_table", timeout=60.0)

    def handle(self, index: int) -> Any:
        """Partition `index`'s handle, as of the last table."""
        assert self._table is not None, "the routing table is loaded before the first partition call"
        return self._table["handles"][index]

    async def replace(self, index: int) -> None:
        """Report partition `index` dead for good; the gateway recreates it and sends the new table."""
        assert self._table is not None
        self._table = await self._gateway.call_async("partition_failed", index, self._table["epochs"][index],
                                                     timeout=60.0)


class DirectLink:
    """A client's link to its namespace: `call(operation, *args, timeout)` like `GatewayLink`, with
    data operations served by an embedded router calling partitions directly.

    Args:
        config: the namespace.
        gateway: the link to the gateway this client sticks to (management, routing table).
    """

    def __init__(self, config: NamespaceConfig, gateway: GatewayLink) -> None:
        self.config = config
        self.gateway = gateway
        self.handles = TableHandles(gateway)
        self.router = Router(config.name, RayChannel(config.partition_count, self.handles), get_sku(config.sku))

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run an operation on this event loop: data operations through the router, the rest at the gateway."""
        if operation in DATA_OPERATIONS:
            await self.handles.load()
            return await getattr(self.router, operation)(*args)
        result = await self.gateway.call_async(operation, *args, timeout=timeout)
        if operation in _ENTITY_CHANGES:
            self.router.remember(result)
        elif operation == "delete_entity":
            self.router.forget(args[0])
        return result

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run an operation from synchronous code (on the router's loop), waiting up to `timeout` + grace."""
        future = asyncio.run_coroutine_threadsafe(self.call_async(operation, *args, timeout=timeout),
                                                  ROUTER_LOOP.loop())
        try:
            return future.result(timeout + CALL_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise OperationTimeoutError(
                f"{operation} on namespace {self.config.name!r} did not finish in {timeout + CALL_GRACE_S:g} s; "
                "retry later") from None
