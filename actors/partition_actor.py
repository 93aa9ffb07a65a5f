"""The partition actor: one `PartitionEngine` and its store, behind an asyncio actor.

Thin by design: it forwards operations to the engine, wakes waiting receivers when messages may
have become available, and runs housekeeping (scheduled messages, expiry) on a timer. Engine
calls are synchronous, so operations from one caller run in the order they were sent.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

import ray

from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store

HOUSEKEEPING_INTERVAL_S = 0.25
# Engine operations a caller may invoke through `PartitionActor.run`, and whether each may make
# messages available to waiting receivers.
OPERATIONS: dict[str, bool] = {
    "create_entity": False,
    "update_entity": True,
    "delete_entity": False,
    "get_entity": False,
    "list_entities": False,
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
}


def store_path(data_dir: str | None, index: int) -> str | None:
    """Where partition `index` keeps its database under `data_dir`."""
    return None if data_dir is None else os.path.join(data_dir, f"partition-{index:03d}.sqlite3")


@ray.remote
class PartitionActor:
    """Partition `index` of a namespace; its store is reopened whenever Ray restarts it."""

    def __init__(self, namespace: str, index: int, partition_count: int, data_dir: str | None, durability: str) -> None:
        self.namespace = namespace
        self.index = index
        self.engine = PartitionEngine(index, partition_count, Store(store_path(data_dir, index), durability))
        self._wake: asyncio.Event | None = None
        self._housekeeper: asyncio.Task[None] | None = None

    def _event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
            self._housekeeper = asyncio.get_running_loop().create_task(self._housekeeping_loop())
        return self._wake

    def _notify(self) -> None:
        event = self._event()
        self._wake = asyncio.Event()
        event.set()

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                if self.engine.housekeeping():
                    self._notify()
            except Exception:  # noqa: BLE001 - housekeeping must keep running; the next round retries
                continue

    async def run(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """Invoke an engine operation by name."""
        wakes = OPERATIONS.get(operation)
        if wakes is None:
            raise AttributeError(f"partition has no operation {operation!r}")
        self._event()
        result = getattr(self.engine, operation)(*args, **kwargs)
        if wakes:
            self._notify()
        return result

    async def run_batch(self, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Invoke several engine operations in one call, in order; results in the same order."""
        results = []
        for operation, args in calls:
            results.append(await self.run(operation, *args))
        return results

    async def wait_available(self, entity: str, subq: int, session_id: str | None = None,
                             free_session: bool = False, timeout: float = 5.0) -> bool:
        """Return True as soon as a receive could get a message, or False after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            event = self._event()
            if self.engine.has_available(entity, subq, session_id, free_session):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                return bool(self.engine.has_available(entity, subq, session_id, free_session))

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()
