"""Scale: end-to-end throughput over partition counts and concurrent clients.

Premium namespaces take `partitions=N` at start (every premium entity is partitioned); for each N
in --partitions and each client count C in --clients, C client processes (Ray actors, each with
its own sender and receiver) run the P1 cycle (send a batch, receive a batch, complete it) on one
shared queue at once. Aggregate throughput is all measured messages over the span from the first
client's start to the last client's end. Same-run baseline: C clients running put/get batch
cycles on one shared `ray.util.queue.Queue`.

    python -m benchmarks.scale [--partitions 1,2,4,8,16] [--clients 1,2,3,4] [--batches 20]
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import ray

import ray_broker as rb

from .baselines import RayQueueBaseline, distinct_bodies, queue_cycle
from .common import (
    broker_namespace,
    format_table,
    int_list,
    machine_info,
    make_body,
    parser,
    rate,
    ratio,
    run_and_emit,
)
from .p1_throughput import broker_cycle

QUEUE = "scale"


@dataclass
class ScaleConfig:
    """What the scale benchmark runs."""

    partitions: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    clients: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    batches: int = 20
    warmup: int = 3
    batch_size: int = 100
    body_size: int = 1024
    durability: str = "normal"
    max_wait: float = 30.0


@ray.remote(num_cpus=0)
class CycleClient:
    """One client process; runs timed cycles and reports its measured window in epoch seconds."""

    def pid(self) -> int:
        """The process id (also: the actor is up)."""
        return os.getpid()

    def broker(self, ns: rb.Namespace, queue: str, config: ScaleConfig) -> dict[str, Any]:
        """P1 cycles on `queue` with this process's own sender and receiver."""
        result = broker_cycle(ns, queue, make_body(config.body_size), batch_size=config.batch_size,
                              batches=config.batches, warmup=config.warmup, max_wait=config.max_wait)
        return _windowed(result)

    def ray_queue(self, queue: Any, config: ScaleConfig) -> dict[str, Any]:
        """put/get batch cycles on a shared `ray.util.queue.Queue`."""
        bodies = distinct_bodies(make_body(config.body_size), config.batch_size)
        return _windowed(queue_cycle(queue, bodies, config.batches, config.warmup))


def _windowed(result: dict[str, Any]) -> dict[str, Any]:
    ended = time.time()
    return dict(result, started_at=ended - result["seconds"], ended_at=ended)


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Total throughput of clients that ran at the same time, and each one's own rate."""
    span = max(r["ended_at"] for r in results) - min(r["started_at"] for r in results)
    return {"msgs_per_s": round(rate(sum(r["messages"] for r in results), span), 1),
            "per_client_msgs_per_s": [r["msgs_per_s"] for r in results]}


def run(config: ScaleConfig) -> dict[str, Any]:
    """Run the scale matrix (Ray must be up) and return its JSON document."""
    clients = [CycleClient.remote() for _ in range(max(config.clients))]
    ray.get([c.pid.remote() for c in clients], timeout=300)
    baseline: dict[int, dict[str, Any]] = {}
    points: list[dict[str, Any]] = []
    try:
        for count in config.clients:
            shared = RayQueueBaseline()
            try:
                baseline[count] = aggregate(ray.get([c.ray_queue.remote(shared.queue, config)
                                                     for c in clients[:count]]))
            finally:
                shared.close()
        for partitions in config.partitions:
            with broker_namespace("scale", sku="premium", partitions=partitions, durability=config.durability) as ns:
                ns.create_queue(QUEUE)
                for count in config.clients:
                    point = aggregate(ray.get([c.broker.remote(ns, QUEUE, config) for c in clients[:count]]))
                    points.append({"partitions": partitions, "clients": count, **point})
    finally:
        for client in clients:
            ray.kill(client)
    by_key = {(p["partitions"], p["clients"]): p["msgs_per_s"] for p in points}
    first = config.partitions[0]
    for p in points:
        p["vs_ray_queue_same_clients"] = ratio(p["msgs_per_s"], baseline[p["clients"]]["msgs_per_s"])
        p[f"vs_{first}_partitions_same_clients"] = ratio(p["msgs_per_s"], by_key[(first, p["clients"])])
    return {
        "benchmark": "scale",
        "machine": machine_info(),
        "config": asdict(config),
        "baselines": {"ray_queue_by_clients": {str(k): v for k, v in baseline.items()}},
        "results": points,
    }


def table(doc: dict[str, Any]) -> str:
    """The scale matrix as text: aggregate msgs/s per partition count (rows) and client count."""
    cfg = doc["config"]
    cell = {(p["partitions"], p["clients"]): p for p in doc["results"]}
    base = doc["baselines"]["ray_queue_by_clients"]
    rows = [["ray.util.queue", *(base[str(c)]["msgs_per_s"] for c in cfg["clients"])]]
    rows += [[f"{n} partitions", *(cell[(n, c)]["msgs_per_s"] for c in cfg["clients"])] for n in cfg["partitions"]]
    rows += [[f"{n} p. x queue", *(cell[(n, c)]["vs_ray_queue_same_clients"] for c in cfg["clients"])]
             for n in cfg["partitions"]]
    title = (f"Scale: aggregate msgs/s, {cfg['batches']} batches of {cfg['batch_size']} x {cfg['body_size']} B "
             f"per client, premium sku, durability={cfg['durability']}")
    return format_table(title, ["", *(f"{c} client(s)" for c in cfg["clients"])], rows)


def main(argv: list[str] | None = None) -> int:
    """Run the scale benchmark from the command line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int_list, default=ScaleConfig().partitions, help="e.g. 1,2,4,8,16")
    p.add_argument("--clients", type=int_list, default=ScaleConfig().clients, help="e.g. 1,2,3,4")
    p.add_argument("--batches", type=int, default=ScaleConfig.batches, help="measured batches per client")
    p.add_argument("--warmup", type=int, default=ScaleConfig.warmup, help="unmeasured batches per client")
    p.add_argument("--durability", default=ScaleConfig.durability, choices=("normal", "fsync", "memory"))
    args = p.parse_args(argv)
    config = ScaleConfig(partitions=args.partitions, clients=args.clients, batches=args.batches, warmup=args.warmup,
                         body_size=args.body_size, durability=args.durability)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
