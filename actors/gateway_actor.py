"""The gateway actor: the namespace's control plane, and a relay for callers without partition handles.

It applies management to every partition (create, update, delete; get and runtime properties
aggregated), publishes the routing table (each partition's actor handle and epoch) that clients
use to reach partitions directly, recreates a partition that Ray will not restart, and serves
send, receive and settle itself through the same `Router` that clients embed (the CLI and other
callers without partition handles use it).
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import ray

from ray_broker.config import NamespaceConfig
from ray_broker.entities import IMMUTABLE_QUEUE_OPTIONS, normalize_queue_options
from ray_broker.errors import (
    InvalidOperationError,
    MessagingEntityAlreadyExistsError,
    QuotaExceededError,
)
from ray_broker.routing import planner
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import RayChannel
from ray_broker.routing.router import DATA_OPERATIONS, Router
from ray_broker.sku import MAX_ENTITIES, get_sku

from .handles import partition_actor

SWEEP_INTERVAL_S = 30.0
ADMIN_OPERATIONS = frozenset({"definition", "create_entity", "update_entity", "delete_entity", "list_entities",
                              "runtime", "routing_table", "partition_failed"})
"""The management operations a gateway serves itself (data operations go to its router)."""


class GatewayHandles:
    """Partition handles as the gateway holds them: created on first use, recreated when one died
    for good, each with an epoch that counts its recreations."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.config = config
        self._handles: list[Any] = [None] * config.partition_count
        self.epochs = [0] * config.partition_count

    def handle(self, index: int) -> Any:
        """Partition `index`'s handle (the actor is created from its store if it does not exist)."""
        if self._handles[index] is None:
            self._handles[index] = partition_actor(self.config, index)
        return self._handles[index]

    async def replace(self, index: int) -> None:
        """Recreate partition `index` (from its store) after its actor died for good."""
        self._handles[index] = partition_actor(self.config, index)
        self.epochs[index] += 1

    def table(self) -> dict[str, Any]:
        """The routing table: every partition's handle and epoch."""
        return {"handles": [self.handle(k) for k in range(self.config.partition_count)], "epochs": list(self.epochs)}


