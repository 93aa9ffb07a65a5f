"""Starting, connecting to and stopping namespaces: finding the Ray cluster, then the actors.

Which Ray a call uses, in order: the one this process already joined; `address` ("local" means
a new embedded Ray, "auto" the `ray start` head of this machine); `RAY_ADDRESS`; the `ray start`
head of this machine when one is running; else (for `start` only) a new embedded local Ray that
lives as long as this process. Joining never passes settings that only a new cluster takes, and
an address where no Ray head answers (nothing listens, something that is no GCS, a Ray Client
`ray://` address) fails within seconds with `ClusterUnreachableError` (see `reach.py`).

Each of `start`, `connect` and `stop` is a flow (see `flow.py`) of lifecycle steps: waits on Ray
object refs, pauses, and calls that have no awaitable form (joining or starting Ray, creating and
killing actors, removing stores). `run_blocking` runs a flow in the calling thread; `run_awaiting`
runs it on the caller's event loop, awaiting refs and pauses and running those blocking calls on a
thread that lives as long as the process (`blocking.py`: a local Ray dies with the thread that
started it).

The only client module that imports `actors`.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Generator, Mapping, TypeVar, Union

import ray
from ray.exceptions import GetTimeoutError

from ..config import (
    RAY_NAMESPACE,
    STORE_LABEL,
    NamespaceConfig,
    check_auth_token,
    check_namespace_name,
    check_start_options,
    gateway_actor_name,
    load_config,
    plan_config,
    save_config,
    token_hash,
)
from ..engine.store_lock import holder_of, refusal
from ..errors import (
    ClusterUnreachableError,
    NamespaceNotRunningError,
    RayStartupError,
    ReplicationWarning,
    StoreLockedError,
)
from ..keys.sas import SasKey
from .blocking import BLOCKING
from .flow import drive, drive_async
from .front_end_checks import check_amqp_extra, check_ports_free
from .ray_notices import silence_ray_notices
from .reach import check_ray_head

logger = logging.getLogger("ray_broker")

LOCAL_RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 1024 * 1024}
"""Settings for a local Ray that the library starts: a batch of messages (up to 1 MB on premium)
travels inline with its call instead of through the object store. A cluster the library joins
keeps its own settings (Ray takes them only when a cluster starts)."""

LOCAL_RAY_ATTEMPTS = 2
"""How often the library tries to start a local Ray: under load its processes may miss Ray's
start-up deadline once (Ray then raises "The current node timed out during startup")."""

DEPLOY_TIMEOUT_S = 120.0
"""How long `start` waits for a new namespace's actors to answer."""
TEARDOWN_WAIT_S = 30.0
"""How long `stop` waits for killed partitions to let go of their stores before deleting them."""
_RUNNING_CONFIG_TIMEOUT_S = 120.0
STORE_POLL_S = 0.05
"""How often `stop` looks whether killed partitions let go of their stores."""

T = TypeVar("T")

NO_FAILOVER_WITH_TWO_REPLICAS = (
    "replicas=2 cannot fail over: a change is acknowledged only once both replicas hold it (a majority of 2), so "
    "losing either node stops each partition's keyed traffic until that node returns; use replicas=3 for failover, "
    "or min_in_sync=1 to go on with the replica that holds every acknowledged change")
"""Why `start` warns of `replicas=2` (README, Replication)."""


@dataclass(frozen=True)
class Wait:
    """Wait up to `timeout` seconds for a Ray object ref (or every ref of a list); the step's reply
    is its value (or their values)."""

    refs: Any
    timeout: float


@dataclass(frozen=True)
class Pause:
    """Sleep for `seconds`."""

    seconds: float


@dataclass(frozen=True)
class Blocking:
    """Call `function(*args)`: a call with no awaitable form, which an event loop runs on the blocking thread."""

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()


Step = Union[Wait, Pause, Blocking]
LifecycleFlow = Generator[Step, Any, T]
"""A lifecycle operation: yields `Step`s, is sent their results, returns the operation's result."""


def run_blocking(flow: LifecycleFlow[T]) -> T:
    """Run a lifecycle flow in this thread."""
    return drive(flow, _done)


async def run_awaiting(flow: LifecycleFlow[T]) -> T:
    """Run a lifecycle flow on the running event loop without blocking it: refs and pauses are
    awaited; `Blocking` steps (joining or starting Ray, creating or killing actors, removing stores:
    Ray offers no awaitable form of them) run on a thread that lives as long as the process."""
    return await drive_async(flow, _awaited)


def _done(step: Step) -> Any:
    if isinstance(step, Pause):
        return time.sleep(step.seconds)
    if isinstance(step, Blocking):
        return step.function(*step.args)
    return ray.get(step.refs, timeout=step.timeout)


