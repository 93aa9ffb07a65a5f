"""`ray-broker start`, `stop` and `status`: a namespace's life on a Ray cluster."""
from __future__ import annotations

import os
import warnings
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from ..errors import InvalidOperationError, ReplicationWarning
from ..keys.sas import ROOT_KEY_NAME
from . import output
from .options import DEFAULT_NAMESPACE, AddressOption, NamespaceOption, attach
from .status import (
    PARTITION_HEADERS,
    REPLICA_HEADERS,
    STATUS_PARTITION_KEYS,
    STATUS_REPLICA_KEYS,
    entity_runtimes,
    partition_counts,
    partition_statuses,
    survey_replicas,
)


DEFAULT_AMQP_PORT = 5672
"""The AMQP port `--amqp` serves on, as Service Bus and its emulator do."""
EMULATOR_MANAGEMENT_PORT = 5300
"""The port Microsoft's emulator serves its management API on (plain HTTP)."""


class SkuChoice(str, Enum):
    """The tiers `--sku` takes."""

    basic = "basic"
    standard = "standard"
    premium = "premium"


class DurabilityChoice(str, Enum):
    """The durabilities `--durability` takes."""

    normal = "normal"
    fsync = "fsync"
    memory = "memory"


def start(
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    sku: Annotated[Optional[SkuChoice], typer.Option(help="Tier.  [default: standard]")] = None,
    partitions: Annotated[Optional[int], typer.Option(
        min=1, max=64, help="Premium only: the partition count, 1 to 64.  [default: 1]")] = None,
    data_dir: Annotated[Optional[str], typer.Option(
        help="Where the partitions keep their stores.  [default: $RAY_BROKER_HOME/<name> or ~/.ray_broker/<name>]")] = None,
    gateways: Annotated[Optional[int], typer.Option(min=1, help="Gateway actors.  [default: 1]")] = None,
    durability: Annotated[Optional[DurabilityChoice], typer.Option(help="Durability.  [default: normal]")] = None,
    replicas: Annotated[Optional[int], typer.Option(
        min=1, max=7, help="Copies of every partition, each on a node of its own (docs: Durability and replication).  "
                           "[default: 1]")] = None,
    min_in_sync: Annotated[Optional[int], typer.Option(
        min=1, max=7, help="Replicas that must hold a change before it is acknowledged; 1 of 2 lets --replicas 2 "
                           "fail over (docs: Durability and replication).  [default: a majority]")] = None,
    port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help="Port of the Ray head this command starts when no cluster runs.")] = None,
    amqp: Annotated[bool, typer.Option(
        "--amqp", help="Also serve AMQP 1.0 so the Azure Service Bus SDKs reach the namespace "
                       "(`ray-broker connection-string` prints what they need).")] = False,
    amqp_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help=f"The AMQP port (implies --amqp).  [default: {DEFAULT_AMQP_PORT}]")] = None,
    management_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help=f"Also serve the management API over plain HTTP on this port, as Microsoft's "
                               f"emulator does on {EMULATOR_MANAGEMENT_PORT} (implies --amqp; the AMQP port "
                               "serves it too).")] = None,
) -> None:
    """Start a namespace on the Ray cluster (starting a Ray head if none runs); it outlives this command.

    If the namespace already runs, options that differ from its settings are an error (its settings
    cannot change while it runs).
    """
    import ray

    import ray_broker as rb
    from ..client.front_end_checks import check_amqp_extra
    from ..client.lifecycle import (
        NO_FAILOVER_WITH_TWO_REPLICAS,
        check_front_end_ports,
        cluster_address,
        ensure_ray,
        local_head_address,
        running_config,
    )
    from ..config import check_replica_nodes, check_start_options, store_directory, stored_config_for
    from ..ray_head import start_head

    serve_amqp = amqp_port if amqp_port is not None else \
        DEFAULT_AMQP_PORT if amqp or management_port is not None else None
    wanted = {"sku": sku and sku.value, "partition_count": partitions, "data_dir": data_dir, "gateways": gateways,
              "durability": durability and durability.value, "replicas": replicas, "amqp_port": serve_amqp,
              "management_port": management_port, "min_in_sync": min_in_sync}
    tier, count = check_start_options(namespace, sku=wanted["sku"] or "standard", partitions=partitions,
                                      gateways=gateways or 1, durability=wanted["durability"] or "normal",
                                      replicas=replicas or 1, amqp_port=serve_amqp, management_port=management_port,
                                      min_in_sync=min_in_sync)
    if serve_amqp is not None:
        check_amqp_extra()
    if replicas == 2 and min_in_sync != 1:
        output.note("warning: " + NO_FAILOVER_WITH_TWO_REPLICAS.replace("replicas=", "--replicas ")
                    .replace("min_in_sync=", "--min-in-sync "))
    target = cluster_address(address)
    if target is None:
        if wanted["durability"] != "memory":
            stored_config_for(namespace, tier, count, store_directory(namespace, data_dir))
        check_replica_nodes(replicas or 1, [("the Ray head this command would start", None)])
        check_front_end_ports(serve_amqp, management_port)
        head = start_head(port, local_head_address)
        output.out(f"started a Ray head at {head.address} (pid {head.pid}; `ray-broker stop --ray` stops it)")
        target = head.address
    ensure_ray(target)
    running = running_config(namespace)
    if running is not None:
        _check_unchanged(running, {k: v for k, v in wanted.items() if v is not None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplicationWarning)  # noted above, in the command line's words
        config = rb.start(namespace, sku=wanted["sku"] or "standard", partitions=partitions, data_dir=data_dir,
                          gateways=gateways or 1, durability=wanted["durability"] or "normal",
                          replicas=replicas or 1, amqp_port=serve_amqp, management_port=management_port,
                          min_in_sync=min_in_sync).config
    verb = "running" if running is None else "already running"
    output.out(f"namespace {config.name!r} {verb} on {ray.get_runtime_context().gcs_address}: {settings(config)}")


def settings(config: Any) -> str:
    """A running namespace's settings in one line, as `start` and `status` print them."""
    return (f"sku={config.sku}, {config.partition_count} partitions"
            f"{f' x {config.replicas} replicas' if config.replicated else ''}"
            f"{f' (min_in_sync={config.min_in_sync})' if config.min_in_sync else ''}, {config.gateways} gateway(s), "
            f"durability={config.durability}, data_dir={config.data_dir or '-'}"
            + (f", AMQP on port {config.amqp_port} (`ray-broker connection-string -n {config.name}`)"
               if config.amqp_port is not None else "")
            + (f", the management API over HTTP on port {config.management_port}"
               if config.management_port is not None else ""))


_OPTION_OF = {"sku": "--sku", "partition_count": "--partitions", "data_dir": "--data-dir", "gateways": "--gateways",
              "durability": "--durability", "replicas": "--replicas", "amqp_port": "--amqp-port",
              "management_port": "--management-port", "min_in_sync": "--min-in-sync"}


def _check_unchanged(running: Any, wanted: dict[str, Any]) -> None:
    """Raise `InvalidOperationError` naming each option in `wanted` that differs from the running
    namespace's setting."""
    differences = []
    for field, value in wanted.items():
        have = getattr(running, field)
        same = (os.path.abspath(value) == os.path.abspath(have)) if field == "data_dir" and have else value == have
        if not same:
            differences.append(f"{_OPTION_OF[field]} {value} (it runs with {have if have is not None else 'none'})")
    if differences:
        raise InvalidOperationError(
            f"namespace {running.name!r} is already running with other settings: {'; '.join(differences)}. "
            f"Its settings cannot change while it runs: leave those options out, or stop it first "
            f"(`ray-broker stop -n {running.name}`)", entity=running.name)


def stop(
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    delete_data: Annotated[bool, typer.Option("--delete-data", help="Also delete the namespace's stores.")] = False,
    ray_head: Annotated[bool, typer.Option("--ray", help="Also stop the Ray head that `ray-broker start` started "
                                                         "(even when the namespace cannot be reached).")] = False,
) -> None:
    """Stop a namespace (its data stays unless --delete-data)."""
    import ray

    from ..client.lifecycle import cluster_address, ensure_ray, running_config, stop_namespace
    from ..ray_head import started_head, stop_head

    failure: Exception | None = None
    try:
        target = cluster_address(address)
        if target is None:
            outcome = f"no Ray cluster is running here, so namespace {namespace!r} is not running"
        else:
            ensure_ray(target)
            outcome = f"namespace {namespace!r} " + ("stopped" if running_config(namespace) is not None
                                                     else "was not running")
        deleted = stop_namespace(namespace, delete_data=delete_data, address=address)
        ray.shutdown()
        output.out(outcome + (_deletion(namespace, deleted) if delete_data else ""))
    except Exception as exc:  # noqa: BLE001 - with --ray the head is still stopped; raised after that
        if not ray_head:
            raise
        failure = exc
    if ray_head:
        head = started_head()
        if head is None:
            output.out("no Ray head started by `ray-broker start` is running; nothing else stopped")
        else:
            stop_head(head)
            output.out(f"Ray head at {head.address} (pid {head.pid}) stopped; other Ray clusters left running")
    if failure is not None:
        raise failure


def connection_string(
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    host: Annotated[str, typer.Option(help="The host name the SDKs reach the front end by.")] = "localhost",
    key_name: Annotated[str, typer.Option("--key", "--key-name",
                                          help="The shared access key to sign with (`ray-broker keys list`).")
                        ] = ROOT_KEY_NAME,
    ca_file: Annotated[bool, typer.Option(
        "--ca-file", help="Print instead the path of the namespace's TLS certificate, which the SDKs must "
                          "trust: their administration clients (REQUESTS_CA_BUNDLE, SSL_CERT_FILE), and their "
                          "clients over amqps or wss (connection_verify).")] = False,
    management: Annotated[bool, typer.Option(
        "--management", help="Print the connection string of the plain-HTTP management port instead (the "
                             "namespace started with --management-port), as applications written for "
                             "Microsoft's emulator give their administration client.")] = False,
) -> None:
    """Print the connection string the Azure Service Bus SDKs take for a namespace started with --amqp."""
    from ..amqp.connection_string import connection_string as amqp_connection_string
    from ..management_http.certificate import certificate_path

    ns = attach(namespace, address)
    config = ns.config
    if config.amqp_port is None:
        raise InvalidOperationError(f"namespace {namespace!r} serves no AMQP: start it with `ray-broker start -n "
                                    f"{namespace} --amqp` (stop it first if it runs)", entity=namespace)
    if ca_file:
        output.out(certificate_path(config.name, config.data_dir))
        return
    if management and config.management_port is None:
        raise InvalidOperationError(f"namespace {namespace!r} has no management port: start it with `ray-broker "
                                    f"start -n {namespace} --management-port {EMULATOR_MANAGEMENT_PORT}` (stop it "
                                    "first if it runs), or give the administration client the AMQP port's "
                                    "connection string", entity=namespace)
    keys = ns.list_shared_access_keys()
    key = next((k for k in keys if k.name == key_name), None)
    if key is None:
        raise InvalidOperationError(f"namespace {namespace!r} has no shared access key named {key_name!r}; it has "
                                    + ", ".join(k.name for k in keys), entity=namespace)
    port = config.management_port if management else config.amqp_port
    output.out(amqp_connection_string(host, port, key))


def _deletion(namespace: str, deleted: str | None) -> str:
    """What `stop --delete-data` did: deleted the namespace's stores, or found none to delete."""
    from ..config import default_data_dir

    if deleted is not None:
        return "; its data is deleted"
    return f"; it has no data to delete in {default_data_dir(namespace)}"


def status(namespace: NamespaceOption = DEFAULT_NAMESPACE, address: AddressOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
           ) -> None:
    """Show each partition (node, pid, health, restarts, counts) and each queue's and subscription's counts."""
    ns = attach(namespace, address)
    if as_json:
        output.json_document(status_document(ns))
        return
    config = ns.config
    output.out(f"namespace {ns.name!r}: {settings(config)}")
    entities = entity_runtimes(ns)
    counts = partition_counts([runtime for *_, runtime in entities], ns.partition_count)
    output.out()
    survey = survey_replicas(ns) if config.replicated else None
    leaders = survey.leaders() if survey is not None else None
    output.table(PARTITION_HEADERS, [p.row(counts[p.index]) for p in partition_statuses(ns, leaders)])
    output.out()
    if survey is not None:
        output.table(REPLICA_HEADERS, survey.rows())
        output.out()
    if not entities:
        output.out(f"no queues or subscriptions (`ray-broker queue create NAME -n {ns.name}` creates a queue)")
        return
    output.table(["entity", "kind", "flags", "status", "availability", "active", "dead-letter", "scheduled",
                  "bytes"],
                 [[path, kind, flags(props), props.status, rt.availability, rt.active_message_count,
                   rt.dead_letter_message_count, rt.scheduled_message_count, rt.size_in_bytes]
                  for kind, path, props, rt in entities])


def status_document(ns: Any) -> dict[str, Any]:
    """What `status --json` prints: the namespace's settings, each partition (as the table shows
    it) and each queue and subscription with its settings and counts."""
    config = ns.config
    entities = entity_runtimes(ns)
    counts = partition_counts([runtime for *_, runtime in entities], ns.partition_count)
    survey = survey_replicas(ns) if config.replicated else None
    return {
        "namespace": ns.name, "sku": config.sku, "partition_count": ns.partition_count, "gateways": config.gateways,
        "durability": config.durability, "data_dir": config.data_dir,
        "partitions": [dict(zip(STATUS_PARTITION_KEYS, p.row(counts[p.index]))) for p in
                       partition_statuses(ns, survey.leaders() if survey is not None else None)],
        "replicas": config.replicas, "amqp_port": config.amqp_port, "management_port": config.management_port,
        **({"replica_states": [dict(zip(STATUS_REPLICA_KEYS, row)) for row in survey.rows()]}
           if survey is not None else {}),
        "entities": [{"path": path, "kind": kind, **output.plain(props), "runtime": output.plain(rt)}
                     for kind, path, props, rt in entities],
    }


def flags(properties: Any) -> str:
    """An entity's fixed options, comma-separated ("-" for none)."""
    names = (("partitioned", "enable_partitioning"), ("sessions", "requires_session"),
             ("dedup", "requires_duplicate_detection"))
    return ",".join(label for label, field in names if getattr(properties, field, False)) or "-"
