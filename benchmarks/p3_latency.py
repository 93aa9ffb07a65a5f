"""P3: low-volume latency: single messages to a receiver that is already waiting.

A thread per queue sits in `receive_messages(1, max_wait_time=...)`; the driver sends one message
(1 KB, durable store) and times until the receiver has it. A 16-partition queue and a
non-partitioned queue of one standard namespace take turns with the peers (`ray.util.queue` with
a blocked `get`, Redis Streams with a blocked XREADGROUP, and the durable floor: the queue's
blocked get with a SQLite commit on put and on get), so load drift hits all alike; a raw actor
round trip of the same message is the floor of any call. Targets: the 16-partition median at most
1.2x the non-partitioned median and at most 1.0x `ray.util.queue`'s.

    python -m benchmarks.p3_latency [--samples 100] [--gap 0.02] [--no-redis]
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import ray_broker as rb

from .baselines import DurableFloorBaseline, RawActorBaseline, RayQueueBaseline, RedisBaseline, redis_server
from .common import (
    Channel,
    broker_namespace,
    format_table,
    interleaved_latency,
    machine_info,
    make_body,
    parser,
    ratio,
    run_and_emit,
    summarize_ms,
    target,
    targets_table,
)

QUEUES = {"partitioned_16": "p3-partitioned", "non_partitioned_1": "p3-single"}
TARGET_RATIO = 1.2
RAY_QUEUE_TARGET_RATIO = 1.0


@dataclass
class P3Config:
    """What P3 runs."""

    samples: int = 100
    warmup: int = 10
    gap: float = 0.02
    body_size: int = 1024
    durability: str = "normal"
    redis: bool = True
    max_wait: float = 5.0


def broker_channel(sender: rb.Sender, receiver: rb.Receiver, body: bytes) -> Channel:
    """Latency channel over a queue: the tag travels as the message id; messages are completed."""
    def receive_one(max_wait: float) -> tuple[int, float] | None:
        messages = receiver.receive_messages(1, max_wait_time=max_wait)
        if not messages:
            return None
        arrived = time.perf_counter()
        receiver.complete_message(messages[0])
        return int(str(messages[0].message_id)), arrived

    return receive_one, lambda tag: sender.send_messages(rb.Message(body, message_id=str(tag)))


def run(config: P3Config) -> dict[str, Any]:
    """Run P3 (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    with redis_server(config.redis) as (redis_client, redis_note), \
            broker_namespace("p3", durability=config.durability) as ns:
        ns.create_queue(QUEUES["partitioned_16"], enable_partitioning=True)
        ns.create_queue(QUEUES["non_partitioned_1"])
        raw, ray_queue, floor = RawActorBaseline(), RayQueueBaseline(), DurableFloorBaseline(config.durability)
        redis = None if redis_client is None else RedisBaseline(redis_client, "p3")
        senders = {name: ns.get_queue_sender(q) for name, q in QUEUES.items()}
        receivers = {name: ns.get_queue_receiver(q) for name, q in QUEUES.items()}
        try:
            round_trips = raw.round_trips(body, config.samples, config.warmup)
            channels = {name: broker_channel(senders[name], receivers[name], body) for name in QUEUES}
            channels["ray_queue"] = ray_queue.channel(body)
            channels["durable_floor"] = floor.channel(body)
            if redis is not None:
                channels["redis_streams"] = redis.channel(body)
            latencies = interleaved_latency(channels, samples=config.samples, warmup=config.warmup, gap=config.gap,
                                            max_wait=config.max_wait)
        finally:
            for client in (*senders.values(), *receivers.values()):
                client.close()
            raw.close()
            ray_queue.close()
            floor.close()
            if redis is not None:
                redis.close()
    results = {"raw_actor_round_trip": summarize_ms(round_trips),
               **{name: summarize_ms(values) for name, values in latencies.items()}}
    medians = {name: r["median_ms"] for name, r in results.items()}
    ratios = {
        "partitioned_16_vs_non_partitioned_1": ratio(medians["partitioned_16"], medians["non_partitioned_1"]),
        "partitioned_16_vs_ray_queue": ratio(medians["partitioned_16"], medians["ray_queue"]),
        "durable_floor_vs_ray_queue": ratio(medians["durable_floor"], medians["ray_queue"]),
        "partitioned_16_vs_durable_floor": ratio(medians["partitioned_16"], medians["durable_floor"]),
        "partitioned_16_vs_raw_actor_round_trip": ratio(medians["partitioned_16"], medians["raw_actor_round_trip"]),
        "partitioned_16_vs_redis_streams": ratio(medians["partitioned_16"], medians.get("redis_streams")),
        "non_partitioned_1_vs_raw_actor_round_trip": ratio(medians["non_partitioned_1"],
                                                           medians["raw_actor_round_trip"]),
    }
    return {
        "benchmark": "p3_latency",
        "machine": machine_info(),
        "config": asdict(config),
        "notes": [note for note in (redis_note,) if note],
        "results": results,
        "ratios": ratios,
        "targets": [target("P3 median latency, 16-partition vs non-partitioned queue (x)",
                           ratios["partitioned_16_vs_non_partitioned_1"], TARGET_RATIO, at_most=True),
                    target("P3 median latency, 16-partition queue vs ray.util.queue blocked get (x)",
                           ratios["partitioned_16_vs_ray_queue"], RAY_QUEUE_TARGET_RATIO, at_most=True)],
    }


def table(doc: dict[str, Any]) -> str:
    """P3 as text."""
    floor = doc["results"]["raw_actor_round_trip"]["median_ms"]
    rows = [[name, r["median_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"], ratio(r["median_ms"], floor)]
            for name, r in doc["results"].items()]
    cfg = doc["config"]
    title = (f"P3 latency: single {cfg['body_size']} B messages to a waiting receiver, {cfg['samples']} samples, "
             f"durability={cfg['durability']}")
    parts = [format_table(title, ["system", "median ms", "p90 ms", "p99 ms", "max ms", "x raw actor"], rows),
             targets_table(doc["targets"])]
    return "\n\n".join(parts + doc["notes"])


def add_arguments(p: Any) -> None:
    """P3's flags (shared with the suite)."""
    p.add_argument("--samples", type=int, default=P3Config.samples, help="measured messages per system")
    p.add_argument("--gap", type=float, default=P3Config.gap, help="seconds between messages")


def main(argv: list[str] | None = None) -> int:
    """Run P3 from the command line."""
    p = parser(__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("--warmup", type=int, default=P3Config.warmup, help="unmeasured messages per system")
    p.add_argument("--durability", default=P3Config.durability, choices=("normal", "fsync", "memory"))
    p.add_argument("--no-redis", action="store_true", help="skip the Redis Streams baseline")
    args = p.parse_args(argv)
    config = P3Config(samples=args.samples, warmup=args.warmup, gap=args.gap, body_size=args.body_size,
                      durability=args.durability, redis=not args.no_redis)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
