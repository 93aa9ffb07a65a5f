"""A namespace's fixed configuration, persisted beside its stores."""
from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from . import codec
from .engine.store import DURABILITY_MODES
from .errors import InvalidArgumentError, InvalidOperationError, UnauthorizedError
from .keys.sas import SasKey, root_keys
from .sku import Sku, get_sku, partition_count_for

RAY_NAMESPACE = "ray_broker"
MAX_GATEWAYS = 16
MAX_REPLICAS = 7
_NAMESPACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,49}$")
_CONFIG_FILE = "namespace.msgpack"
_NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "ceph", "fuse.sshfs", "glusterfs", "lustre", "gpfs",
                        "fuse.s3fs", "fuse.gcsfuse", "beegfs", "9p")


def partition_actor_name(namespace: str, index: int) -> str:
    """The Ray actor name of partition `index` of namespace `namespace` (the operations contract)."""
    return f"{namespace}.partition.{index}"


def replica_actor_name(namespace: str, index: int, replica: int) -> str:
    """The Ray actor name of replica `replica` of partition `index` when partitions have several
    (the operations contract)."""
    return f"{namespace}.partition.{index}.{replica}"


def gateway_actor_name(namespace: str, index: int) -> str:
    """The Ray actor name of gateway `index` of namespace `namespace` (the operations contract)."""
    return f"{namespace}.gateway.{index}"


def amqp_frontend_actor_name(namespace: str, index: int) -> str:
    """The Ray actor name of AMQP front end `index` of namespace `namespace`."""
    return f"{namespace}.amqp.{index}"


