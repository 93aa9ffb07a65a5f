"""A namespace's actors by name: lookup, placement, and partitions created if missing.

Every actor is named and detached in the "ray_broker" Ray namespace (the operations contract).
"""
from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_broker.config import RAY_NAMESPACE, STORE_LABEL, NamespaceConfig

from .partition_actor import PartitionActor


def _placement(config: NamespaceConfig, index: int) -> dict[str, Any]:
    """Where partition `index` may run: on the node its store is on (by that node's store label,
    else its id), or anywhere, spread over the nodes, when stores are shared or in memory."""
    if config.placement is None:
        return {"scheduling_strategy": "SPREAD"}
    kind, _, value = config.placement[index].partition(":")
    if kind == "label":
        return {"label_selector": {STORE_LABEL: value}}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=value, soft=False)}


def partition_actor(config: NamespaceConfig, index: int) -> Any:
    """Get partition `index`, creating it (from its store) if it does not exist.

    Its calls record no task events (Ray's per-task history for the dashboard): a partition serves
    one call per batch, and the recording costs each call about 0.1 ms here."""
    return PartitionActor.options(
        name=config.partition_name(index), namespace=RAY_NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, enable_task_events=False, **_placement(config, index),
    ).remote(config.to_dict(), index)


def find_actor(name: str) -> Any | None:
    """A named actor of the broker, or None if there is none."""
    try:
        return ray.get_actor(name, namespace=RAY_NAMESPACE)
    except ValueError:
        return None
