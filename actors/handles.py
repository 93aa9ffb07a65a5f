"""A namespace's actors by name: lookup, placement, and partitions created if missing.

Every actor is named and detached in the "ray_broker" Ray namespace (the operations contract).
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_broker.config import (NODE_DATA_DIR_ENV, RAY_NAMESPACE, STORE_LABEL, NamespaceConfig, displaced,
                               replacement_node, store_node)
from ray_broker.engine.store_lock import last_holder

from .partition_actor import PartitionActor


HEAD_RESOURCE = "node:__internal_head__"
"""The resource Ray gives its head node alone."""
STORE_PROBE_TIMEOUT_S = 5.0
"""How long the nodes asked where a displaced partition's store is have to answer."""


def alive_nodes() -> list[str]:
    """The ids of the cluster's alive nodes."""
    return [node["NodeID"] for node in ray.nodes() if node["Alive"]]


def head_node() -> str | None:
    """The id of the cluster's head node while it is alive (None when none is known)."""
    return next((node["NodeID"] for node in ray.nodes() if node["Alive"] and HEAD_RESOURCE in node["Resources"]),
                None)


def _placement(config: NamespaceConfig, index: int, node: str | None = None) -> dict[str, Any]:
    """Where partition `index` (a replica's `slot`, with several replicas) may run: on the node its
    store is on, or anywhere, spread over the nodes, when stores are shared or in memory.

    A partition placed by store label runs only where that label is, so after losing its node it
    comes back when the label (and so its disk) does. A partition placed by node id is pinned to
    that node while it is alive; a node id never comes back (a returning node gets a new one), so
    once it is gone a partition of one replica is made on `node`, a live node found to see its very
    store (`store_node_of`), and otherwise stays pinned to the lost node, down, until one does: it is
    never started on another disk. A replica is made on a live node that holds no other replica of
    its partition (`replacement_node`), where it starts empty or from what that node's disk holds,
    and its leader brings it up to date."""
    if config.placement is None:
        return {"scheduling_strategy": "SPREAD"}
    kind, _, value = config.placement[index].partition(":")
    if kind == "label":
        return {"label_selector": {STORE_LABEL: value}}
    if config.replicated:
        alive = alive_nodes()
        if displaced(config, index, alive):
            value = replacement_node(config, index, alive, _sibling_nodes(config, index)) or value
    elif node is not None:
        value = node
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=value, soft=False)}


@ray.remote(num_cpus=0)
def _store_holder(config: dict[str, Any], index: int) -> str | None:
    """On the node it runs on: the node that partition `index`'s store there was last held by."""
    path = NamespaceConfig(**config).store_path(index, os.environ.get(NODE_DATA_DIR_ENV))
    holder = None if path is None else last_holder(path)
    return None if holder is None else holder.node


async def store_node_of(config: NamespaceConfig, index: int, last_node: str) -> str | None:
    """A live node that sees the store partition `index` (of one replica) last ran on, on node
    `last_node`, asking every live node what it finds (`store_node`); None when none does, or none
    answers in `STORE_PROBE_TIMEOUT_S`."""
    alive = alive_nodes()
    asked = {node: asyncio.wrap_future(_store_holder.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(
            config.to_dict(), index).future()) for node in alive}
    if asked:
        await asyncio.wait(asked.values(), timeout=STORE_PROBE_TIMEOUT_S)
    views = {node: answer.result() if answer.done() and answer.exception() is None else None
             for node, answer in asked.items()}
    return store_node(index, views, last_node)


def _sibling_nodes(config: NamespaceConfig, slot: int) -> set[str]:
    """The nodes the other replicas of a replica's (`slot`) partition run on now (by Ray's actor table)."""
    from ray._private import state

    index, replica = divmod(slot, config.replicas)
    nodes = set()
    for r in range(config.replicas):
        handle = None if r == replica else find_actor(config.replica_name(index, r))
        if handle is None:
            continue
        try:
            record = dict(state.actors(actor_id=handle._actor_id.hex()) or {})
        except Exception:  # noqa: BLE001 - an actor table that cannot be read names no node
            continue
        node = (record.get("Address") or {}).get("NodeID")
        if node and record.get("State") == "ALIVE":
            nodes.add(str(node))
    return nodes


def partition_actor(config: NamespaceConfig, index: int, replica: int = 0, node: str | None = None) -> Any:
    """Get partition `index` (its replica `replica`), creating it (from its store) if it does not exist;
    a partition of one replica whose node is gone is created on `node` (see `_placement`).

    Its calls record no task events (Ray's per-task history for the dashboard): a partition serves
    one call per batch, and the recording costs each call about 0.1 ms here. Its default group runs
    `config.call_threads` calls at once (waiting receives have a group of their own).

    Calls run as they arrive, not in each caller's submission order (`allow_out_of_order_execution`):
    no caller has two calls of one kind in flight that depend on each other's order, and in order
    a call whose message Ray lost on the way (a restarted process, a starved machine) held every
    later call of its caller back, for good while that caller kept calling: a replica made again
    after its node's loss on a starved machine answered its leader and, for minutes, no other
    caller whose call had been lost."""
    return PartitionActor.options(
        name=config.replica_name(index, replica), namespace=RAY_NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, enable_task_events=False, max_concurrency=config.call_threads,
        allow_out_of_order_execution=True,
        **_placement(config, config.slot(index, replica), node),
    ).remote(config.to_dict(), index, replica)


def find_actor(name: str) -> Any | None:
    """A named actor of the broker, or None if there is none."""
    try:
        return ray.get_actor(name, namespace=RAY_NAMESPACE)
    except ValueError:
        return None