class Gateway:
    """Gateway logic: management over a `Router`, and the routing table; `GatewayActor` is its Ray shell."""

    def __init__(self, config: NamespaceConfig) -> None:
        self.config = config
        self.sku = get_sku(config.sku)
        self.count = config.partition_count
        self.handles = GatewayHandles(config)
        self.router = Router(config.name, RayChannel(self.count, self.handles), self.sku)

    # ------------------------------------------------------------------ routing table

    async def routing_table(self) -> dict[str, Any]:
        """Every partition's actor handle and epoch, for clients that call partitions directly."""
        return self.handles.table()

    async def partition_failed(self, index: int, epoch: int) -> dict[str, Any]:
        """A client found partition `index` (as of `epoch`) dead for good: recreate it unless that
        was done already, and return the current routing table."""
        if not 0 <= index < self.count:
            raise InvalidOperationError(f"partition {index} does not exist in namespace {self.config.name!r}")
        if self.handles.epochs[index] == epoch:
            try:
                await self.router.call_one(index, "list_entities")
            except PartitionUnavailable:
                pass
        return self.handles.table()

    # ------------------------------------------------------------------ entities

    async def definition(self, name: str, fresh: bool = False) -> dict[str, Any]:
        """An entity's definition, cached for a short while."""
        return await self.router.definition(name, fresh)

    async def create_entity(self, kind: str, name: str, options: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Create a queue on every partition, after the tier, quota and uniqueness checks."""
        options = normalize_queue_options(options)
        self._check_features(name, options)
        if self.sku.all_entities_partitioned:
            options["enable_partitioning"] = True
        existing = await self.router.any("list_entities")
        clash = next((d for d in existing if d["name"].lower() == name.lower()), None)
        if clash is not None:
            raise MessagingEntityAlreadyExistsError(
                f"{clash['kind']} {clash['name']!r} already exists; names are unique regardless of case", entity=name)
        if len(existing) >= MAX_ENTITIES:
            raise QuotaExceededError(f"namespace {self.config.name!r} already holds {MAX_ENTITIES} queues and topics; "
                                     "delete some before creating more", entity=name)
        quota = self.sku.partitioned_entity_quota
        if options["enable_partitioning"] and quota is not None:
            partitioned = sum(1 for d in existing if d["options"].get("enable_partitioning"))
            if partitioned >= quota:
                raise QuotaExceededError(
                    f"namespace {self.config.name!r} already holds {quota} partitioned queues and topics, the "
                    f"{self.sku.name} tier's limit; create {name!r} without enable_partitioning or delete one",
                    entity=name)
        for target in (options["forward_to"], options["forward_dead_lettered_messages_to"]):
            if target is not None:
                raise InvalidOperationError(
                    f"auto-forwarding (to {target!r}) is not available in this version; create {name!r} without it",
                    entity=name)
        now = time.time()
        definition = {"name": name, "kind": kind, "options": options, "incarnation": uuid.uuid4().hex,
                      "created_at": now, "updated_at": now}
        await self.router.everywhere("create_entity", definition, deadline=time.monotonic() + timeout, entity=name)
        self.router.remember(definition)
        return definition

    def _check_features(self, name: str, options: dict[str, Any]) -> None:
        if options["requires_session"]:
            self.sku.require("sessions", name)
        if options["requires_duplicate_detection"]:
            self.sku.require("duplicate detection", name)
        if options["forward_to"] or options["forward_dead_lettered_messages_to"]:
            self.sku.require("auto-forwarding", name)

    async def update_entity(self, name: str, changes: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Change an entity's settings on every partition."""
        current = await self.definition(name, fresh=True)
        for key in IMMUTABLE_QUEUE_OPTIONS:
            if key in changes and changes[key] != current["options"][key]:
                raise InvalidOperationError(
                    f"{key} of {current['name']!r} cannot change after creation; create a new entity instead",
                    entity=name)
        options = normalize_queue_options(changes, base=current["options"])
        self._check_features(name, options)
        for target in (options["forward_to"], options["forward_dead_lettered_messages_to"]):
            if target is not None:
                raise InvalidOperationError(
                    f"auto-forwarding (to {target!r}) is not available in this version", entity=name)
        definition = {**current, "options": options, "updated_at": time.time()}
        await self.router.everywhere("update_entity", definition, deadline=time.monotonic() + timeout, entity=name)
        self.router.remember(definition)
        return definition

    async def delete_entity(self, name: str, timeout: float) -> None:
        """Delete an entity and its messages on every partition."""
        await self.definition(name, fresh=True)
        await self.router.everywhere("delete_entity", name, deadline=time.monotonic() + timeout, entity=name)
        self.router.forget(name)

    async def list_entities(self, kind: str) -> list[dict[str, Any]]:
        """Every entity of one kind, in name order."""
        return [d for d in await self.router.any("list_entities") if d["kind"] == kind]

    async def runtime(self, name: str) -> dict[str, Any]:
        """Per-partition counts (None where a partition did not answer) and the definition."""
        definition = await self.definition(name)
        hosts = planner.hosts(definition, self.count)

        async def one(k: int) -> Any:
            try:
                return await self.router.call_one(k, "runtime", name)
            except PartitionUnavailable:
                return None

        counts = await asyncio.gather(*(one(k) for k in hosts))
        return {"definition": definition, "partitions": dict(zip(hosts, counts))}


@ray.remote
class GatewayActor:
    """Gateway `i` of a namespace (a Ray shell over `Gateway`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.gateway = Gateway(NamespaceConfig(**config))
        self._sweeper: asyncio.Task[None] | None = None

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            await self.gateway.router.sweep_idle_receivers()

    async def config(self) -> dict[str, Any]:
        """The namespace configuration."""
        return self.gateway.config.to_dict()

    async def call(self, operation: str, *args: Any) -> Any:
        """Invoke a gateway operation by name: management here, data operations through its router."""
        self._ensure_sweeper()
        if operation in DATA_OPERATIONS:
            return await getattr(self.gateway.router, operation)(*args)
        if operation in ADMIN_OPERATIONS:
            return await getattr(self.gateway, operation)(*args)
        raise AttributeError(f"gateway has no operation {operation!r}")

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()
