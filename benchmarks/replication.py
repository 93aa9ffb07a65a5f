"""Replication: what replicas cost (P1 and P3 with `replicas=2` against `replicas=1`, same run),
how long a failover takes, and how long a follower left behind takes to catch up.

Nodes are simulated with a local `ray.cluster_utils.Cluster` on this machine: a head and three
workers, each worker with a store label and a data dir of its own (so that a removed worker's
replicas come back when a node with its label does). Targets: P1 with `replicas=2` >= 0.6x
`replicas=1`; P3 median with `replicas=2` <= 1.5x `replicas=1`; failover (`replicas=3`): from a
node's removal to the first successful keyed send to a partition it led, maximum < 5 s; catch-up:
a follower --behind messages behind is in sync again in < 30 s.

    python -m benchmarks.replication [--batches 30 --rounds 3 --samples 60 --failovers 10 --behind 100000]
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from ray_broker.cli.status import survey_replicas
from ray_broker.config import NODE_DATA_DIR_ENV, RAY_NAMESPACE, STORE_LABEL
from ray_broker.errors import PartitionUnavailableError
from ray_broker.replies import ReplicaState
from ray_broker.routing import partition_for_key

from .common import (
    broker_namespace,
    emit,
    format_table,
    interleaved_latency,
    machine_info,
    make_body,
    parser,
    ratio,
    summarize_ms,
    target,
    targets_table,
)
from .p1_throughput import broker_cycle
from .p3_latency import broker_channel

LABELS = ("disk-a", "disk-b", "disk-c")
QUEUE = "replicated"
TARGET_P1 = 0.6
TARGET_P3 = 1.5
TARGET_FAILOVER_S = 5.0
TARGET_CATCH_UP_S = 30.0
FAILOVER_PARTITIONS = 4


@dataclass
class ReplicationConfig:
    """What the replication benchmark runs."""

    batches: int = 30
    warmup: int = 5
    rounds: int = 3
    batch_size: int = 100
    samples: int = 60
    gap: float = 0.02
    failovers: int = 10
    behind: int = 100_000
    body_size: int = 1024
    max_wait: float = 10.0


class LabelledCluster:
    """A head and one worker per label, each worker keeping stores in a directory of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        self.workers = {label: self._add(label) for label in LABELS}
        self.cluster.wait_for_nodes()

    def _add(self, label: str) -> Any:
        return self.cluster.add_node(num_cpus=2, labels={STORE_LABEL: label},
                                     env_vars={NODE_DATA_DIR_ENV: str(self.root / label)})

    def remove(self, label: str) -> None:
        """Remove the worker with `label`."""
        self.cluster.remove_node(self.workers.pop(label))

    def add_back(self, label: str) -> None:
        """Add a worker with `label` (and its data dir) again."""
        self.workers[label] = self._add(label)
        self.cluster.wait_for_nodes()

    def label_of(self, node_id: str) -> str | None:
        """The label of the worker with id `node_id` (None: the head)."""
        return next((label for label, node in self.workers.items() if node.node_id == node_id), None)


def key_for(partition: int, count: int) -> str:
    """A partition key that lands on `partition`."""
    return next(f"k{i}" for i in range(100_000) if partition_for_key(f"k{i}", count) == partition)


def keyed_send_until_it_succeeds(ns: rb.Namespace, key: str, give_up_s: float = 60.0) -> float:
    """Seconds until one keyed send succeeds (each try has the default timeout)."""
    began = time.monotonic()
    with ns.get_queue_sender(QUEUE) as sender:
        while True:
            try:
                sender.send_messages(rb.Message("probe", partition_key=key))
                return time.monotonic() - began
            except PartitionUnavailableError:
                if time.monotonic() - began > give_up_s:
                    raise


def replica_lag(ns: rb.Namespace, partition: int) -> dict[int, int | None]:
    """The leader's view of its followers' lag (a follower of None while the partition has no leader)."""
    leader = survey_replicas(ns).leaders()[partition]
    if leader is None:
        return {0: None}
    return dict(ReplicaState.decode(ray.get(leader.replica_state.remote(), timeout=30)).lag or {})


