"""The benchmark suite behind `ray-broker bench`: P1 (throughput), P3 (latency), one Ray, then the
engine alone (no Ray).

Prints one JSON document holding the three documents and the headline ratios, and their tables.

    python -m benchmarks.suite [--rounds 3] [--batches 50] [--samples 100] [--no-redis] [--quick] [--json PATH]
"""
from __future__ import annotations

from typing import Any

from . import engine_cycle, p1_throughput, p3_latency
from .common import emit, machine_info, parser, ray_session, targets_table

QUICK = {"rounds": 1, "batches": 10, "warmup": 2, "samples": 20}


def run(p1: p1_throughput.P1Config, p3: p3_latency.P3Config,
        engine: engine_cycle.EngineCycleConfig) -> dict[str, Any]:
    """Run P1 then P3 (Ray must be up), then the engine cycle, and return the suite's JSON document."""
    p1_doc = p1_throughput.run(p1)
    p3_doc = p3_latency.run(p3)
    engine_doc = engine_cycle.run(engine)
    return {
        "benchmark": "suite",
        "machine": machine_info(),
        "ratios": {
            "p1_partitioned_16_vs_ray_queue": p1_doc["ratios"]["partitioned_16_vs_ray_queue"],
            "p1_non_partitioned_1_vs_ray_queue": p1_doc["ratios"]["non_partitioned_1_vs_ray_queue"],
            "p1_partitioned_16_vs_redis_streams": p1_doc["ratios"]["partitioned_16_vs_redis_streams"],
            "p3_partitioned_16_vs_non_partitioned_1": p3_doc["ratios"]["partitioned_16_vs_non_partitioned_1"],
            "p3_partitioned_16_vs_ray_queue": p3_doc["ratios"]["partitioned_16_vs_ray_queue"],
            "engine_vs_raw_sqlite": engine_doc["targets"][0]["value"],
        },
        "targets": p1_doc["targets"] + p3_doc["targets"] + engine_doc["targets"],
        "p1": p1_doc,
        "p3": p3_doc,
        "engine": engine_doc,
    }


def table(doc: dict[str, Any]) -> str:
    """The suite as text: both tables, then the targets."""
    parts = [p1_throughput.table(doc["p1"]), p3_latency.table(doc["p3"]), engine_cycle.table(doc["engine"]),
             targets_table(doc["targets"], "Suite targets")]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Run the suite from the command line (or from `ray-broker bench`); returns the exit status."""
    p = parser(__doc__.splitlines()[0])
    p1_throughput.add_arguments(p)
    p3_latency.add_arguments(p)
    p.add_argument("--quick", action="store_true", help=f"a sanity run: {QUICK} (overrides those flags)")
    args = p.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    p1 = p1_throughput.P1Config(batches=args.batches, warmup=args.warmup, rounds=args.rounds,
                                body_size=args.body_size, redis=not args.no_redis)
    p3 = p3_latency.P3Config(samples=args.samples, warmup=min(args.samples, p3_latency.P3Config.warmup), gap=args.gap,
                             body_size=args.body_size, redis=not args.no_redis)
    engine = engine_cycle.EngineCycleConfig(rounds=args.rounds, batches=args.batches, warmup=args.warmup)
    with ray_session():
        doc = run(p1, p3, engine)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
