"""P1: end-to-end throughput of send, receive and complete against its peers in the same run.

One lockstep cycle per batch: send a batch (100 messages of 1 KB), receive until all of it is back
(peek-lock), complete every message (the completes travel with the next receive call). Durable
store: durability="normal" in a temporary data dir. Two queues on one standard namespace: a
16-partition queue (`enable_partitioning=True`) and a non-partitioned one (a single partition).
Rounds alternate every system so that load drift on a shared machine hits them alike; figures
are medians over rounds. Target: the 16-partition cycle reaches 0.8x the `ray.util.queue`
put+get cycle.

    python -m benchmarks.p1_throughput [--batches 50] [--rounds 3] [--no-redis]
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import ray_broker as rb

from .baselines import (
    DurableFloorBaseline,
    RawActorBaseline,
    RayQueueBaseline,
    RedisBaseline,
    cycle_result,
    distinct_bodies,
    redis_server,
)
from .common import (
    PhaseClock,
    broker_namespace,
    drain_received,
    format_table,
    machine_info,
    make_body,
    median,
    parser,
    ratio,
    run_and_emit,
    target,
    targets_table,
)

QUEUES = {"partitioned_16": "p1-partitioned", "non_partitioned_1": "p1-single"}
TARGET_RATIO = 0.8
REDIS_TARGET_RATIO = 1.0


@dataclass
class P1Config:
    """What P1 runs."""

    batches: int = 50
    warmup: int = 5
    rounds: int = 3
    batch_size: int = 100
    body_size: int = 1024
    durability: str = "normal"
    redis: bool = True
    max_wait: float = 10.0


def broker_cycle(ns: rb.Namespace, queue: str, body: bytes, *, batch_size: int, batches: int, warmup: int,
                 max_wait: float) -> dict[str, Any]:
    """Timed send / receive / complete cycles on `queue`; closing the receiver (which sends the
    last completes) is part of the measured time."""
    clock = PhaseClock()
    start = time.perf_counter()
    receiver = ns.get_queue_receiver(queue)
    try:
        with ns.get_queue_sender(queue) as sender:
            for i in range(warmup + batches):
                if i == warmup:
                    clock, start = PhaseClock(), time.perf_counter()
                with clock("send"):
                    sender.send_messages([rb.Message(body) for _ in range(batch_size)])
                with clock("receive"):
                    got = drain_received(receiver, batch_size, max_wait)
                with clock("complete"):
                    for message in got:
                        receiver.complete_message(message)
        with clock("close"):
            receiver.close()
    finally:
        receiver.close()
    return cycle_result(batch_size * batches, time.perf_counter() - start, clock, batches)


def run(config: P1Config) -> dict[str, Any]:
    """Run P1 (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    bodies = distinct_bodies(body, config.batch_size)
    sizes = {"batches": config.batches, "warmup": config.warmup}
    rounds: dict[str, list[dict[str, Any]]] = {}
    with redis_server(config.redis) as (redis_client, redis_note), \
            broker_namespace("p1", durability=config.durability) as ns:
        ns.create_queue(QUEUES["partitioned_16"], enable_partitioning=True)
        ns.create_queue(QUEUES["non_partitioned_1"])
        raw, ray_queue, floor = RawActorBaseline(), RayQueueBaseline(), DurableFloorBaseline(config.durability)
        redis = None if redis_client is None else RedisBaseline(redis_client, "p1")
        systems: dict[str, Callable[[], dict[str, Any]]] = {
            "ray_queue": lambda: ray_queue.cycle(bodies, **sizes),
            "raw_actor": lambda: raw.cycle(bodies, **sizes),
            "durable_floor": lambda: floor.cycle(bodies, **sizes),
            **({} if redis is None else {"redis_streams": lambda: redis.cycle(bodies, **sizes)}),
            **{name: (lambda q=q: broker_cycle(ns, q, body, batch_size=config.batch_size, max_wait=config.max_wait,
                                               **sizes)) for name, q in QUEUES.items()},
        }
        try:
            for _ in range(config.rounds):
                for name, measure in systems.items():
                    rounds.setdefault(name, []).append(measure())
            left = {name: ns.get_queue_runtime_properties(q).total_message_count for name, q in QUEUES.items()}
        finally:
            raw.close()
            ray_queue.close()
            floor.close()
    results = {name: _summary(runs) for name, runs in rounds.items()}
    rates = {name: r["msgs_per_s"] for name, r in results.items()}
    ratios = {
        "partitioned_16_vs_ray_queue": ratio(rates["partitioned_16"], rates["ray_queue"]),
        "non_partitioned_1_vs_ray_queue": ratio(rates["non_partitioned_1"], rates["ray_queue"]),
        "partitioned_16_vs_non_partitioned_1": ratio(rates["partitioned_16"], rates["non_partitioned_1"]),
        "partitioned_16_vs_raw_actor_cycle": ratio(rates["partitioned_16"], rates["raw_actor"]),
        "partitioned_16_vs_redis_streams": ratio(rates["partitioned_16"], rates.get("redis_streams")),
        "ray_queue_vs_raw_actor_cycle": ratio(rates["ray_queue"], rates["raw_actor"]),
        "durable_floor_vs_ray_queue": ratio(rates["durable_floor"], rates["ray_queue"]),
        "partitioned_16_vs_durable_floor": ratio(rates["partitioned_16"], rates["durable_floor"]),
        "non_partitioned_1_vs_durable_floor": ratio(rates["non_partitioned_1"], rates["durable_floor"]),
    }
    return {
        "benchmark": "p1_throughput",
        "machine": machine_info(),
        "config": asdict(config),
        "notes": [note for note in (redis_note,) if note],
        "results": results,
        "messages_left_after_run": left,
        "ratios": ratios,
        "targets": [target("P1 16-partition send/receive/complete vs ray.util.queue put+get (x)",
                           ratios["partitioned_16_vs_ray_queue"], TARGET_RATIO),
                    target("P1 non-partitioned send/receive/complete vs ray.util.queue put+get (x)",
                           ratios["non_partitioned_1_vs_ray_queue"], TARGET_RATIO)]
        + ([target("P1 16-partition vs Redis Streams XADD/XREADGROUP/XACK, AOF everysec (x)",
                   ratios["partitioned_16_vs_redis_streams"], REDIS_TARGET_RATIO)]
           if ratios["partitioned_16_vs_redis_streams"] is not None else []),
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median throughput over rounds, with the phase breakdown of the median round."""
    middle = sorted(runs, key=lambda r: r["msgs_per_s"])[len(runs) // 2]
    return {"msgs_per_s": round(median([r["msgs_per_s"] for r in runs]), 1),
            "rounds_msgs_per_s": [r["msgs_per_s"] for r in runs],
            "ms_per_batch": middle["ms_per_batch"]}


def table(doc: dict[str, Any]) -> str:
    """P1 as text."""
    baseline = doc["results"]["ray_queue"]["msgs_per_s"]
    rows = [[name, r["msgs_per_s"], sum(r["ms_per_batch"].values()), ratio(r["msgs_per_s"], baseline),
             " ".join(f"{k}={v:.2f}" for k, v in r["ms_per_batch"].items())]
            for name, r in doc["results"].items()]
    cfg = doc["config"]
    title = (f"P1 throughput: {cfg['batch_size']} x {cfg['body_size']} B per batch, {cfg['batches']} batches x "
             f"{cfg['rounds']} rounds, durability={cfg['durability']}")
    parts = [format_table(title, ["system", "msgs/s", "ms/batch", "x ray_queue", "phases (ms/batch)"], rows),
             targets_table(doc["targets"])]
    return "\n\n".join(parts + doc["notes"])


def add_arguments(p: Any) -> None:
    """P1's flags (shared with the suite)."""
    p.add_argument("--batches", type=int, default=P1Config.batches, help="measured batches per round")
    p.add_argument("--warmup", type=int, default=P1Config.warmup, help="unmeasured batches per round")
    p.add_argument("--rounds", type=int, default=P1Config.rounds, help="rounds over all systems")
    p.add_argument("--no-redis", action="store_true", help="skip the Redis Streams baseline")


def main(argv: list[str] | None = None) -> int:
    """Run P1 from the command line."""
    p = parser(__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("--batch-size", type=int, default=P1Config.batch_size)
    p.add_argument("--durability", default=P1Config.durability, choices=("normal", "fsync", "memory"))
    args = p.parse_args(argv)
    config = P1Config(batches=args.batches, warmup=args.warmup, rounds=args.rounds, batch_size=args.batch_size,
                      body_size=args.body_size, durability=args.durability, redis=not args.no_redis)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
