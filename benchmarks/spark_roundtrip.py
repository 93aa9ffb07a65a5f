"""Spark round trip: DataFrame -> entity -> DataFrame, against RayDP's own Spark -> Ray -> Spark.

Both sides move the same cached DataFrame (`--rows` rows of `--body-size` B bodies keyed by one
of 1,000 customers) and end with a Spark `count()` of the DataFrame they produced:
- broker: `write_dataframe` into a partitioned queue (`--sku`: standard's 16 partitions and 256 KB
  batches by default; premium takes `--partitions`, 1, 2 or 4, and 1 MB batches), then
  `read_dataframe(mode="receive")`;
- baseline: `raydp.spark.from_spark_recoverable(df)` then `Dataset.to_spark(spark)` (what
  `ray.data.from_spark` and `to_spark` do), the cached copy released after.
After an untimed warm-up of both sides on 1,000 rows (worker processes start, code loads),
rounds alternate baseline and broker; the target is the broker's rows/s >= 0.3x the baseline's.

    python -m benchmarks.spark_roundtrip [--rows 1000000] [--body-size 1024] [--rounds 1] [--sku standard]
        [--partitions N] [--json PATH]
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from .common import broker_namespace, emit, format_table, machine_info, make_body, median, parser, rate, ratio, target
from .common import targets_table

TARGET_RATIO = 0.3
"""The least the broker round trip's rows/s may be, as a multiple of RayDP's round trip."""
WARMUP_ROWS = 1000
"""Rows of the untimed warm-up round."""
MAX_WAIT_S = 1.0
"""Silence that ends `read_dataframe` (counted in the broker's time)."""


@dataclass
class RoundTripConfig:
    """What the round-trip benchmark runs."""

    rows: int = 1_000_000
    body_size: int = 1024
    rounds: int = 1
    spark_partitions: int = 8
    executor_memory: str = "6g"
    """The Spark executor's heap: RayDP's conversion holds a whole partition of Arrow data in it."""
    sku: str = "standard"
    """The namespace's tier."""
    partitions: int | None = None
    """The namespace's partition count (premium only; None: the tier's default)."""


def source_frame(spark: Any, config: RoundTripConfig) -> Any:
    """The cached DataFrame both sides move: id, a body of `body_size` bytes ending in the id, a customer."""
    from pyspark.sql import functions as F

    prefix = bytearray(make_body(max(0, config.body_size - 12)))
    df = (spark.range(0, config.rows, numPartitions=config.spark_partitions)
          .withColumn("body", F.concat(F.lit(prefix), F.lpad(F.col("id").cast("string"), 12, "0").cast("binary")))
          .withColumn("customer", F.concat(F.lit("c"), (F.col("id") % 1000).cast("string"))))
    df.cache()
    df.count()
    return df


def raydp_round(spark: Any, df: Any) -> float:
    """Seconds for RayDP's Spark -> Ray -> Spark of `df`, ending in a count."""
    from raydp.spark import from_spark_recoverable, release_spark_recoverable

    start = time.perf_counter()
    dataset = from_spark_recoverable(df)
    count = dataset.to_spark(spark).count()
    elapsed = time.perf_counter() - start
    release_spark_recoverable(df)
    assert count == df.count(), f"RayDP round trip gave {count} rows"
    return elapsed


def broker_round(spark: Any, ns: Any, df: Any, queue: str) -> tuple[float, float, float]:
    """Seconds for write_dataframe + read_dataframe(...).count() of `df`, and each half's share."""
    from spark_bridge import read_dataframe, write_dataframe

    start = time.perf_counter()
    sent = write_dataframe(df, ns, queue, body="body", partition_key="customer")
    written = time.perf_counter()
    count = read_dataframe(spark, ns, queue, mode="receive", max_wait_time=MAX_WAIT_S).count()
    done = time.perf_counter()
    assert sent == count == df.count(), f"sent {sent}, read back {count}"
    return done - start, written - start, done - written


def run(config: RoundTripConfig) -> dict[str, Any]:
    """Alternate rounds of both sides on one Spark session and one namespace; the document."""
    from spark_bridge import init_spark, stop_spark
    from spark_bridge.session import start_ray

    start_ray("local")
    spark = init_spark("spark-roundtrip-bench", 1, 1, config.executor_memory)
    spark.sparkContext.setLogLevel("ERROR")
    baseline: list[float] = []
    broker: list[tuple[float, float, float]] = []
    try:
        warmup = source_frame(spark, RoundTripConfig(rows=WARMUP_ROWS, body_size=config.body_size,
                                                     spark_partitions=config.spark_partitions))
        df = source_frame(spark, config)
        with broker_namespace("spark-rt", sku=config.sku, partitions=config.partitions) as ns:
            ns.create_queue("rt", enable_partitioning=True)
            raydp_round(spark, warmup)
            broker_round(spark, ns, warmup, "rt")
            warmup.unpersist()
            for _ in range(config.rounds):
                baseline.append(raydp_round(spark, df))
                broker.append(broker_round(spark, ns, df, "rt"))
        machine = machine_info()
    finally:
        stop_spark()
    base_s, broker_s = median(baseline), median([b[0] for b in broker])
    base_rate, broker_rate = rate(config.rows, base_s), rate(config.rows, broker_s)
    ratio_value = ratio(broker_rate, base_rate)
    return {
        "benchmark": "spark_roundtrip", "config": asdict(config), "machine": machine,
        "results": {
            "raydp": {"seconds": round(base_s, 3), "rows_per_s": round(base_rate, 1),
                      "rounds_s": [round(s, 3) for s in baseline]},
            "broker": {"seconds": round(broker_s, 3), "rows_per_s": round(broker_rate, 1),
                       "write_s": round(median([b[1] for b in broker]), 3),
                       "read_s": round(median([b[2] for b in broker]), 3),
                       "rounds_s": [round(b[0], 3) for b in broker]},
        },
        "ratio": ratio_value,
        "targets": [target("broker round trip rows/s vs RayDP's", ratio_value, TARGET_RATIO)],
    }


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    config, results = doc["config"], doc["results"]
    rows = [["raydp from_spark -> to_spark", results["raydp"]["seconds"], results["raydp"]["rows_per_s"], None, None],
            ["broker write_dataframe -> read_dataframe", results["broker"]["seconds"], results["broker"]["rows_per_s"],
             results["broker"]["write_s"], results["broker"]["read_s"]]]
    title = (f"Spark round trip: {config['rows']:,} rows x {config['body_size']} B, {config['sku']} tier, "
             f"median of {config['rounds']}")
    return (format_table(title, ["path", "s", "rows/s", "write s", "read s"], rows) + "\n\n"
            + targets_table(doc["targets"]))


def main() -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    defaults = RoundTripConfig()
    p.add_argument("--rows", type=int, default=defaults.rows, help="rows moved each way (default 1,000,000)")
    p.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds of each side (default 1)")
    p.add_argument("--spark-partitions", type=int, default=defaults.spark_partitions,
                   help="partitions of the source DataFrame (default 8)")
    p.add_argument("--executor-memory", default=defaults.executor_memory,
                   help=f"the Spark executor's heap (default {defaults.executor_memory})")
    p.add_argument("--sku", default=defaults.sku, help="the namespace's tier (default standard: 16 partitions)")
    p.add_argument("--partitions", type=int, default=defaults.partitions,
                   help="the namespace's partition count, premium only (1, 2 or 4)")
    args = p.parse_args()
    config = RoundTripConfig(rows=args.rows, body_size=args.body_size, rounds=args.rounds,
                             spark_partitions=args.spark_partitions, executor_memory=args.executor_memory,
                             sku=args.sku, partitions=args.partitions)
    with contextlib.redirect_stdout(sys.stderr):
        doc = run(config)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
