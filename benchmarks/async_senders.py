"""Async senders: how much one driver gains by sending from concurrent asyncio tasks.

One driver process sends batches (100 messages of 1 KB, unkeyed) to a 16-partition queue: once
from a single sync `Sender` (one batch at a time), once from 8 async senders of one
`ray_broker.aio.Namespace` running as concurrent tasks on one event loop (the same number of
batches, split between them). Each measurement has a fresh queue and unmeasured warm-up batches.
Rounds alternate the two so that load drift on a shared machine hits them alike; figures are
medians over rounds. Target: the async senders reach 1.5x the sync sender's messages per second.

    python -m benchmarks.async_senders [--batches 80] [--senders 8] [--rounds 3]
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import ray_broker as rb
import ray_broker.aio as rba

from .common import (
    broker_namespace,
    format_table,
    machine_info,
    make_body,
    median,
    parser,
    rate,
    ratio,
    run_and_emit,
    target,
    targets_table,
)

TARGET_RATIO = 1.5


@dataclass
class AsyncSendersConfig:
    """What the async senders benchmark runs."""

    batches: int = 80
    warmup: int = 4
    senders: int = 8
    rounds: int = 3
    batch_size: int = 100
    body_size: int = 1024
    durability: str = "normal"


def sync_sending(ns: rb.Namespace, queue: str, batch: list[rb.Message], config: AsyncSendersConfig) -> float:
    """Messages per second of one sync sender sending `config.batches` batches one after another."""
    with ns.get_queue_sender(queue) as sender:
        for _ in range(config.warmup):
            sender.send_messages(batch)
        start = time.perf_counter()
        for _ in range(config.batches):
            sender.send_messages(batch)
        return rate(config.batches * len(batch), time.perf_counter() - start)


async def async_sending(ns: rb.Namespace, queue: str, batch: list[rb.Message], config: AsyncSendersConfig) -> float:
    """Messages per second of `config.senders` async senders on this loop sharing `config.batches` batches."""
    async with rba.Namespace(ns.config) as handle:
        senders = [handle.get_queue_sender(queue) for _ in range(config.senders)]
        await asyncio.gather(*(s.send_messages(batch) for s in senders for _ in range(config.warmup)))
        shares = [config.batches // config.senders + (i < config.batches % config.senders)
                  for i in range(config.senders)]

        async def send(sender: rba.Sender, count: int) -> None:
            for _ in range(count):
                await sender.send_messages(batch)

        start = time.perf_counter()
        await asyncio.gather(*(send(s, n) for s, n in zip(senders, shares)))
        return rate(config.batches * len(batch), time.perf_counter() - start)


def run(config: AsyncSendersConfig) -> dict[str, Any]:
    """Run the benchmark (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    batch = [rb.Message(body) for _ in range(config.batch_size)]
    runs = {"sync_1": (1, lambda ns, queue: sync_sending(ns, queue, batch, config)),
            f"async_{config.senders}": (config.senders,
                                        lambda ns, queue: asyncio.run(async_sending(ns, queue, batch, config)))}
    rounds: dict[str, list[float]] = {name: [] for name in runs}
    with broker_namespace("async-senders", durability=config.durability) as ns:
        for i in range(config.rounds):
            for name, (senders, measure) in runs.items():
                queue = f"{name}-{i}"
                ns.create_queue(queue, enable_partitioning=True)
                rounds[name].append(measure(ns, queue))
                stored = ns.get_queue_runtime_properties(queue).active_message_count
                if stored != (config.batches + config.warmup * senders) * config.batch_size:
                    raise RuntimeError(f"{name}, round {i}: the queue holds {stored} messages, not all that were sent")
                ns.delete_queue(queue)
    results = {name: {"msgs_per_s": round(median(rates), 1), "rounds_msgs_per_s": [round(r, 1) for r in rates]}
               for name, rates in rounds.items()}
    speedup = ratio(results[f"async_{config.senders}"]["msgs_per_s"], results["sync_1"]["msgs_per_s"])
    return {
        "benchmark": "async_senders",
        "machine": machine_info(),
        "config": asdict(config),
        "results": results,
        "ratios": {f"async_{config.senders}_vs_sync_1": speedup},
        "targets": [target(f"{config.senders} async senders on one driver vs one sync sender (x)", speedup,
                           TARGET_RATIO)],
    }


def table(doc: dict[str, Any]) -> str:
    """The benchmark as text."""
    cfg = doc["config"]
    title = (f"Async senders: {cfg['batch_size']} x {cfg['body_size']} B per batch, {cfg['batches']} batches x "
             f"{cfg['rounds']} rounds, 16-partition queue, durability={cfg['durability']}")
    baseline = doc["results"]["sync_1"]["msgs_per_s"]
    rows = [[name, r["msgs_per_s"], ratio(r["msgs_per_s"], baseline), " ".join(f"{v:,.0f}" for v in r["rounds_msgs_per_s"])]
            for name, r in doc["results"].items()]
    return "\n\n".join([format_table(title, ["senders", "msgs/s", "x sync_1", "rounds (msgs/s)"], rows),
                        targets_table(doc["targets"])])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=AsyncSendersConfig.batches, help="measured batches per run")
    p.add_argument("--warmup", type=int, default=AsyncSendersConfig.warmup, help="unmeasured batches per sender")
    p.add_argument("--senders", type=int, default=AsyncSendersConfig.senders, help="concurrent async senders")
    p.add_argument("--rounds", type=int, default=AsyncSendersConfig.rounds, help="rounds of both runs")
    p.add_argument("--batch-size", type=int, default=AsyncSendersConfig.batch_size)
    p.add_argument("--durability", default=AsyncSendersConfig.durability, choices=("normal", "fsync", "memory"))
    args = p.parse_args(argv)
    config = AsyncSendersConfig(batches=args.batches, warmup=args.warmup, senders=args.senders, rounds=args.rounds,
                                batch_size=args.batch_size, body_size=args.body_size, durability=args.durability)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