def queue_latencies(namespaces: dict[str, rb.Namespace], body: bytes, *, samples: int, gap: float,
                    max_wait: float) -> dict[str, list[float]]:
    """P3 on each namespace's `QUEUE`, interleaved (`interleaved_latency`): send-to-receive seconds
    of single messages, by name."""
    with contextlib.ExitStack() as stack:
        channels = {}
        for name, ns in namespaces.items():
            sender = stack.enter_context(ns.get_queue_sender(QUEUE))
            receiver = stack.enter_context(ns.get_queue_receiver(QUEUE))
            channels[name] = broker_channel(sender, receiver, body)
        return interleaved_latency(channels, samples=samples, warmup=5, gap=gap, max_wait=max_wait)


def failovers(cluster: LabelledCluster, config: ReplicationConfig) -> dict[str, Any]:
    """Remove the worker leading some partition, time the first successful keyed send to that
    partition, add the worker back, wait until its replicas are in sync; `config.failovers` times."""
    times: list[float] = []
    with broker_namespace("failover", sku="premium", partitions=FAILOVER_PARTITIONS, replicas=3) as ns:
        ns.create_queue(QUEUE)
        for _ in range(config.failovers):
            heads = survey_replicas(ns).leaders()
            nodes = ray.get([h.node.remote() for h in heads], timeout=60)
            k, label = next((k, cluster.label_of(n)) for k, n in enumerate(nodes) if cluster.label_of(n))
            assert label is not None
            cluster.remove(label)
            times.append(keyed_send_until_it_succeeds(ns, key_for(k, FAILOVER_PARTITIONS)))
            cluster.add_back(label)
            deadline = time.monotonic() + 120
            while any(lag != 0 for lag in replica_lag(ns, k).values()) and time.monotonic() < deadline:
                keyed_send_until_it_succeeds(ns, key_for(k, FAILOVER_PARTITIONS))
                time.sleep(0.5)
    return {"seconds": [round(t, 3) for t in times], **summarize_ms(times)}