async def _awaited(step: Step) -> Any:
    if isinstance(step, Pause):
        return await asyncio.sleep(step.seconds)
    if isinstance(step, Blocking):
        return await BLOCKING.run(step.function, *step.args)
    refs = step.refs if isinstance(step.refs, list) else [step.refs]
    try:
        values = await asyncio.wait_for(asyncio.gather(*refs), step.timeout)
    except asyncio.TimeoutError:
        raise GetTimeoutError(f"no answer from Ray within {step.timeout:g} s") from None
    return values if isinstance(step.refs, list) else values[0]


def local_head_address() -> str | None:
    """The address of the cluster that `ray start` last started on this machine, if it still runs."""
    from ray._private.services import find_gcs_addresses
    from ray._private.utils import read_ray_address

    bootstrap = read_ray_address()
    return bootstrap if bootstrap and bootstrap in find_gcs_addresses() else None


def cluster_address(address: str | None = None) -> str | None:
    """The Ray cluster to join, or None when none is named or running here (a new local Ray then).

    `address` wins ("local" forces a new local Ray; "auto" means this machine's `ray start` head),
    then `RAY_ADDRESS`, then this machine's running `ray start` head. That head is returned as
    "auto", because only Ray's "auto" join presents the machine's Ray auth token
    (`~/.ray/auth_token`) without `RAY_AUTH_MODE=token` set.
    """
    return _resolve(address)[0]


def _resolve(address: str | None) -> tuple[str | None, str | None]:
    """`(what to pass to ray.init, the host:port to probe first)` for `address` (see
    `cluster_address`); this machine's processes are searched for its head once."""
    wanted = address or os.environ.get("RAY_ADDRESS") or None
    if wanted == "local":
        return None, None
    head = local_head_address()
    if wanted in (None, "auto"):
        if head is None and wanted == "auto":
            raise ClusterUnreachableError(
                "address='auto' names the Ray cluster that `ray start` started on this machine, and none is running: "
                "start one (`ray-broker start` or `ray start --head`) or give the cluster's address")
        return ("auto", head) if head is not None else (None, None)
    return ("auto", head) if wanted == head else (wanted, wanted)


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None,
               system_config: Mapping[str, Any] | None = None) -> None:
    """Join the cluster `cluster_address(address)` names, or start a local Ray; nothing if Ray is up.

    `num_cpus` and `system_config` (added to `LOCAL_RAY_SYSTEM_CONFIG`) go to a local Ray started
    here only: a cluster keeps its own settings."""
    if ray.is_initialized():
        return
    silence_ray_notices()
    target, probe = _resolve(address)
    if target is None or probe is None:
        start_local_ray(num_cpus=num_cpus, system_config=system_config)
        logger.info("started an embedded local Ray (it lives as long as this process); message batches up to "
                    "%d bytes travel inline with their calls", LOCAL_RAY_SYSTEM_CONFIG["max_direct_call_object_size"])
        return
    check_ray_head(probe)
    ray.init(address=target, namespace=RAY_NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)
    logger.info("joined the Ray cluster at %s; it keeps its own inline object limit (the library sets one "
                "only on a Ray it starts)", target)


def start_local_ray(temp_dir: str | None = None, log_to_driver: bool = False, *, num_cpus: int | None = None,
                    system_config: Mapping[str, Any] | None = None) -> None:
    """Start an embedded local Ray for this process, trying `LOCAL_RAY_ATTEMPTS` times;
    `RayStartupError` saying what Ray reported, and what to do, when no try succeeds. `temp_dir`
    gives it a temporary directory of its own (Ray's default otherwise); `log_to_driver` shows its
    workers' output on this process's standard streams; `num_cpus` sets its logical CPUs (Ray's
    default: the machine's); `system_config` is added to `LOCAL_RAY_SYSTEM_CONFIG`."""
    options: dict[str, Any] = {"_system_config": {**LOCAL_RAY_SYSTEM_CONFIG, **(system_config or {})}}
    if temp_dir is not None:
        options["_temp_dir"] = temp_dir
    if num_cpus is not None:
        options["num_cpus"] = num_cpus
    failure: Exception | None = None
    for _ in range(LOCAL_RAY_ATTEMPTS):
        try:
            ray.init(address="local", namespace=RAY_NAMESPACE, include_dashboard=False, log_to_driver=log_to_driver,
                     configure_logging=False, **options)
            return
        except Exception as exc:  # noqa: BLE001 - Ray's start-up failures are untyped (Exception, RuntimeError)
            failure = exc
            ray.shutdown()  # whatever the failed start left behind in this process
    reported = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
    raise RayStartupError(
        f"a local Ray could not be started ({LOCAL_RAY_ATTEMPTS} tries; Ray reported: {reported}). Its processes "
        "did not come up in time, as when the machine is overloaded or short of memory or of space in Ray's temp "
        "directory: retry once it has room, or start Ray yourself (`ray start --head`) and pass its address "
        "(address= or RAY_ADDRESS)") from failure