@dataclass(frozen=True)
class NamespaceConfig:
    """What a namespace is: fixed at creation, shared by every actor and client of it."""

    name: str
    sku: str
    partition_count: int
    data_dir: str | None
    durability: str
    gateways: int
    placement: tuple[str, ...] | None
    """Where each partition runs: a `node_key` per partition (its stores are on that node's disk),
    or None when partitions may run anywhere (shared storage, or none)."""
    auth_token_hash: str | None = None
    """SHA-256 of the token every client must present (`auth_token`), or None for none."""
    call_threads: int = 1
    """How many calls each partition takes at once: with more than one, calls that meet share one
    store commit (group commit; see `GROUP_COMMIT_ENV`)."""
    replicas: int = 1
    """Copies of every partition, each an actor with a store of its own on a node of its own; with
    more than one, one leads and the others follow (see `replica_name`, `slot`)."""
    amqp_port: int | None = None
    """The port the AMQP 1.0 front end serves the Azure SDKs on, or None for no front end."""
    sas_keys: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """The namespace's shared access keys, `(name, key, rights)`, which SAS tokens (the Azure
    SDKs' connection strings) are signed with; made at creation and kept with the stores."""
    management_port: int | None = None
    """A port the AMQP front end serves the management API on over plain HTTP alone (as Microsoft's
    emulator does on 5300), besides the AMQP port (which serves it too); None for none."""
    listen_host: str | None = None
    """The address the AMQP front end listens on (`ray-broker emulator --host`); None for every
    interface of its node."""
    min_in_sync: int | None = None
    """How many replicas (the leader included) must hold a change before it is acknowledged;
    None for a majority. Below a majority (1 of 2) the partition keeps an in-sync set
    (`engine.in_sync`), so it can fail over to a replica holding every acknowledged change."""

    def shared_access_keys(self) -> tuple[SasKey, ...]:
        """The namespace's shared access keys."""
        return tuple(SasKey(name, key, tuple(rights)) for name, key, rights in self.sas_keys)

    def amqp_frontend_name(self, index: int = 0) -> str:
        """The Ray actor name of AMQP front end `index`."""
        return amqp_frontend_actor_name(self.name, index)

    @property
    def replicated(self) -> bool:
        """Whether partitions have several replicas."""
        return self.replicas > 1

    @property
    def majority(self) -> int:
        """A majority of the replicas: an election needs that many answers (without an in-sync set)."""
        return self.replicas // 2 + 1

    @property
    def required_copies(self) -> int:
        """How many replicas must hold a change before it is acknowledged: `min_in_sync`, else a
        majority, so that any majority still reachable after a loss holds every acknowledged change."""
        return self.min_in_sync or self.majority

    @property
    def in_sync_set(self) -> bool:
        """Whether partitions keep an in-sync set (`engine.in_sync`): `min_in_sync` below a majority."""
        return self.replicated and self.required_copies < self.majority

    def slot(self, index: int, replica: int = 0) -> int:
        """The place of replica `replica` of partition `index` among all replicas (in `placement`)."""
        return index * self.replicas + replica

    def replica_name(self, index: int, replica: int) -> str:
        """The Ray actor name of a replica: the partition's own name with one replica."""
        return replica_actor_name(self.name, index, replica) if self.replicated else self.partition_name(index)

    def partition_name(self, index: int) -> str:
        """The Ray actor name of partition `index`."""
        return partition_actor_name(self.name, index)

    def gateway_name(self, index: int) -> str:
        """The Ray actor name of gateway `index`."""
        return gateway_actor_name(self.name, index)

    def store_path(self, index: int, node_data_dir: str | None = None, replica: int = 0) -> str | None:
        """Where partition `index` (its replica `replica`) keeps its database (None for durability
        "memory"): in `data_dir`, or under `node_data_dir/<name>` on a node that names its own
        (`NODE_DATA_DIR_ENV`)."""
        if self.data_dir is None:
            return None
        directory = self.data_dir if node_data_dir is None else os.path.join(node_data_dir, self.name)
        suffix = f"-replica-{replica}" if self.replicated else ""
        return os.path.join(directory, f"partition-{index:03d}{suffix}.sqlite3")

    def store_paths(self) -> list[tuple[int, str]]:
        """Every store path of the namespace in `data_dir` (none in memory), each with its partition."""
        paths = ((k, self.store_path(k, None, r)) for k in range(self.partition_count) for r in range(self.replicas))
        return [(k, p) for k, p in paths if p is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


AUTH_TOKEN_ENV = "RAY_BROKER_AUTH_TOKEN"
STORE_LABEL = "ray-broker-store"
"""A node label naming the disk a node keeps stores on. Partitions placed on a labelled node are
pinned to the label, so after losing the node they come back only where that label (and so that
disk) comes back; partitions on an unlabelled node are pinned to its node id for one start."""
GROUP_COMMIT_ENV = "RAY_BROKER_GROUP_COMMIT"
"""Set to "on" where a namespace is first started to give its partitions `GROUP_COMMIT_THREADS`
call threads, so that concurrent calls share store commits (group commit); by default a partition
takes one call at a time. Kept in the namespace's configuration."""
GROUP_COMMIT_THREADS = 32
NODE_DATA_DIR_ENV = "RAY_BROKER_NODE_DATA_DIR"
"""Set on a node (e.g. `ray start` with it in the environment): the directory under which the
partitions placed there keep their stores, instead of the namespace's `data_dir`."""


def node_key(node_id: str, store_label: str | None) -> str:
    """How a namespace names a node it places partitions on: by its store label, else its id."""
    return f"label:{store_label}" if store_label else f"node:{node_id}"


def place_partitions(count: int, nodes: list[tuple[str, str | None]], local_node: str,
                     stored: tuple[str, ...] | None) -> tuple[str, ...]:
    """Each partition's node (`node_key`s): spread round robin over the alive `nodes` (`(node_id,
    store label)`) for a new namespace; for one started before, where it was, except that a
    partition pinned to a node id that is gone (Ray gives a restarted node a new id) goes to
    `local_node`, the starting node, whose disk holds its store."""
    alive = sorted({node_key(node_id, label) for node_id, label in nodes})
    if stored is None or len(stored) != count:
        return tuple(alive[k % len(alive)] for k in range(count))
    return tuple(home if home.startswith("label:") or home in alive else node_key(local_node, None)
                 for home in stored)


def spread_node(index: int, alive: list[str]) -> str | None:
    """The node (id) gateway `index` goes to: gateways take the `alive` nodes one each, in node-id
    order, and share them round robin only when there are fewer nodes than gateways; None when no
    node is known."""
    nodes = sorted(set(alive))
    return nodes[index % len(nodes)] if nodes else None


def pinned_node(config: NamespaceConfig, index: int) -> str | None:
    """The id of the node partition `index` is placed on by id, or None when it is placed by store
    label or not placed at all."""
    home = None if config.placement is None else config.placement[index]
    return home.removeprefix("node:") if home is not None and home.startswith("node:") else None


def displaced(config: NamespaceConfig, index: int, alive: list[str]) -> bool:
    """Whether partition `index` is pinned by id to a node that is no longer among the `alive` ones
    (a node id never comes back: a returning node gets a new one)."""
    node = pinned_node(config, index)
    return node is not None and node not in alive


def replacement_node(config: NamespaceConfig, slot: int, alive: list[str], occupied: set[str]) -> str | None:
    """Where a replica (`slot`) placed by id on a node that is gone is made again: an `alive` node
    that none of its partition's other replicas is placed on by id or runs on now (`occupied`),
    taken by replica number so that two replicas displaced at once go to different nodes; None when
    every alive node holds one."""
    index, replica = divmod(slot, config.replicas)
    siblings = {pinned_node(config, config.slot(index, r)) for r in range(config.replicas) if r != replica}
    free = [node for node in sorted(set(alive)) if node not in siblings and node not in occupied]
    return free[replica % len(free)] if free else None


def store_node(index: int, views: dict[str, str | None], last_node: str) -> str | None:
    """Where partition `index` of one replica, placed by the id of a node that is gone, may be made
    again: on a live node that sees the very store the partition last ran on, and nowhere else.

    `views` holds, for each live node asked, the node that the partition's store *as that node
    sees it* was last held by (its lock file's record), or None where it finds no store. A node
    whose store was last held by `last_node`, the node the partition last ran on, sees that store
    (on one machine, or storage mounted on both); a node that finds no store, or another one, does
    not, and the partition is never made there: it would serve an empty store and leave two
    stores of one partition once its node returns. None when no node sees the store: the
    partition stays down until its disk comes back with a node.

    >>> store_node(0, {"a": "gone", "b": None, "c": "gone"}, "gone")
    'a'
    >>> store_node(0, {"b": None, "c": "c"}, "gone") is None
    True
    """
    seeing = sorted(node for node, holder in views.items() if holder == last_node)
    return seeing[index % len(seeing)] if seeing else None


def token_hash(auth_token: str | None) -> str | None:
    """The hash a namespace keeps of `auth_token` (else of `$RAY_BROKER_AUTH_TOKEN`), or None."""
    token = auth_token if auth_token is not None else os.environ.get(AUTH_TOKEN_ENV) or None
    if token is None:
        return None
    if not isinstance(token, str) or not token:
        raise InvalidArgumentError(f"auth_token must be a non-empty str, got {type(token).__name__}")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_auth_token(config: NamespaceConfig, auth_token: str | None) -> None:
    """Raise `UnauthorizedError` unless `auth_token` (else `$RAY_BROKER_AUTH_TOKEN`) is the token
    namespace `config` was started with (a namespace started without one takes any client)."""
    if config.auth_token_hash is None:
        return
    presented = token_hash(auth_token)
    if presented is None:
        raise UnauthorizedError(f"namespace {config.name!r} requires an auth token: pass auth_token= or set "
                                f"{AUTH_TOKEN_ENV}")
    if not hmac.compare_digest(presented, config.auth_token_hash):
        raise UnauthorizedError(f"the auth token presented for namespace {config.name!r} is not the one it was "
                                "started with; use that token")


def check_namespace_name(name: Any) -> str:
    """Namespace names: a letter, then up to 49 letters, digits or hyphens."""
    if not isinstance(name, str) or not _NAMESPACE_RE.match(name):
        raise InvalidArgumentError(
            f"namespace name {name!r} is invalid: start with a letter, then use up to 49 letters, digits or hyphens")
    return name


def default_data_dir(name: str) -> str:
    """`$RAY_BROKER_HOME/<name>`, or `~/.ray_broker/<name>`."""
    home = os.environ.get("RAY_BROKER_HOME") or os.path.join(os.path.expanduser("~"), ".ray_broker")
    return os.path.join(home, name)


def is_shared_filesystem(path: str) -> bool:
    """Whether `path` lies on a network filesystem (then partitions may restart on any node)."""
    path = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
                    if len(parts[1]) > len(best):
                        best, fstype = parts[1], parts[2]
    except OSError:
        return False
    return fstype in _NETWORK_FILESYSTEMS


def store_directory(name: str, data_dir: str | None) -> str:
    """The absolute directory of a namespace's stores: `data_dir`, else `default_data_dir(name)`."""
    return os.path.abspath(os.path.expanduser(data_dir or default_data_dir(name)))


def check_start_options(name: str, *, sku: str, partitions: int | None, gateways: int,
                        durability: str, replicas: int = 1, amqp_port: int | None = None,
                        management_port: int | None = None, any_tier_partitions: bool = False,
                        min_in_sync: int | None = None) -> tuple[Sku, int]:
    """Validate `start` arguments on their own, before anything starts: the tier and the partition
    count they give (`partitions` on any tier with `any_tier_partitions`)."""
    check_namespace_name(name)
    _check_port("amqp_port", amqp_port)
    _check_port("management_port", management_port)
    if management_port is not None and amqp_port is None:
        raise InvalidArgumentError("management_port needs amqp_port: the AMQP front end serves the management "
                                   "API; pass amqp_port too (the SDKs' port, 5672 as a rule)")
    if management_port is not None and management_port == amqp_port:
        raise InvalidArgumentError(f"management_port and amqp_port are both {amqp_port}; the AMQP port serves "
                                   "the management API already, so leave management_port out or pick another port")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidArgumentError(f"replicas must be an int from 1 to {MAX_REPLICAS}, got {replicas!r}")
    check_min_in_sync(min_in_sync, replicas)
    tier = get_sku(sku)
    count = partition_count_for(tier, partitions, any_tier=any_tier_partitions)
    if isinstance(gateways, bool) or not isinstance(gateways, int) or not 1 <= gateways <= MAX_GATEWAYS:
        raise InvalidArgumentError(f"gateways must be an int from 1 to {MAX_GATEWAYS}, got {gateways!r}")
    if durability not in DURABILITY_MODES:
        raise InvalidArgumentError(f"durability must be one of {', '.join(DURABILITY_MODES)}, got {durability!r}")
    return tier, count


def check_min_in_sync(min_in_sync: object, replicas: int) -> None:
    """InvalidArgumentError unless `min_in_sync` is None or a copy count from 1 to `replicas`
    (more than one replica)."""
    if min_in_sync is None:
        return
    if isinstance(min_in_sync, bool) or not isinstance(min_in_sync, int) or not 1 <= min_in_sync <= replicas:
        raise InvalidArgumentError(f"min_in_sync must be None or an int from 1 to replicas ({replicas}), "
                                   f"got {min_in_sync!r}")
    if replicas == 1:
        raise InvalidArgumentError("min_in_sync needs replicas > 1: it says how many of a partition's replicas "
                                   "must hold a change before it is acknowledged")


def _check_port(option: str, port: object) -> None:
    """InvalidArgumentError unless `port` is None or a TCP port number."""
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
        raise InvalidArgumentError(f"{option} must be None or a port number from 1 to 65535, got {port!r}")


def stored_config_for(name: str, tier: Sku, count: int, directory: str) -> NamespaceConfig | None:
    """The configuration stored in `directory` (read only), if any, once checked against the tier
    and partition count a new start asks for (`InvalidOperationError`: they can never change)."""
    stored = load_config(directory)
    if stored is not None and (stored.sku != tier.name or stored.partition_count != count):
        raise InvalidOperationError(
            f"namespace {name!r} in {directory} was created as sku={stored.sku!r} with "
            f"{stored.partition_count} partitions; the partition count and tier can never change "
            f"(asked for sku={tier.name!r}, {count} partitions). Use another name or data_dir.")
    return stored


def plan_config(name: str, *, sku: str, partitions: int | None, data_dir: str | None, gateways: int,
                durability: str, nodes: list[tuple[str, str | None]], local_node: str,
                auth_token_hash: str | None = None, replicas: int = 1,
                amqp_port: int | None = None, management_port: int | None = None,
                any_tier_partitions: bool = False, listen_host: str | None = None,
                shared_access_keys: tuple[SasKey, ...] | None = None,
                min_in_sync: int | None = None) -> NamespaceConfig:
    """Validate `start` arguments, reconcile them with a configuration already on disk (read only)
    and place the partitions; `nodes` are the cluster's alive nodes (`(node_id, store label)`),
    `local_node` the id of the one starting the namespace.

    With several `replicas`, every replica is placed (`slot` order), those of a partition on
    distinct nodes (distinct store labels where nodes have them), in memory and on shared storage
    too; more replicas than such nodes is refused. The shared access keys are `shared_access_keys`
    when given (only `ray-broker emulator` gives them: the emulator's published key), else those
    stored, else new ones (`RootManageSharedAccessKey`). `any_tier_partitions` and `listen_host`
    as `check_start_options` and `NamespaceConfig` say."""
    tier, count = check_start_options(name, sku=sku, partitions=partitions, gateways=gateways, durability=durability,
                                      replicas=replicas, amqp_port=amqp_port, management_port=management_port,
                                      any_tier_partitions=any_tier_partitions, min_in_sync=min_in_sync)
    threads = GROUP_COMMIT_THREADS if os.environ.get(GROUP_COMMIT_ENV, "").lower() == "on" else 1
    directory = None if durability == "memory" else store_directory(name, data_dir)
    stored = None if directory is None else stored_config_for(name, tier, count, directory)
    if stored is not None and stored.replicas != replicas:
        raise InvalidOperationError(f"namespace {name!r} in {directory} was created with replicas={stored.replicas}; "
                                    f"the replica count can never change (asked for {replicas}). Start it with "
                                    f"replicas={stored.replicas}, or use another name or data_dir.")
    if stored is not None and stored.min_in_sync != min_in_sync:
        raise InvalidOperationError(f"namespace {name!r} in {directory} was created with min_in_sync="
                                    f"{stored.min_in_sync}; it can never change (asked for {min_in_sync}), since "
                                    "which replicas hold every acknowledged change depends on it. Start it with "
                                    f"min_in_sync={stored.min_in_sync}, or use another name or data_dir.")
    if replicas > 1:
        check_replica_nodes(replicas, nodes)
        placement: tuple[str, ...] | None = place_partitions(
            count * replicas, nodes, local_node, None if stored is None else stored.placement)
    elif directory is None or is_shared_filesystem(directory):
        placement = None
    else:
        placement = place_partitions(count, nodes, local_node, None if stored is None else stored.placement)
    keys = tuple((k.name, k.key, tuple(k.rights)) for k in shared_access_keys) if shared_access_keys else \
        stored.sas_keys if stored is not None and stored.sas_keys else \
        tuple((k.name, k.key, k.rights) for k in root_keys())
    return NamespaceConfig(name, tier.name, count, directory, durability, gateways, placement, auth_token_hash,
                           threads, replicas, amqp_port, keys, management_port, listen_host, min_in_sync)


def check_replica_nodes(replicas: int, nodes: list[tuple[str, str | None]]) -> None:
    """Refuse `replicas` copies of each partition when the alive `nodes` cannot hold them on
    distinct nodes (nodes with one store label count once)."""
    distinct = {node_key(node_id, label) for node_id, label in nodes}
    if len(distinct) < replicas:
        raise InvalidOperationError(
            f"replicas={replicas} needs {replicas} nodes with distinct stores (distinct {STORE_LABEL} labels where "
            f"nodes have one); the cluster has {len(distinct)}. Add nodes, or start with replicas <= {len(distinct)}")


def save_config(config: NamespaceConfig) -> None:
    """Record a namespace's configuration in its `data_dir` (nothing for durability "memory")."""
    if config.data_dir is None:
        return
    os.makedirs(config.data_dir, exist_ok=True)
    with open(os.path.join(config.data_dir, _CONFIG_FILE), "wb") as out:
        out.write(codec.packb(config.to_dict()))


def load_config(directory: str) -> NamespaceConfig | None:
    """The configuration stored in `directory`, if any."""
    path = os.path.join(directory, _CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as src:
        stored = codec.unpackb(src.read())
    stored.pop("node_id", None)  # written before partitions were placed one by one
    placement = stored.get("placement")
    stored["placement"] = None if placement is None else tuple(placement)
    stored["sas_keys"] = tuple((name, key, tuple(rights)) for name, key, rights in stored.get("sas_keys", ()))
    return NamespaceConfig(**stored)