def catch_up(cluster: LabelledCluster, config: ReplicationConfig) -> dict[str, Any]:
    """Remove a worker holding a follower of partition 0, send `config.behind` messages there, add
    the worker back: seconds until the follower is in sync."""
    with broker_namespace("catchup", sku="premium", partitions=1, replicas=3) as ns:
        ns.create_queue(QUEUE)
        head = survey_replicas(ns).leaders()[0]
        leader_label = cluster.label_of(ray.get(head.node.remote(), timeout=30))
        label = next(label for label in LABELS if label != leader_label)
        cluster.remove(label)
        body = make_body(config.body_size)
        with ns.get_queue_sender(QUEUE) as sender:
            for _ in range(config.behind // config.batch_size):
                sender.send_messages([rb.Message(body) for _ in range(config.batch_size)])
        began = time.monotonic()
        cluster.add_back(label)
        while time.monotonic() - began < 300:
            lag = replica_lag(ns, 0)
            if lag and all(v == 0 for v in lag.values()):
                break
            time.sleep(0.2)
        seconds = time.monotonic() - began
    return {"messages_behind": config.behind, "seconds_to_in_sync": round(seconds, 3)}


def run(config: ReplicationConfig, cluster: LabelledCluster) -> dict[str, Any]:
    """Run every part on `cluster` (this process attached to it) and return the JSON document."""
    body = make_body(config.body_size)
    rounds: dict[str, list[dict[str, Any]]] = {}
    with broker_namespace("rep1") as one, broker_namespace("rep2", replicas=2) as two:
        namespaces = {"replicas_1": one, "replicas_2": two}
        for ns in namespaces.values():
            ns.create_queue(QUEUE, enable_partitioning=True)
        for _ in range(config.rounds):
            for name, ns in namespaces.items():
                rounds.setdefault(name, []).append(broker_cycle(
                    ns, QUEUE, body, batch_size=config.batch_size, batches=config.batches, warmup=config.warmup,
                    max_wait=config.max_wait))
        latencies = queue_latencies(namespaces, body, samples=config.samples, gap=config.gap,
                                    max_wait=config.max_wait)
    p1 = {name: sorted(r["msgs_per_s"] for r in runs)[len(runs) // 2] for name, runs in rounds.items()}
    p3 = {name: summarize_ms(values) for name, values in latencies.items()}
    failover = failovers(cluster, config) if config.failovers else None
    caught_up = catch_up(cluster, config) if config.behind else None
    p1_ratio = ratio(p1["replicas_2"], p1["replicas_1"])
    p3_ratio = ratio(p3["replicas_2"]["median_ms"], p3["replicas_1"]["median_ms"])
    targets = [target("P1 replicas=2 vs replicas=1 (x)", p1_ratio, TARGET_P1),
               target("P3 median replicas=2 vs replicas=1 (x)", p3_ratio, TARGET_P3, at_most=True)]
    if failover is not None:
        targets.append(target("failover, removal to first keyed send, maximum (s)", failover["max_ms"] / 1000,
                              TARGET_FAILOVER_S, at_most=True))
    if caught_up is not None:
        targets.append(target(f"catch-up of a follower {config.behind} messages behind (s)",
                              caught_up["seconds_to_in_sync"], TARGET_CATCH_UP_S, at_most=True))
    return {
        "benchmark": "replication",
        "machine": machine_info(),
        "config": asdict(config),
        "p1_msgs_per_s": {name: {"median": p1[name], "rounds": [r["msgs_per_s"] for r in runs]}
                          for name, runs in rounds.items()},
        "p3": p3,
        "failover": failover,
        "catch_up": caught_up,
        "ratios": {"p1_replicas_2_vs_1": p1_ratio, "p3_median_replicas_2_vs_1": p3_ratio},
        "targets": targets,
    }


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    p1, p3 = doc["p1_msgs_per_s"], doc["p3"]
    rows = [[name, p1[name]["median"], " / ".join(f"{v:,.0f}" for v in p1[name]["rounds"]), p3[name]["median_ms"],
             p3[name]["p99_ms"]] for name in p1]
    parts = [format_table("Replication: P1 msgs/s (16 partitions) and P3 latency, same run",
                          ["system", "P1 median msgs/s", "rounds", "P3 median ms", "P3 p99 ms"], rows)]
    if doc["failover"]:
        f = doc["failover"]
        parts.append(format_table("Failover (replicas=3): node removal to first successful keyed send",
                                  ["removals", "median ms", "max ms", "each s"],
                                  [[len(f["seconds"]), f["median_ms"], f["max_ms"], f["seconds"]]]))
    if doc["catch_up"]:
        c = doc["catch_up"]
        parts.append(format_table("Catch-up", ["messages behind", "seconds to in sync"],
                                  [[c["messages_behind"], c["seconds_to_in_sync"]]]))
    parts.append(targets_table(doc["targets"]))
    return "\n\n".join(parts)


@contextlib.contextmanager
def labelled_cluster() -> Iterator[LabelledCluster]:
    """A `LabelledCluster` in a temporary directory, with this process attached; all removed after."""
    root = Path(tempfile.mkdtemp(prefix="rb-replication-"))
    with contextlib.redirect_stdout(sys.stderr):
        cluster = LabelledCluster(root)
        ray.init(address=cluster.cluster.address, namespace=RAY_NAMESPACE, logging_level="ERROR")
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the replication benchmark from the command line."""
    p = parser(__doc__.splitlines()[0])
    defaults = ReplicationConfig()
    for name in ("batches", "warmup", "rounds", "batch_size", "samples", "failovers", "behind"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    args = p.parse_args(argv)
    config = ReplicationConfig(batches=args.batches, warmup=args.warmup, rounds=args.rounds,
                               batch_size=args.batch_size, samples=args.samples, failovers=args.failovers,
                               behind=args.behind, body_size=args.body_size)
    with labelled_cluster() as cluster, contextlib.redirect_stdout(sys.stderr):
        doc = run(config, cluster)  # what Ray's processes print stays out of the JSON document
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