def running_config_flow(name: str) -> LifecycleFlow[NamespaceConfig | None]:
    """The configuration of namespace `name` if it runs on the joined cluster, else None."""
    from actors.handles import find_actor

    gateway = find_actor(gateway_actor_name(name, 0))
    if gateway is None:
        return None
    return NamespaceConfig(**(yield Wait(gateway.config.remote(), _RUNNING_CONFIG_TIMEOUT_S)))


def running_config(name: str) -> NamespaceConfig | None:
    """The configuration of namespace `name` if it runs on the joined cluster, else None."""
    return run_blocking(running_config_flow(name))


def stores_free_flow(config: NamespaceConfig, wait_s: float = 0.0) -> LifecycleFlow[None]:
    """Raise `StoreLockedError` if any process (another cluster, a stale actor) holds one of the
    namespace's stores, after waiting up to `wait_s` for holders that are shutting down."""
    deadline = time.monotonic() + wait_s
    for index, path in config.store_paths():
        while (holder := holder_of(path)) is not None:
            if time.monotonic() >= deadline:
                raise refusal(path, holder, index)
            yield Pause(STORE_POLL_S)


def stores_let_go_flow(config: NamespaceConfig) -> LifecycleFlow[None]:
    """Wait (up to `TEARDOWN_WAIT_S`) until the partitions just killed let their stores on this
    machine go, so that a `start` right after `stop` finds them free. A store still held then is
    left to `start` to report."""
    try:
        yield from stores_free_flow(config, wait_s=TEARDOWN_WAIT_S)
    except StoreLockedError:
        return


def ensure_stores_free(config: NamespaceConfig, wait_s: float = 0.0) -> None:
    """`stores_free_flow`, in this thread."""
    run_blocking(stores_free_flow(config, wait_s))


def ray_flow(address: str | None = None, *, num_cpus: int | None = None,
             system_config: Mapping[str, Any] | None = None) -> LifecycleFlow[None]:
    """`ensure_ray` when Ray is not up yet in this process."""
    if not ray.is_initialized():
        yield Blocking(functools.partial(ensure_ray, address, num_cpus=num_cpus, system_config=system_config))


def start_flow(name: str, *, sku: str, partitions: int | None, data_dir: str | None, gateways: int,
               durability: str, address: str | None, auth_token: str | None = None,
               replicas: int = 1, amqp_port: int | None = None,
               management_port: int | None = None, any_tier_partitions: bool = False,
               listen_host: str | None = None, shared_access_keys: tuple[SasKey, ...] | None = None,
               min_in_sync: int | None = None,
               before_serving: Callable[[NamespaceConfig], None] | None = None) -> LifecycleFlow[NamespaceConfig]:
    """Start namespace `name` (or find it running, if `auth_token` is its token) and return its
    configuration; with `amqp_port`, its AMQP front end too (serving the management API on
    `management_port` as well, when given). `replicas=2` without `min_in_sync=1` is warned of
    (`ReplicationWarning`): it cannot fail over. `any_tier_partitions`, `listen_host`, `shared_access_keys` and
    `before_serving` are what only `ray-broker emulator` sets (see `plan_config` and `deploy`)."""
    from actors.deploy import deploy

    check_start_options(name, sku=sku, partitions=partitions, gateways=gateways, durability=durability,
                        replicas=replicas, amqp_port=amqp_port, management_port=management_port,
                        any_tier_partitions=any_tier_partitions, min_in_sync=min_in_sync)
    if replicas == 2 and min_in_sync != 1:
        warnings.warn(NO_FAILOVER_WITH_TWO_REPLICAS, ReplicationWarning)
    if amqp_port is not None:
        check_amqp_extra()
    required = token_hash(auth_token)
    yield from ray_flow(address)
    running = yield from running_config_flow(name)
    if running is not None:
        check_auth_token(running, auth_token)
        return running
    check_front_end_ports(amqp_port, management_port, listen_host)
    nodes = [(str(n["NodeID"]), (n.get("Labels") or {}).get(STORE_LABEL)) for n in ray.nodes() if n["Alive"]]
    config = plan_config(name, sku=sku, partitions=partitions, data_dir=data_dir, gateways=gateways,
                         durability=durability, nodes=nodes, local_node=ray.get_runtime_context().get_node_id(),
                         auth_token_hash=required, replicas=replicas, amqp_port=amqp_port,
                         management_port=management_port, any_tier_partitions=any_tier_partitions,
                         listen_host=listen_host, shared_access_keys=shared_access_keys, min_in_sync=min_in_sync)
    yield from stores_free_flow(config)
    save_config(config)
    yield Blocking(deploy, (config, DEPLOY_TIMEOUT_S, before_serving))
    return config


