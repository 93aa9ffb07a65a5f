"""The partition actor: one `PartitionEngine` and its store, behind an asyncio actor.

Thin by design: it forwards operations to the engine, wakes waiting receivers when messages may
have become available, runs housekeeping (scheduled messages, expiry) on a timer, and, once an
entity here auto-forwards, a forwarder task that sends the outbox on through a router of its own.
Engine calls are synchronous, so operations from one caller run in the order they were sent.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Callable

import ray

from actors.metrics import PartitionMetrics
from ray_broker.config import NODE_DATA_DIR_ENV, RAY_NAMESPACE, NamespaceConfig
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.routing.forwarding import Forwarder
from ray_broker.routing.ray_channel import RayChannel, TableHandles
from ray_broker.routing.router import Router
from ray_broker.sku import get_sku
from ray_broker.routing.health import BACKOFF

HOUSEKEEPING_INTERVAL_S = 0.25
FORWARD_IDLE_S = 1.0
"""How often the forwarder looks at the outbox when nothing woke it."""
STORE_TAKEOVER_WAIT_S = 30.0
"""How long a restarted partition waits for its previous process to let go of the store's lock."""
# Engine operations a caller may invoke through `PartitionActor.run`, and whether each may make
# messages available to waiting receivers.
OPERATIONS: dict[str, bool] = {
    "create_entity": False,
    "update_entity": True,
    "delete_entity": False,
    "get_entity": False,
    "list_entities": False,
    "add_rule": False,
    "remove_rule": False,
    "send": True,
    "cancel_scheduled": False,
    "receive": False,
    "settle": True,
    "receive_deferred": False,
    "peek": False,
    "accept_session": False,
    "renew_session": False,
    "release_session": True,
    "get_session_state": False,
    "set_session_state": False,
    "runtime": False,
    "has_available": False,
    "integrity_check": False,
    "commit_transaction": True,
}


