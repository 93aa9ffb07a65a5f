"""Replicated partitions against NATS JetStream: `replicas=3` and `replicas=1` beside JetStream R3
and R1, in one run on this machine, with the same cycle for all four.

The broker runs on a local `ray.cluster_utils.Cluster` (a head and three labelled workers, as in
`benchmarks.replication`), 16 partitions; JetStream on three clustered local `nats-server`
processes (file storage, work-queue retention; `benchmarks.jetstream_baseline`). The cycle:
publish a batch of `--batch-size` x 1 KB with every message acknowledged, then receive as many and
acknowledge each (Python clients on both sides); a first, untimed round of every system lets the
cluster's and the servers' start pass, then the timed rounds take the systems in turn. Besides throughput it reports CPU per message by
process role (client, leaders, followers, gateways, raylets; the stream's leader and the other
servers), the replication round's latency split on the leaders and followers, and P3 latency
(send to receive of single messages) with `replicas=3` against `replicas=1`.

Targets: `replicas=3` >= 1.0x JetStream R3 and >= 0.7x `replicas=1` (P1); P3 median with
`replicas=3` <= 1.5x `replicas=1`.

    python -m benchmarks.jetstream [--batches 30 --rounds 5 --samples 60]
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import ray

import ray_broker as rb
from ray_broker.cli.status import survey_replicas
from ray_broker.config import RAY_NAMESPACE

from . import jetstream_baseline as js
from .baselines import distinct_bodies
from .common import (
    broker_namespace,
    emit,
    format_table,
    machine_info,
    make_body,
    parser,
    rate,
    ratio,
    summarize_ms,
    target,
    targets_table,
)
from .p1_throughput import broker_cycle
from .process_cpu import CpuSnapshot, descendants_named
from .replication import QUEUE, labelled_cluster, queue_latencies

TARGET_VS_JETSTREAM = 1.0
TARGET_VS_R1 = 0.7
TARGET_P3 = 1.5


@dataclass
class JetStreamConfig:
    """What the comparison runs."""

    batches: int = 30
    warmup: int = 5
    rounds: int = 5
    batch_size: int = 100
    body_size: int = 1024
    samples: int = 60
    gap: float = 0.02
    max_wait: float = 10.0


def _actor_pid(name: str) -> int:
    return int(ray.get(ray.get_actor(name, namespace=RAY_NAMESPACE).pid.remote(), timeout=60))


def broker_roles(ns: rb.Namespace) -> dict[str, list[int]]:
    """The processes of a namespace by role (leaders and followers by where each replica stands
    now), with this client and the cluster's raylets and GCS."""
    config = ns.config
    leaders: list[int] = []
    followers: list[int] = []
    if config.replicated:
        survey = survey_replicas(ns)
        for k, leader in enumerate(survey.leaders()):
            lead_pid = None if leader is None else int(ray.get(leader.pid.remote(), timeout=60))
            for r in range(config.replicas):
                pid = _actor_pid(config.replica_name(k, r))
                (leaders if pid == lead_pid else followers).append(pid)
    else:
        leaders = [_actor_pid(config.partition_name(k)) for k in range(ns.partition_count)]
    return {"client": [os.getpid()], "leaders": leaders, "followers": followers,
            "gateways": [_actor_pid(config.gateway_name(g)) for g in range(config.gateways)],
            "raylets": descendants_named(["raylet"]), "gcs": descendants_named(["gcs_server"])}


def replica_handles(ns: rb.Namespace) -> list[Any]:
    """Every replica actor of a replicated namespace."""
    config = ns.config
    return [ray.get_actor(config.replica_name(k, r), namespace=RAY_NAMESPACE)
            for k in range(ns.partition_count) for r in range(config.replicas)]


