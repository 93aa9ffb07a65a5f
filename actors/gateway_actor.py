"""The gateway actor: the namespace's control plane, and a relay for callers without partition handles.

It applies management to every partition (create, update, delete; get and runtime properties
aggregated), publishes the routing table (each partition's actor handle and epoch) that clients
use to reach partitions directly, recreates a partition that Ray will not restart, and serves
send, receive and settle itself through the same `Router` that clients embed (the CLI and other
callers without partition handles use it).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import Any, Awaitable, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_broker.auto_delete import idle_entities, last_use, watched
from ray_broker.callers import Token, caller_gone_async
from ray_broker.config import RAY_NAMESPACE, NamespaceConfig, spread_node
from ray_broker.engine.in_sync import InSync
from ray_broker.entities import (
    IMMUTABLE_QUEUE_OPTIONS,
    IMMUTABLE_SUBSCRIPTION_OPTIONS,
    IMMUTABLE_TOPIC_OPTIONS,
    INHERITED_TOPIC_OPTIONS,
    SUBSCRIPTIONS_SEGMENT,
    check_subscription_name,
    normalize_queue_options,
    normalize_subscription_options,
    normalize_topic_options,
    subscription_path,
)
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityNotFoundError,
    QuotaExceededError,
)
from ray_broker.filters import rule_from_wire, rule_to_wire
from ray_broker.router_requests import DATA_OPERATIONS, ReceiveRequest, decode_router_request, encode_router_reply
from ray_broker.routing import planner
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import RayChannel
from ray_broker.routing.router import Router
from ray_broker.sku import MAX_ENTITIES, get_sku
from ray_broker.wire import (
    AddRule,
    CreateEntity,
    DeleteEntity,
    ListEntities,
    RemoveRule,
    ListSessions,
    Runtime,
    UpdateEntity,
    UpdateRule,
)

from .gateway_handles import GatewayHandles
from .gateway_keys import GatewayKeys
from .handles import alive_nodes, find_actor, head_node
from .leadership import DecidedElsewhere, ReplicaSets

SWEEP_INTERVAL_S = 30.0
"""How often a gateway drops idle receivers and (the first gateway) deletes idle entities."""
AUTO_DELETE_TIMEOUT_S = 60.0
logger = logging.getLogger("ray_broker.gateway")
CALLER_CHECK_AFTER_S = 0.5
"""A receive that took longer than this (it waited) checks that its caller is still there."""
MAX_SUBSCRIPTIONS_PER_TOPIC = 2000
IMMUTABLE_OPTIONS = {"queue": IMMUTABLE_QUEUE_OPTIONS, "topic": IMMUTABLE_TOPIC_OPTIONS,
                     "subscription": IMMUTABLE_SUBSCRIPTION_OPTIONS}


class Gateway:
    """Gateway logic: management over a `Router`, and the routing table; `GatewayActor` is its Ray shell."""

    def __init__(self, config: NamespaceConfig, index: int = 0) -> None:
        self.config = config
        self.sku = get_sku(config.sku)
        self.count = config.partition_count
        self.handles: GatewayHandles | ReplicaSets | DecidedElsewhere = \
            GatewayHandles(config) if not config.replicated else ReplicaSets(config) if index == 0 \
            else DecidedElsewhere(config, lambda: gateway_actor(config, 0))
        """Where partition handles come from: made here, or with several replicas each partition's
        leader, decided here (the first gateway) or by the first gateway."""
        self.router = Router(config.name, RayChannel(self.count, self.handles), self.sku)
        self.keys = GatewayKeys(config, index, lambda: gateway_actor(config, 0))
        self.operations: dict[str, Callable[..., Awaitable[Any]]] = {
            "create_entity": self.create_entity, "create_subscription": self.create_subscription,
            "update_entity": self.update_entity, "delete_entity": self.delete_entity,
            "list_entities": self.list_entities, "add_rule": self.add_rule, "update_rule": self.update_rule,
            "remove_rule": self.remove_rule, "runtime": self.runtime, "list_sessions": self.list_sessions,
            "routing_table": self.routing_table, "partition_failed": self.partition_failed,
            "partition_unreachable": self.partition_unreachable, "drop_from_in_sync": self.drop_from_in_sync,
            "shared_access_keys": self.keys.listed, "add_shared_access_key": self.keys.add,
            "remove_shared_access_key": self.keys.remove, "delete_idle_entities": self.delete_idle_entities,
        }
        """The management operations the gateway serves itself, by name (data operations go to its router)."""

    # ------------------------------------------------------------------ routing table

    async def routing_table(self) -> dict[str, Any]:
        """Every partition's actor handle and epoch, for clients that call partitions directly (a
        `RoutingTable`, encoded)."""
        await self.handles.ready()
        if isinstance(self.handles, DecidedElsewhere):
            await self.handles.reload()
        return self.handles.table().encode()

    async def partition_failed(self, index: int, epoch: int) -> dict[str, Any]:
        """A client found partition `index` (as of `epoch`) dead for good: recreate it (with
        several replicas: find it a leader) unless that was done already, and return the current
        routing table (encoded)."""
        self._check_partition(index)
        if not isinstance(self.handles, GatewayHandles):
            await self.handles.ready()
            await self.handles.failed(index, epoch)
        elif self.handles.epochs[index] == epoch:
            try:
                await self.router.reach.call_one(index, ListEntities())
            except PartitionUnavailable:
                pass
        return self.handles.table().encode()

    async def drop_from_in_sync(self, index: int, proposal: list[Any]) -> str | None:
        """The leader of partition `index` asks to acknowledge without the followers its smaller
        in-sync set `proposal` (an `InSync`, encoded) leaves out: None once recorded, else why not."""
        self._check_partition(index)
        if not isinstance(self.handles, ReplicaSets) or not self.config.in_sync_set:
            raise InvalidOperationError(f"this gateway of namespace {self.config.name!r} keeps no in-sync "
                                        "sets: the first gateway of a namespace with min_in_sync below a majority does")
        return await self.handles.drop_from_in_sync(index, InSync.decode(proposal))

    def _check_partition(self, index: int) -> None:
        """`InvalidOperationError` unless partition `index` exists in this namespace."""
        if not 0 <= index < self.count:
            raise InvalidOperationError(f"partition {index} does not exist in namespace {self.config.name!r}")

    async def partition_unreachable(self, index: int, epoch: int) -> dict[str, Any]:
        """A client's calls to partition `index` (as of `epoch`) went unanswered, a quick probe
        too: recreate it if it answers here (`GatewayHandles.unreachable`; with several replicas
        the control plane's own watch judges leaders), and return the current routing table (encoded)."""
        self._check_partition(index)
        if not isinstance(self.handles, GatewayHandles):
            return await self.routing_table()
        await self.handles.unreachable(index, epoch)
        return self.handles.table().encode()

    # ------------------------------------------------------------------ entities

    async def create_entity(self, kind: str, name: str, options: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Create a queue or topic on every partition, after the tier, quota and uniqueness checks."""
        if kind == "topic":
            self.sku.require("topics", name)
            options = normalize_topic_options(options)
        else:
            options = normalize_queue_options(options)
        if SUBSCRIPTIONS_SEGMENT in name.lower():
            raise InvalidArgumentError(f"{kind} name {name!r} contains {SUBSCRIPTIONS_SEGMENT!r}, which names "
                                       "subscriptions; choose another name", entity=name)
        self._check_features(name, options)
        if self.sku.all_entities_partitioned:
            options["enable_partitioning"] = True
        existing = await self._check_new(name)
        counted = [d for d in existing if d["kind"] != "subscription"]
        if len(counted) >= MAX_ENTITIES:
            raise QuotaExceededError(f"namespace {self.config.name!r} already holds {MAX_ENTITIES} queues and topics; "
                                     "delete some before creating more", entity=name)
        quota = self.sku.partitioned_entity_quota
        if options["enable_partitioning"] and quota is not None:
            partitioned = sum(1 for d in counted if d["options"].get("enable_partitioning"))
            if partitioned >= quota:
                raise QuotaExceededError(
                    f"namespace {self.config.name!r} already holds {quota} partitioned queues and topics, the "
                    f"{self.sku.name} tier's limit; create {name!r} without enable_partitioning or delete one",
                    entity=name)
        return await self._create({"name": name, "kind": kind, "options": options}, timeout)

    async def create_subscription(self, topic: str, name: str, options: dict[str, Any], rule: dict[str, Any],
                                  timeout: float) -> dict[str, Any]:
        """Create a subscription of `topic` with its first rule, on every partition the topic lives on."""
        check_subscription_name(name)
        topic_definition = await self._definition_of(topic, "topic")
        options = normalize_subscription_options(options)
        path = subscription_path(topic_definition["name"], name)
        self._check_features(path, options)
        existing = await self._check_new(path)
        count = sum(1 for d in existing if d["kind"] == "subscription" and d["topic"].lower() == topic.lower())
        if count >= MAX_SUBSCRIPTIONS_PER_TOPIC:
            raise QuotaExceededError(f"topic {topic!r} already has {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions; "
                                     "delete some before creating more", entity=path)
        inherited = {key: topic_definition["options"][key] for key in INHERITED_TOPIC_OPTIONS}
        rule = {**rule_to_wire(rule_from_wire(rule)), "created_at": time.time()}
        return await self._create({"name": path, "kind": "subscription", "topic": topic_definition["name"],
                                   "subscription": name, "options": {**options, **inherited}, "rules": [rule]},
                                  timeout)

    async def _check_new(self, name: str) -> list[dict[str, Any]]:
        """Every entity, after checking that none is named `name`."""
        existing: list[dict[str, Any]] = await self.router.reach.any(ListEntities())
        clash = next((d for d in existing if d["name"].lower() == name.lower()), None)
        if clash is not None:
            raise MessagingEntityAlreadyExistsError(
                f"{clash['kind']} {clash['name']!r} already exists; names are unique regardless of case", entity=name)
        return existing

    async def _create(self, definition: dict[str, Any], timeout: float) -> dict[str, Any]:
        await self._check_forwarding(definition["name"], definition["kind"], definition["options"])
        now = time.time()
        definition = {**definition, "incarnation": uuid.uuid4().hex, "created_at": now, "updated_at": now}
        await self.router.reach.everywhere(CreateEntity(definition), deadline=time.monotonic() + timeout,
                                     entity=definition["name"])
        self.router.definitions.remember(definition)
        return definition

    async def _definition_of(self, name: str, kind: str) -> dict[str, Any]:
        """A fresh definition of an entity of `kind` (`MessagingEntityNotFoundError` for another kind)."""
        definition = await self.router.definitions.get(name, fresh=True)
        if definition["kind"] != kind:
            raise MessagingEntityNotFoundError(f"{name!r} is a {definition['kind']}, not a {kind}", entity=name)
        return definition

    def _check_features(self, name: str, options: dict[str, Any]) -> None:
        if options.get("requires_session"):
            self.sku.require("sessions", name)
        if options.get("requires_duplicate_detection"):
            self.sku.require("duplicate detection", name)
        if options.get("forward_to") or options.get("forward_dead_lettered_messages_to"):
            self.sku.require("auto-forwarding", name)

    async def _check_forwarding(self, name: str, kind: str, options: dict[str, Any]) -> None:
        """Refuse forwarding to an entity that is not an existing queue or topic of this namespace.
        A queue may forward to itself, as on Service Bus: the hop limit dead-letters each message
        after `MAX_TRANSFER_HOPS` rounds. A session-enabled entity forwards its messages with their
        session ids."""
        for option in ("forward_to", "forward_dead_lettered_messages_to"):
            target = options.get(option)
            if target is None:
                continue
            if target.lower() == name.lower():
                destination_kind = kind
            else:
                try:
                    destination_kind = (await self.router.definitions.get(target, fresh=True))["kind"]
                except MessagingEntityNotFoundError:
                    raise MessagingEntityNotFoundError(
                        f"{option} of {name!r} names {target!r}, which does not exist in namespace "
                        f"{self.config.name!r}; create it first", entity=name) from None
            if destination_kind not in ("queue", "topic"):
                raise InvalidOperationError(f"{option} of {name!r} names {target!r}, a {destination_kind}: "
                                            "messages can be forwarded to a queue or a topic", entity=name)

    async def update_entity(self, name: str, changes: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Change an entity's settings on every partition."""
        current = await self.router.definitions.get(name, fresh=True)
        kind = current["kind"]
        for key in IMMUTABLE_OPTIONS[kind]:
            if key in changes and changes[key] != current["options"][key]:
                raise InvalidOperationError(
                    f"{key} of {current['name']!r} cannot change after creation; create a new {kind} instead",
                    entity=name)
        if kind == "topic":
            options = normalize_topic_options(changes, base=current["options"])
        elif kind == "subscription":
            options = {**normalize_subscription_options(changes, base=current["options"]),
                       **{key: current["options"][key] for key in INHERITED_TOPIC_OPTIONS}}
        else:
            options = normalize_queue_options(changes, base=current["options"])
        self._check_features(name, options)
        await self._check_forwarding(current["name"], kind, options)
        definition = {**current, "options": options, "updated_at": time.time()}
        await self.router.reach.everywhere(UpdateEntity(definition), deadline=time.monotonic() + timeout, entity=name)
        self.router.definitions.remember(definition)
        return definition

    async def add_rule(self, subscription: str, rule: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Add a rule to a subscription on every partition; the rule as stored."""
        definition = await self._definition_of(subscription, "subscription")
        rule = {**rule_to_wire(rule_from_wire(rule)), "created_at": time.time()}
        if any(r["name"].lower() == rule["name"].lower() for r in definition.get("rules", ())):
            raise MessagingEntityAlreadyExistsError(
                f"subscription {definition['name']!r} already has a rule named {rule['name']!r}; delete it first or "
                "choose another name", entity=definition["name"])
        await self.router.reach.everywhere(AddRule(definition["name"], rule), deadline=time.monotonic() + timeout,
                                     entity=definition["name"])
        self.router.definitions.forget(definition["name"])
        return rule

    async def update_rule(self, subscription: str, rule: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Replace the filter and action of a subscription's rule on every partition; the rule as
        stored (its name as it was created, its creation time kept)."""
        definition = await self._definition_of(subscription, "subscription")
        rule = rule_to_wire(rule_from_wire(rule))
        current = next((r for r in definition.get("rules", ()) if r["name"].lower() == rule["name"].lower()), None)
        if current is None:
            raise MessagingEntityNotFoundError(
                f"subscription {definition['name']!r} has no rule named {rule['name']!r}; create it with create_rule",
                entity=definition["name"])
        rule = {**current, "filter": rule["filter"], "action": rule["action"]}
        await self.router.reach.everywhere(UpdateRule(definition["name"], rule), deadline=time.monotonic() + timeout,
                                     entity=definition["name"])
        self.router.definitions.forget(definition["name"])
        return rule

    async def remove_rule(self, subscription: str, name: str, timeout: float) -> None:
        """Remove a subscription's rule on every partition."""
        definition = await self._definition_of(subscription, "subscription")
        if not any(r["name"].lower() == name.lower() for r in definition.get("rules", ())):
            raise MessagingEntityNotFoundError(f"subscription {definition['name']!r} has no rule named {name!r}",
                                               entity=definition["name"])
        await self.router.reach.everywhere(RemoveRule(definition["name"], name), deadline=time.monotonic() + timeout,
                                     entity=definition["name"])
        self.router.definitions.forget(definition["name"])

    async def delete_entity(self, name: str, timeout: float) -> None:
        """Delete an entity and its messages on every partition (a topic's subscriptions with it)."""
        await self.router.definitions.get(name, fresh=True)
        await self.router.reach.everywhere(DeleteEntity(name), deadline=time.monotonic() + timeout, entity=name)
        self.router.definitions.forget(name)
        self.router.definitions.forget_subscriptions(name)

    async def list_entities(self, kind: str) -> list[dict[str, Any]]:
        """Every entity of one kind, in name order."""
        return [d for d in await self.router.reach.any(ListEntities()) if d["kind"] == kind]

    async def runtime(self, name: str) -> dict[str, Any]:
        """Per-partition counts (None where a partition did not answer) and the definition."""
        definition = await self.router.definitions.get(name)
        hosts = planner.hosts(definition, self.count)

        counts = await asyncio.gather(*(self._ask_host(k, Runtime(name)) for k in hosts))
        return {"definition": definition, "partitions": dict(zip(hosts, counts))}

    async def list_sessions(self, name: str, updated_after: float | None = None) -> dict[str, Any]:
        """The sessions of an entity with active messages or a stored state (with `updated_after`,
        epoch seconds: those whose state was set after it), in id order, and whether every
        partition answered (`complete`)."""
        hosts = planner.hosts(await self.router.definitions.get(name), self.count)
        found = await asyncio.gather(*(self._ask_host(k, ListSessions(name, updated_after)) for k in hosts))
        sessions = sorted({s for listed in found if listed is not None for s in listed})
        return {"sessions": sessions, "complete": None not in found}

    async def delete_idle_entities(self, now: float | None = None) -> list[str]:
        """Delete the entities that `auto_delete_on_idle` says have been idle long enough at `now`
        (epoch seconds; default: now), as `ray_broker.auto_delete` decides from each partition's
        last use of them; returns their names."""
        definitions = await self.router.reach.any(ListEntities())
        needed = watched(definitions)
        uses: dict[str, float | None] = {}
        for definition in definitions:
            if str(definition["name"]).lower() in needed:
                hosts = planner.hosts(definition, self.count)
                counts = await asyncio.gather(*(self._ask_host(k, Runtime(definition["name"])) for k in hosts))
                uses[str(definition["name"]).lower()] = last_use(None if c is None else c["accessed_at"]
                                                                 for c in counts)
        deleted: list[str] = []
        for name in idle_entities(definitions, uses, time.time() if now is None else now):
            try:
                await self.delete_entity(name, AUTO_DELETE_TIMEOUT_S)
            except MessagingEntityNotFoundError:
                continue  # a subscription of a topic deleted just before
            deleted.append(name)
        return deleted

    async def _ask_host(self, k: int, request: Any) -> Any:
        """A partition's answer to a read, or None when it is unavailable (asking a partition the
        call found dead for good and made again once more)."""
        epoch = self.handles.epochs[k]
        try:
            return await self.router.reach.call_one(k, request)
        except PartitionUnavailable:
            if self.handles.epochs[k] == epoch:
                return None
        try:
            return await self.router.reach.call_one(k, request)
        except PartitionUnavailable:
            return None


@ray.remote
class GatewayActor:
    """Gateway `i` of a namespace (a Ray shell over `Gateway`)."""

    def __init__(self, config: dict[str, Any], index: int = 0) -> None:
        self.gateway = Gateway(NamespaceConfig(**config), index)
        self.index = index
        self._sweeper: asyncio.Task[None] | None = None
        self._receiving: dict[str, set[asyncio.Task[Any]]] = {}
        """Receives under way here, by receiver id (`end_receive` ends them)."""
        self._watcher: asyncio.Task[None] | None = None

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.create_task(self._sweep_loop())
            if isinstance(self.gateway.handles, ReplicaSets):
                self._watcher = loop.create_task(self.gateway.handles.watch())
            elif isinstance(self.gateway.handles, DecidedElsewhere):
                self._watcher = loop.create_task(self.gateway.handles.keep_decider())

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            await self.gateway.router.receives.sweep_idle_receivers()
            if self.index == 0:
                try:
                    deleted = await self.gateway.delete_idle_entities()
                except Exception:  # noqa: BLE001 - the next round tries again
                    logger.exception("deleting idle entities failed")
                else:
                    if deleted:
                        logger.info("deleted idle entities (auto_delete_on_idle): %s", ", ".join(deleted))

    async def config(self) -> dict[str, Any]:
        """The namespace configuration."""
        return self.gateway.config.to_dict()

    async def call(self, operation: str, *args: Any, caller: Token | None = None) -> Any:
        """Invoke a gateway operation by name: management here, data operations through its router
        (a router request arrives as `router_requests.encode_router_request` gives it, and its
        reply goes back as `encode_router_reply` gives it).

        A receive that waited hands its messages only to a `caller` still there (see `callers`):
        those locked for one that died are released, no delivery counted."""
        self._ensure_sweeper()
        if operation != "partition_failed":
            await self.gateway.handles.ready()
        if operation in DATA_OPERATIONS:
            started = time.monotonic()
            request = decode_router_request([operation, *args])
            result = await (self._receive(request) if isinstance(request, ReceiveRequest)
                            else self.gateway.router.run(request))
            if (isinstance(request, ReceiveRequest) and result.messages
                    and time.monotonic() - started > CALLER_CHECK_AFTER_S and await caller_gone_async(caller)):
                result = await self.gateway.router.receives.receiver_gone(request, result)
            return encode_router_reply(result)
        admin = self.gateway.operations.get(operation)
        if admin is None:
            raise InvalidOperationError(f"the gateway has no operation {operation!r}; expected one of "
                                        f"{', '.join(sorted(DATA_OPERATIONS) + list(self.gateway.operations))}")
        return await admin(*args)

    async def _receive(self, request: ReceiveRequest) -> Any:
        """Run a receive as a task `end_receive` can end."""
        task = asyncio.ensure_future(self.gateway.router.run(request))
        running = self._receiving.setdefault(request.receiver_id, set())
        running.add(task)
        try:
            return await task
        finally:
            running.discard(task)
            if not running:
                self._receiving.pop(request.receiver_id, None)

    async def end_receive(self, receiver_id: str) -> None:
        """End the receives of `receiver_id` under way here (their caller stopped waiting): each
        ends with no messages, releasing what it had locked, no delivery counted. One that has
        already answered is left to its caller (`client.link.GatewayLink` releases what it got)."""
        for task in self._receiving.get(receiver_id, ()):
            task.cancel()

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()

    async def node(self) -> str:
        """The id of the node this gateway runs on (for operators and placement tests)."""
        return str(ray.get_runtime_context().get_node_id())


def gateway_actor(config: NamespaceConfig, index: int) -> Any:
    """Get gateway `index`, creating it if it does not exist.

    A new gateway goes to a node of its own while the cluster has a node per gateway
    (`spread_node`), pinned to it (Ray's soft affinity does not hold the spread); on a replicated
    namespace the first gateway, which decides leadership, goes to the head node, whose loss ends
    the cluster anyway, so that losing a worker never leaves leaders undecided while the decider
    is made again. When its node is lost, Ray cannot restart a gateway there: a client that finds
    it gone for good makes it again here, on a live node."""
    existing = find_actor(config.gateway_name(index))
    if existing is not None:
        return existing
    node = (head_node() if config.replicated and index == 0 else None) or spread_node(index, alive_nodes())
    placement = "SPREAD" if node is None else NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    return GatewayActor.options(
        name=config.gateway_name(index), namespace=RAY_NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, max_concurrency=10000, scheduling_strategy=placement,
    ).remote(config.to_dict(), index)
