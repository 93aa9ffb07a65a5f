"""A partition made on another node than the one it is placed on by id (that node is gone, see
`actors.handles`) starts from whatever store it finds there, often none: it takes the namespace's
entities from another partition, so that it serves them as soon as it answers."""
from __future__ import annotations

import logging

import ray
from ray.exceptions import RayError

from ray_broker.config import RAY_NAMESPACE, NamespaceConfig, pinned_node
from ray_broker.engine.partition import PartitionEngine
from ray_broker.wire import ListEntities, encode

SEED_TIMEOUT_S = 5.0
"""How long a partition waits for each other partition's entities before asking the next one."""
logger = logging.getLogger("ray_broker.partition")


def away_from_home(config: NamespaceConfig, index: int, node_id: str) -> bool:
    """Whether partition `index`, running on node `node_id`, is placed by the id of another node."""
    home = pinned_node(config, index)
    return home is not None and home != node_id


def seed_entities(config: NamespaceConfig, index: int, engine: PartitionEngine) -> int:
    """Copy every entity definition of the first other partition that answers into `engine`
    (topics before their subscriptions); how many were copied (0 when none answered)."""
    for k in (j for j in range(config.partition_count) if j != index):
        try:
            other = ray.get_actor(config.partition_name(k), namespace=RAY_NAMESPACE)
            definitions = ray.get(other.run.remote(*encode(ListEntities())), timeout=SEED_TIMEOUT_S)
        except (ValueError, RayError):
            continue
        for definition in sorted(definitions, key=lambda d: d["kind"] == "subscription"):
            engine.create_entity(definition)
        return len(definitions)
    logger.warning("partition %d of namespace %r started away from its node with no entities, and no other "
                   "partition answered with them", index, config.name)
    return 0