def round_split(times: list[dict[str, Any]]) -> dict[str, Any]:
    """The replication round's latency split, in milliseconds, from every replica's
    `replication_times` (leaders: rounds > 0; followers: shipments > 0): on the caller's path the
    leader's commit, encoding and sending the shipment, the follower taking it, and the rest of the
    round (the calls' transport and waiting: `answer_ms`); off it, the follower's writes of what it
    took (each with its commit)."""
    leaders = [t for t in times if t["rounds"]]
    followers = [t for t in times if t["shipments"]]
    rounds = sum(t["rounds"] for t in leaders)
    shipments = sum(t["shipments"] for t in followers)
    if not rounds or not shipments:
        return {"rounds": rounds, "shipments": shipments}

    def per(total: float, count: int) -> float:
        return round(total * 1000 / count, 3) if count else 0.0

    writes = sum(t["commits"] for t in followers)
    ship = per(sum(t["ship_s"] for t in leaders), rounds)
    take = per(sum(t["take_s"] for t in followers), shipments)
    held = per(sum(t["held_s"] for t in leaders), rounds)
    return {"rounds": rounds, "shipments": shipments,
            "leader_commit_ms": per(sum(t["commit_s"] for t in leaders), sum(t["commits"] for t in leaders)),
            "ship_ms": ship, "follower_take_ms": take, "answer_ms": round(held - ship - take, 3), "held_ms": held,
            "follower_write_ms": per(sum(t["write_s"] for t in followers), writes),
            "follower_commit_ms": per(sum(t["commit_s"] for t in followers), writes),
            "changes_per_write": round(sum(t["changes"] for t in followers) / writes, 2) if writes else 0.0}


def measured(cycle: Callable[[], tuple[int, float]], roles: dict[str, list[int]]) -> dict[str, Any]:
    """Run one timed cycle: its messages per second and the CPU per message of each role."""
    before = CpuSnapshot.take(roles)
    count, seconds = cycle()
    return {"msgs_per_s": round(rate(count, seconds), 1),
            "cpu_us_per_msg": CpuSnapshot.take(roles).per_message_us(before, count)}


def run(config: JetStreamConfig) -> dict[str, Any]:
    """Run the comparison (on a labelled cluster of its own) and return the JSON document."""
    body = make_body(config.body_size)
    bodies = distinct_bodies(body, config.batch_size)
    sizes = {"batches": config.batches, "warmup": config.warmup}
    nats_note = js.missing()
    rounds: dict[str, list[dict[str, Any]]] = {}
    with labelled_cluster(), contextlib.ExitStack() as stack:
        r3 = stack.enter_context(broker_namespace("js-r3", replicas=3))
        r1 = stack.enter_context(broker_namespace("js-r1"))
        brokers = {"ray_broker_replicas_3": r3, "ray_broker_replicas_1": r1}
        systems: dict[str, tuple[Callable[[], tuple[int, float]], Callable[[], dict[str, list[int]]]]] = {}
        for name, ns in brokers.items():
            ns.create_queue(QUEUE, enable_partitioning=True)

            def cycle(ns: rb.Namespace = ns) -> tuple[int, float]:
                doc = broker_cycle(ns, QUEUE, body, batch_size=config.batch_size, max_wait=config.max_wait, **sizes)
                return doc["messages"], doc["seconds"]

            systems[name] = (cycle, lambda ns=ns: broker_roles(ns))
        if nats_note is None:
            cluster = stack.enter_context(js.nats_cluster())
            for replicas in (3, 1):
                queue = js.JetStreamQueue(cluster, f"bench_r{replicas}", replicas)
                stack.callback(queue.close)

                def nats_roles(queue: js.JetStreamQueue = queue) -> dict[str, list[int]]:
                    pids, leader = cluster.pids(), queue.leader()
                    return {"client": [os.getpid()], "stream_leader": [pids[leader]],
                            "other_servers": [pid for name, pid in pids.items() if name != leader]}

                systems[f"nats_jetstream_r{replicas}"] = (
                    lambda queue=queue: queue.cycle(bodies, **sizes), nats_roles)
        for cycle, _ in systems.values():  # untimed: the cluster's and the servers' start is over first
            cycle()
        handles = replica_handles(r3)
        ray.get([h.replication_times.remote(True) for h in handles], timeout=60)
        for _ in range(config.rounds):
            for name, (cycle, roles) in systems.items():
                rounds.setdefault(name, []).append(measured(cycle, roles()))
        split = round_split(ray.get([h.replication_times.remote() for h in handles], timeout=60))
        latencies = queue_latencies(brokers, body, samples=config.samples, gap=config.gap, max_wait=config.max_wait)
    return document(config, rounds, split, {n: summarize_ms(v) for n, v in latencies.items()}, nats_note)