class _Gateway:
    """A gateway of the namespace as the forwarder calls it (for the routing table)."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        self._name = config.gateway_name(index)

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        gateway = ray.get_actor(self._name, namespace=RAY_NAMESPACE)
        return await asyncio.wait_for(gateway.call.remote(operation, *args), timeout)


@ray.remote
class PartitionActor:
    """Partition `index` of a namespace; its store is reopened whenever Ray restarts it.

    The store is opened under its exclusive lock, owned by this cluster's actor of this name: a
    restart takes the lock over from its dead predecessor, and any other process is refused with
    `StoreLockedError` (the actor then fails to start, touching nothing).
    """

    def __init__(self, config: dict[str, Any], index: int) -> None:
        namespace = NamespaceConfig(**config)
        self.config = namespace
        self.namespace = namespace.name
        self.index = index
        owner = f"Ray cluster {ray.get_runtime_context().gcs_address}, actor {namespace.partition_name(index)}"
        path = namespace.store_path(index, os.environ.get(NODE_DATA_DIR_ENV))
        store = Store(path, namespace.durability, owner=owner,
                      takeover_wait_s=STORE_TAKEOVER_WAIT_S, partition=index)
        self.engine = PartitionEngine(index, namespace.partition_count, store)
        self.metrics = PartitionMetrics(namespace.name, index, namespace.partition_count, self.engine)
        self._wake: asyncio.Event | None = None
        self._waiting: dict[str, asyncio.Event] = {}
        """Receivers with a `receive_waiting` under way here, each with the event that ends it."""
        self._housekeeper: asyncio.Task[None] | None = None
        self._forwarder: asyncio.Task[None] | None = None
        self._forward_wake = asyncio.Event()

    def _event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
            self._housekeeper = asyncio.get_running_loop().create_task(self._housekeeping_loop())
        return self._wake

    def _notify(self) -> None:
        event = self._event()
        self._wake = asyncio.Event()
        event.set()
        self._forward_wake.set()

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                if self._forwarder is None and self.engine.forwards():
                    self._forwarder = asyncio.get_running_loop().create_task(self._forward_loop())
                if self.metrics.run("housekeeping", self.engine.housekeeping):
                    self._notify()
                if self.metrics.tick():
                    self._notify()
            except Exception:  # noqa: BLE001 - housekeeping must keep running; the next round retries
                continue

    async def _forward_loop(self) -> None:
        """Forward the outbox whenever something may have joined it (and every `FORWARD_IDLE_S`),
        backing off while a destination is unavailable."""
        handles = TableHandles(_Gateway(self.config, self.index % self.config.gateways))
        router = Router(self.namespace, RayChannel(self.config.partition_count, handles), get_sku(self.config.sku))
        forwarder = Forwarder(self.index, self.engine, router)
        attempt = 0
        while True:
            self._forward_wake.clear()
            try:
                await handles.load()
                await forwarder.forward_pending()
                attempt = 0
            except Exception:  # noqa: BLE001 - the batch stays in the outbox; retried after a back-off
                await asyncio.sleep(BACKOFF.delay(attempt))
                attempt += 1
                continue
            try:
                await asyncio.wait_for(self._forward_wake.wait(), FORWARD_IDLE_S)
            except asyncio.TimeoutError:
                pass

    async def run(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """Invoke an engine operation by name."""
        wakes = OPERATIONS.get(operation)
        if wakes is None:
            raise AttributeError(f"partition has no operation {operation!r}")
        self._event()
        result = self.metrics.run(operation, getattr(self.engine, operation), *args, **kwargs)
        if wakes:
            self._notify()
        return result

    async def run_batch(self, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Invoke several engine operations in one call and one store commit, in order; results in
        the same order. An operation that raises ends the batch: those before it stay applied."""
        results: list[Any] = []
        failure: Exception | None = None
        with self.engine.unit_of_work():
            for operation, args in calls:
                try:
                    results.append(await self.run(operation, *args))
                except Exception as exc:  # noqa: BLE001 - re-raised once the operations before it are committed
                    failure = exc
                    break
        if failure is not None:
            raise failure
        return results

    async def wait_available(self, entity: str, subq: int, session_id: str | None = None,
                             free_session: bool = False, timeout: float = 5.0) -> bool:
        """Return True as soon as a receive could get a message, or False after `timeout` seconds."""
        return await self._wait(lambda: self.engine.has_available(entity, subq, session_id, free_session) or None,
                                timeout) is not None

    async def receive_waiting(self, receiver_id: str, entity: str, subq: int, max_count: int, mode: str,
                              session: tuple[str, bytes] | None, seen: int | None, timeout: float) -> dict[str, Any]:
        """A receive that waits: as soon as messages are available, lock up to `max_count` of them
        for the caller and return them (the wake-up carries the messages). Returns an empty reply
        after `timeout`, or at once when `end_waits(receiver_id)` is called."""
        session_id = None if session is None else session[0]
        ended = self._waiting[receiver_id] = asyncio.Event()

        def ready() -> dict[str, Any] | None:
            if ended.is_set():
                return {"messages": [], "more": False}
            if not self.engine.has_available(entity, subq, session_id):
                return None
            reply: dict[str, Any] = self.metrics.run("receive", self.engine.receive, entity, subq, max_count, mode,
                                                     session, seen)
            return reply if reply["messages"] else None

        try:
            reply = await self._wait(ready, timeout)
        finally:
            if self._waiting.get(receiver_id) is ended:
                del self._waiting[receiver_id]
        return reply if reply is not None else {"messages": [], "more": False}

    async def end_waits(self, receiver_id: str) -> None:
        """End the `receive_waiting` of `receiver_id` now, if one is under way (its receiver is closing)."""
        waiting = self._waiting.get(receiver_id)
        if waiting is not None:
            waiting.set()
            self._notify()

    async def _wait(self, check: Callable[[], Any], timeout: float) -> Any:
        """Run `check` now and after every wake-up until it returns something other than None, or
        `timeout` seconds pass (then one last check)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = self._event()
            result = check()
            if result is not None:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                return check()

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()

    async def node(self) -> str:
        """The id of the Ray node this partition runs on (for operators and failure tests)."""
        return str(ray.get_runtime_context().get_node_id())