def check_front_end_ports(amqp_port: int | None, management_port: int | None,
                          listen_host: str | None = None) -> None:
    """`PortUnavailableError` when the AMQP front end of a namespace starting here could not listen
    on its ports (it listens on this node, on `listen_host` or every interface); nothing without
    `amqp_port`. A running namespace's own front end holds its ports: check before starting one,
    not before finding one running."""
    if amqp_port is None:
        return
    from actors.amqp_frontend import LISTEN_HOST

    check_ports_free([(amqp_port, "the AMQP port"), (management_port, "the management port")],
                     listen_host or LISTEN_HOST)


def connect_flow(name: str, address: str | None, how_to_start: str,
                 auth_token: str | None = None) -> LifecycleFlow[NamespaceConfig]:
    """The configuration of running namespace `name`, once `auth_token` is checked against it;
    `how_to_start` words the hint when it is not running."""
    check_namespace_name(name)
    if not ray.is_initialized():
        target = cluster_address(address)
        if target is None:
            raise _not_running(name, "here: no Ray cluster is (no address, RAY_ADDRESS or `ray start` head)",
                               how_to_start)
        yield Blocking(ensure_ray, (target,))
    config = yield from running_config_flow(name)
    if config is None:
        raise _not_running(name, f"on the Ray cluster at {ray.get_runtime_context().gcs_address}", how_to_start)
    check_auth_token(config, auth_token)
    return config


def _not_running(name: str, why: str, how_to_start: str) -> NamespaceNotRunningError:
    from ..config import default_data_dir

    stored = load_config(default_data_dir(name))
    holders = [] if stored is None else [holder_of(p) for p in map(stored.store_path, range(stored.partition_count))
                                         if p is not None]
    holder = next((h for h in holders if h is not None), None)
    elsewhere = f"; its stores are held by {holder.describe()}, so it runs in another Ray" if holder else ""
    return NamespaceNotRunningError(f"namespace {name!r} is not running {why}{elsewhere}. "
                                    f"Start it with {how_to_start}, or give the address of the cluster it runs on",
                                    entity=name)


def start_namespace(name: str, **options: Any) -> NamespaceConfig:
    """`start_flow`, in this thread."""
    return run_blocking(start_flow(name, **options))


def connect_namespace(name: str, address: str | None, how_to_start: str,
                      auth_token: str | None = None) -> NamespaceConfig:
    """`connect_flow`, in this thread."""
    return run_blocking(connect_flow(name, address, how_to_start, auth_token))


def stop_namespace(name: str, *, delete_data: bool, address: str | None = None) -> str | None:
    """`stop_flow`, in this thread."""
    return run_blocking(stop_flow(name, delete_data=delete_data, address=address))


def stop_flow(name: str, *, delete_data: bool, address: str | None = None) -> LifecycleFlow[str | None]:
    """Stop namespace `name`'s actors if it runs on the cluster `cluster_address(address)` names (or
    this process joined); with `delete_data`, also remove its stores (refused while another process
    holds them), with no cluster as well. Returns the directory removed, if any."""
    from actors.deploy import teardown

    from ..config import default_data_dir

    check_namespace_name(name)
    config: NamespaceConfig | None = None
    if ray.is_initialized() or cluster_address(address) is not None:
        yield from ray_flow(address)
        config = yield from running_config_flow(name)
        yield Blocking(teardown, (name, None if config is None else config.partition_count,
                                  None if config is None else config.gateways,
                                  None if config is None else config.replicas))
    if not delete_data:
        if config is not None:
            yield from stores_let_go_flow(config)
        return None
    directory = config.data_dir if config is not None else default_data_dir(name)
    stored = load_config(directory) if directory and os.path.isdir(directory) else None
    if stored is None:
        return None
    yield from stores_free_flow(stored, wait_s=TEARDOWN_WAIT_S if config is not None else 0.0)
    yield Blocking(shutil.rmtree, (directory,))
    return directory


__all__ = ["LOCAL_RAY_SYSTEM_CONFIG", "ensure_ray", "cluster_address", "local_head_address",
           "start_flow", "connect_flow", "check_front_end_ports", "stop_flow", "run_blocking", "run_awaiting", "start_namespace",
           "connect_namespace", "stop_namespace", "running_config", "ensure_stores_free"]