def document(config: JetStreamConfig, rounds: dict[str, list[dict[str, Any]]], split: dict[str, Any],
             p3: dict[str, Any], nats_note: str | None) -> dict[str, Any]:
    """The JSON document of one run."""
    def middle(name: str) -> dict[str, Any]:
        runs = sorted(rounds[name], key=lambda r: r["msgs_per_s"])
        return runs[len(runs) // 2]

    p1 = {name: {"median": middle(name)["msgs_per_s"], "rounds": [r["msgs_per_s"] for r in runs],
                 "cpu_us_per_msg": middle(name)["cpu_us_per_msg"]} for name, runs in rounds.items()}
    median = {name: p1[name]["median"] for name in p1}
    ratios = {
        "replicas_3_vs_jetstream_r3": ratio(median["ray_broker_replicas_3"], median.get("nats_jetstream_r3")),
        "replicas_3_vs_replicas_1": ratio(median["ray_broker_replicas_3"], median["ray_broker_replicas_1"]),
        "jetstream_r3_vs_r1": ratio(median.get("nats_jetstream_r3"), median.get("nats_jetstream_r1")),
        "p3_median_replicas_3_vs_1": ratio(p3["ray_broker_replicas_3"]["median_ms"],
                                           p3["ray_broker_replicas_1"]["median_ms"]),
    }
    targets = [target("P1 replicas=3 vs JetStream R3 (x)", ratios["replicas_3_vs_jetstream_r3"], TARGET_VS_JETSTREAM),
               target("P1 replicas=3 vs replicas=1 (x)", ratios["replicas_3_vs_replicas_1"], TARGET_VS_R1),
               target("P3 median replicas=3 vs replicas=1 (x)", ratios["p3_median_replicas_3_vs_1"], TARGET_P3,
                      at_most=True)]
    return {"benchmark": "jetstream", "machine": machine_info(), "config": asdict(config), "p1": p1,
            "replication_round": split, "p3": p3, "ratios": ratios, "targets": targets,
            "notes": [nats_note] if nats_note else []}


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    p1 = doc["p1"]
    parts = [format_table("Replicated partitions vs NATS JetStream: msgs/s (median of rounds), same run",
                          ["system", "msgs/s", "rounds", "CPU us/msg by process"],
                          [[name, row["median"], " / ".join(f"{v:,.0f}" for v in row["rounds"]),
                            ", ".join(f"{k} {v:g}" for k, v in row["cpu_us_per_msg"].items())]
                           for name, row in p1.items()])]
    split = doc["replication_round"]
    if "held_ms" in split:
        keys = ["leader_commit_ms", "ship_ms", "follower_take_ms", "answer_ms", "held_ms", "follower_write_ms",
                "follower_commit_ms", "changes_per_write"]
        parts.append(format_table("Replication round (replicas=3), mean per round; the follower's write is off the path",
                                  ["rounds", *keys], [[split["rounds"], *(split[k] for k in keys)]]))
    parts.append(format_table("P3 send to receive of single messages", ["system", "median ms", "p99 ms"],
                              [[name, v["median_ms"], v["p99_ms"]] for name, v in doc["p3"].items()]))
    parts.append(targets_table(doc["targets"]))
    parts.extend(f"note: {note}" for note in doc["notes"])
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison from the command line."""
    p = parser(__doc__.splitlines()[0])
    defaults = JetStreamConfig()
    for name in ("batches", "warmup", "rounds", "batch_size", "samples"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    args = p.parse_args(argv)
    config = JetStreamConfig(batches=args.batches, warmup=args.warmup, rounds=args.rounds,
                             batch_size=args.batch_size, body_size=args.body_size, samples=args.samples)
    began = time.monotonic()
    with contextlib.redirect_stdout(sys.stderr):  # what Ray's processes print stays out of the JSON document
        doc = run(config)
    doc["seconds"] = round(time.monotonic() - began, 1)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
