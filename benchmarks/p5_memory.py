"""P5: memory of partition actors under a large backlog.

Fills a 16-partition queue (standard sku, durable store in a temporary data dir) with --messages
messages of 1 KB that nobody receives, sampling every partition process's RSS (and USS) with
psutil as the backlog grows, then once more after a receive, a complete and a peek on the full
backlog. Target: every partition's peak RSS stays under 200 MB. Same-run baselines: each
partition's RSS before the fill, and the RSS of an idle bare Ray actor (the worker's own floor).

    python -m benchmarks.p5_memory [--messages 1000000] [--sample-every 50000]

The full 1,000,000-message run writes about 1.2 GB and takes minutes on a small machine.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import psutil
import ray

import ray_broker as rb

from .baselines import PayloadActor
from .common import (
    broker_namespace,
    drain_received,
    format_table,
    gateway_pid,
    machine_info,
    make_body,
    parser,
    partition_pids,
    rate,
    ratio,
    run_and_emit,
    target,
)

QUEUE = "p5-backlog"
MB = 1024 * 1024


@dataclass
class P5Config:
    """What P5 runs."""

    messages: int = 1_000_000
    batch_size: int = 200
    body_size: int = 1024
    sample_every: int = 50_000
    limit_mb: float = 200.0
    durability: str = "normal"


def memory_mb(pid: int) -> dict[str, float]:
    """RSS and USS of a process, in MB."""
    info = psutil.Process(pid).memory_full_info()
    return {"rss_mb": round(info.rss / MB, 1), "uss_mb": round(info.uss / MB, 1)}


class MemoryTrack:
    """Samples of every partition's memory, and each one's peak."""

    def __init__(self, ns: rb.Namespace) -> None:
        self.ns = ns
        self.samples: list[dict[str, Any]] = []
        self.peak_rss: dict[int, float] = {}
        self.pids: dict[int, set[int]] = {}

    def sample(self, label: str, messages: int) -> dict[str, Any]:
        """Measure every partition (and the gateway) now."""
        pids = partition_pids(self.ns)
        partitions = {k: memory_mb(pid) for k, pid in pids.items()}
        for k, pid in pids.items():
            self.pids.setdefault(k, set()).add(pid)
            self.peak_rss[k] = max(self.peak_rss.get(k, 0.0), partitions[k]["rss_mb"])
        rss = [m["rss_mb"] for m in partitions.values()]
        point = {"label": label, "messages": messages, "max_rss_mb": max(rss), "min_rss_mb": min(rss),
                 "max_uss_mb": max(m["uss_mb"] for m in partitions.values()),
                 "gateway": memory_mb(gateway_pid(self.ns)), "partitions": partitions}
        self.samples.append(point)
        return point


def bare_actor_rss() -> dict[str, float]:
    """Memory of an idle Ray actor process that imports nothing of the broker."""
    actor = PayloadActor.remote()
    try:
        return memory_mb(ray.get(actor.pid.remote(), timeout=120))
    finally:
        ray.kill(actor)


def run(config: P5Config) -> dict[str, Any]:
    """Run P5 (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    bare = bare_actor_rss()
    with broker_namespace("p5", durability=config.durability) as ns:
        ns.create_queue(QUEUE, enable_partitioning=True, max_size_in_megabytes=80 * 1024)
        track = MemoryTrack(ns)
        idle = track.sample("idle", 0)
        sent, start, next_sample = 0, time.perf_counter(), config.sample_every
        with ns.get_queue_sender(QUEUE) as sender:
            while sent < config.messages:
                count = min(config.batch_size, config.messages - sent)
                sender.send_messages([rb.Message(body) for _ in range(count)])
                sent += count
                if sent >= next_sample:
                    track.sample("fill", sent)
                    next_sample += config.sample_every
        fill_seconds = time.perf_counter() - start
        track.sample("filled", sent)
        backlog = ns.get_queue_runtime_properties(QUEUE).active_message_count
        with ns.get_queue_receiver(QUEUE) as receiver:
            for message in drain_received(receiver, min(100, sent), 30.0):
                receiver.complete_message(message)
            receiver.peek_messages(100)
        track.sample("after receive, complete, peek", sent)
    peak = max(track.peak_rss.values())
    restarts = {k: len(p) - 1 for k, p in track.pids.items() if len(p) > 1}
    return {
        "benchmark": "p5_memory",
        "machine": machine_info(),
        "config": asdict(config),
        "fill": {"messages": sent, "seconds": round(fill_seconds, 1), "msgs_per_s": round(rate(sent, fill_seconds), 1),
                 "backlog_reported": backlog},
        "baselines": {"bare_ray_actor": bare, "idle_partition_max_rss_mb": idle["max_rss_mb"]},
        "results": {"peak_rss_mb_by_partition": track.peak_rss, "peak_rss_mb": peak,
                    "partition_restarts": restarts, "samples": track.samples},
        "ratios": {"peak_rss_vs_limit": ratio(peak, config.limit_mb),
                   "peak_rss_vs_idle_partition": ratio(peak, idle["max_rss_mb"]),
                   "peak_rss_vs_bare_ray_actor": ratio(peak, bare["rss_mb"])},
        "targets": [target(f"P5 peak partition RSS with {sent:,} messages backlog (MB)", peak, config.limit_mb,
                           at_most=True)],
    }


def table(doc: dict[str, Any]) -> str:
    """P5 as text."""
    rows = [[s["label"], s["messages"], s["max_rss_mb"], s["min_rss_mb"], s["max_uss_mb"], s["gateway"]["rss_mb"]]
            for s in doc["results"]["samples"]]
    fill = doc["fill"]
    title = (f"P5 memory: {fill['messages']:,} x {doc['config']['body_size']} B backlog on 16 partitions "
             f"(filled at {fill['msgs_per_s']:,.0f} msgs/s); bare Ray actor RSS "
             f"{doc['baselines']['bare_ray_actor']['rss_mb']} MB")
    t = doc["targets"][0]
    verdict = f"peak partition RSS {t['value']} MB (limit {t['threshold']} MB): {'met' if t['met'] else 'NOT met'}"
    headers = ["sample", "messages", "max RSS MB", "min RSS MB", "max USS MB", "gateway RSS MB"]
    return format_table(title, headers, rows) + "\n" + verdict


def main(argv: list[str] | None = None) -> int:
    """Run P5 from the command line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=P5Config.messages, help="backlog size")
    p.add_argument("--batch-size", type=int, default=P5Config.batch_size, help="messages per send")
    p.add_argument("--sample-every", type=int, default=P5Config.sample_every, help="messages between samples")
    p.add_argument("--limit-mb", type=float, default=P5Config.limit_mb, help="RSS limit per partition")
    p.add_argument("--durability", default=P5Config.durability, choices=("normal", "fsync", "memory"))
    args = p.parse_args(argv)
    config = P5Config(messages=args.messages, batch_size=args.batch_size, body_size=args.body_size,
                      sample_every=args.sample_every, limit_mb=args.limit_mb, durability=args.durability)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
