"""The direct transport: data straight to partitions, through a `Router` embedded in this process.

The gateway remains the routing authority: it hands out the routing table (each partition's
actor handle and epoch) and recreates a partition Ray will not restart; this client reports such
a partition and takes the new table. Everything else a client does (management) still goes to
the gateway. A router's asyncio objects belong to one event loop, so a link keeps one router per
loop it is used on: the sync client's calls run on one background loop per process, shared by
every direct link in it; the async client's run on the caller's own loop.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref
from typing import Any, Coroutine

from ..config import NamespaceConfig
from ..errors import OperationTimeoutError
from ..router_requests import RouterRequest
from ..routing.ray_channel import RayChannel, TableHandles
from ..routing.router import Later, Router
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


class DirectLink:
    """A client's link to its namespace, like `GatewayLink`: `route(request)` runs a data operation
    on a router embedded here, calling partitions directly; `call(operation, *args)` runs
    management at the gateway.

    Args:
        config: the namespace.
        gateway: the link to the gateway this client sticks to (management, routing table).
    """

    def __init__(self, config: NamespaceConfig, gateway: GatewayLink) -> None:
        self.config = config
        self.gateway = gateway
        self.handles = TableHandles(gateway)
        self._routers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Router] = weakref.WeakKeyDictionary()

    def router(self) -> Router:
        """The router of the running event loop (made on its first call there)."""
        loop = asyncio.get_running_loop()
        router = self._routers.get(loop)
        if router is None:
            router = self._routers[loop] = Router(self.config.name, RayChannel(self.config.partition_count, self.handles),
                                                  get_sku(self.config.sku))
        return router

    async def route_async(self, request: RouterRequest, *, timeout: float) -> Any:
        """Run a router request through the running loop's router, waiting up to `timeout` + grace."""
        try:
            return await asyncio.wait_for(self._route(request), timeout + CALL_GRACE_S)
        except asyncio.TimeoutError:
            raise self._timed_out(request.OPERATION, timeout) from None

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        """Run a router request from synchronous code, waiting up to `timeout` + grace: what one
        round of partition calls serves on this thread (`Router.try_now`), the rest on the
        router's loop."""
        router = self._routers.get(ROUTER_LOOP.loop()) if self.handles.loaded else None
        if router is None:
            return self._on_loop(self._route(request), request.OPERATION, timeout)
        now = router.try_now(request)
        if not isinstance(now, Later):
            return now
        left = timeout if now.timeout is None else now.timeout
        return now.reply(self._on_loop(self._route(now.request), request.OPERATION, left))

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a management operation at the gateway; the entity definitions it changes are
        remembered (or forgotten) by this link's routers."""
        result = await self.gateway.call_async(operation, *args, timeout=timeout)
        for router in list(self._routers.values()):
            if operation in _ENTITY_CHANGES:
                router.definitions.remember(result)
            elif operation == "delete_entity":
                router.definitions.forget(args[0])
        return result

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """`call_async` from synchronous code, on the router's loop."""
        return self._on_loop(self.call_async(operation, *args, timeout=timeout), operation, timeout)

    async def _route(self, request: RouterRequest) -> Any:
        router = self.router()
        await self.handles.load()
        return await router.run(request)

    def _on_loop(self, work: Coroutine[Any, Any, Any], operation: str, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(work, ROUTER_LOOP.loop())
        try:
            return future.result(timeout + CALL_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise self._timed_out(operation, timeout) from None
        except BaseException:
            future.cancel()
            raise

    def _timed_out(self, operation: str, timeout: float) -> OperationTimeoutError:
        return OperationTimeoutError(
            f"{operation} on namespace {self.config.name!r} did not finish in {timeout + CALL_GRACE_S:g} s; "
            "retry later")

def open_link(config: NamespaceConfig, gateway_index: int | None = None, *, relay: bool = False) -> GatewayLink | DirectLink:
    """A new handle's link: direct to partitions, or with `relay` every call through the gateway.

    The gateway is `gateway_index`, by default one chosen by this process's id.
    """
    index = gateway_index if gateway_index is not None else os.getpid() % config.gateways
    gateway = GatewayLink(config, index)
    return gateway if relay else DirectLink(config, gateway)
