"""A partition's forwarder: once an entity there auto-forwards, a thread with an event loop and a
router of its own sends the engine's outbox on to the destinations (`routing.forwarding`)."""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

import ray

from ray_broker.config import RAY_NAMESPACE, NamespaceConfig
from ray_broker.engine.partition import PartitionEngine
from ray_broker.routing.forwarding import Forwarder
from ray_broker.routing.health import BACKOFF
from ray_broker.routing.ray_channel import RayChannel, TableHandles
from ray_broker.routing.ray_gateway import GatewayCaller
from ray_broker.routing.router import Router
from ray_broker.sku import get_sku

logger = logging.getLogger("ray_broker.partition")

FORWARD_IDLE_S = 1.0
"""How often the forwarder looks at the outbox when nothing woke it."""


class LockedOutbox:
    """The engine's outbox as the forwarder thread uses it: every call under the partition's lock,
    each write made `durable` before it returns."""

    def __init__(self, engine: Callable[[], PartitionEngine], lock: threading.RLock,
                 durable: Callable[[], None]) -> None:
        self._engine = engine
        self._lock = lock
        self._durable = durable

    def forwards(self) -> bool:
        with self._lock:
            return self._engine().forwards()

    def take_transfer(self, limit: int) -> dict[str, Any] | None:
        with self._lock:
            transfer = self._engine().take_transfer(limit)
            self._durable()
            return transfer

    def transfer_done(self, transfer_id: int) -> None:
        with self._lock:
            self._engine().transfer_done(transfer_id)
            self._durable()

    def transfer_failed(self, transfer_id: int, reason: str, description: str) -> None:
        with self._lock:
            self._engine().transfer_failed(transfer_id, reason, description)
            self._durable()


class ForwardThread(threading.Thread):
    """Forwards partition `index`'s outbox whenever something may have joined it (and every
    `FORWARD_IDLE_S`), backing off while a destination is unavailable: an event loop of its own
    running a router of its own."""

    def __init__(self, config: NamespaceConfig, index: int, outbox: LockedOutbox) -> None:
        super().__init__(name="forwarder", daemon=True)
        self._config = config
        self._index = index
        self._outbox = outbox
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    def run(self) -> None:
        asyncio.run(self._forward())

    def wake(self) -> None:
        """Look at the outbox now (callable from any thread)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)

    async def _forward(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        config = self._config
        gateway = GatewayCaller(config, self._index % config.gateways,
                                lambda i: ray.get_actor(config.gateway_name(i), namespace=RAY_NAMESPACE))
        handles = TableHandles(gateway)
        router = Router(config.name, RayChannel(config.partition_count, handles), get_sku(config.sku))
        forwarder = Forwarder(self._index, self._outbox, router)
        attempt = 0
        while True:
            self._wake.clear()
            try:
                await handles.load()
                await forwarder.forward_pending()
                attempt = 0
            except Exception:  # noqa: BLE001 - the batch stays in the outbox; retried after a back-off
                delay = BACKOFF.delay(attempt)
                logger.warning("partition %d of namespace %r could not forward its outbox (attempt %d); the "
                               "batch stays there and is retried in %.2f s", self._index, config.name, attempt + 1,
                               delay, exc_info=True)
                await asyncio.sleep(delay)
                attempt += 1
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), FORWARD_IDLE_S)
            except asyncio.TimeoutError:
                pass
