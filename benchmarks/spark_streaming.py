"""Streaming reader throughput: `stream_from_entity` batches against `read_dataframe` of the same messages.

The same `--messages` messages (`--body-size` B, keyed by one of 1,000 customers) are sent to a
16-partition queue before each measurement (untimed); then, timed, they are consumed either
- by `read_dataframe(mode="receive")` with a Spark `count()` of the result (the baseline), or
- by `stream_from_entity(batch_size=--batch-size, mode="receive")` with a `count()` of each batch.
Both end after `MAX_WAIT_S` of silence. After an untimed warm-up of both on 1,000 messages,
rounds alternate; the target is the streaming reader's
messages/s >= 0.7x `read_dataframe`'s.

    python -m benchmarks.spark_streaming [--messages 100000] [--batch-size 10000] [--rounds 2] [--json PATH]
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import ray_broker as rb

from .common import broker_namespace, emit, format_table, machine_info, make_body, median, parser, rate, ratio, target
from .common import targets_table

TARGET_RATIO = 0.7
"""The least the streaming reader's messages/s may be, as a multiple of `read_dataframe`'s."""
WARMUP_MESSAGES = 1000
"""Messages of the untimed warm-up round."""
MAX_WAIT_S = 1.0
"""Silence that ends either reader (counted in both times)."""


@dataclass
class StreamingConfig:
    """What the streaming benchmark runs."""

    messages: int = 100_000
    batch_size: int = 10_000
    body_size: int = 1024
    rounds: int = 2


def fill(ns: rb.Namespace, queue: str, config: StreamingConfig) -> None:
    """Send the benchmark's messages to `queue` in batches as large as the tier allows."""
    from spark_bridge.batch_sending import send_all

    body = make_body(config.body_size)
    with ns.get_queue_sender(queue) as sender:
        send_all(sender, (rb.Message(body, partition_key=f"c{i % 1000}") for i in range(config.messages)))


def read_dataframe_round(spark: Any, ns: rb.Namespace, queue: str) -> tuple[float, int]:
    """Seconds to consume the queue with `read_dataframe`, and the rows counted."""
    from spark_bridge import read_dataframe

    start = time.perf_counter()
    count = read_dataframe(spark, ns, queue, mode="receive", max_wait_time=MAX_WAIT_S).count()
    return time.perf_counter() - start, count


def stream_round(spark: Any, ns: rb.Namespace, queue: str, batch_size: int) -> tuple[float, int]:
    """Seconds to consume the queue with `stream_from_entity`, and the rows counted."""
    from spark_bridge import stream_from_entity

    start = time.perf_counter()
    count = sum(batch.count() for batch in stream_from_entity(spark, ns, queue, batch_size=batch_size,
                                                              max_wait_time=MAX_WAIT_S))
    return time.perf_counter() - start, count


def run(config: StreamingConfig) -> dict[str, Any]:
    """Alternate rounds of both readers on one Spark session and one namespace; the document."""
    from spark_bridge import init_spark, stop_spark
    from spark_bridge.session import start_ray

    start_ray("local")
    spark = init_spark("spark-streaming-bench", 1, 1, "2g")
    spark.sparkContext.setLogLevel("ERROR")
    baseline: list[float] = []
    streaming: list[float] = []
    try:
        with broker_namespace("spark-st") as ns:
            ns.create_queue("st", enable_partitioning=True)
            readers = ((baseline, lambda: read_dataframe_round(spark, ns, "st")),
                       (streaming, lambda: stream_round(spark, ns, "st", config.batch_size)))
            warmup = StreamingConfig(messages=WARMUP_MESSAGES, body_size=config.body_size)
            for times, reader in [(None, r) for _, r in readers] + [r for _ in range(config.rounds) for r in readers]:
                sent = warmup if times is None else config
                fill(ns, "st", sent)
                seconds, count = reader()
                assert count == sent.messages, f"read {count} of {sent.messages} messages"
                if times is not None:
                    times.append(seconds)
        machine = machine_info()
    finally:
        stop_spark()
    base_rate, stream_rate = rate(config.messages, median(baseline)), rate(config.messages, median(streaming))
    ratio_value = ratio(stream_rate, base_rate)
    return {
        "benchmark": "spark_streaming", "config": asdict(config), "machine": machine,
        "results": {
            "read_dataframe": {"seconds": round(median(baseline), 3), "msgs_per_s": round(base_rate, 1),
                               "rounds_s": [round(s, 3) for s in baseline]},
            "stream_from_entity": {"seconds": round(median(streaming), 3), "msgs_per_s": round(stream_rate, 1),
                                   "rounds_s": [round(s, 3) for s in streaming]},
        },
        "ratio": ratio_value,
        "targets": [target(f"stream_from_entity (batch {config.batch_size}) msgs/s vs read_dataframe", ratio_value,
                           TARGET_RATIO)],
    }


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    config, results = doc["config"], doc["results"]
    rows = [[name, r["seconds"], r["msgs_per_s"]] for name, r in results.items()]
    title = (f"Streaming reader: {config['messages']:,} messages x {config['body_size']} B, batch_size "
             f"{config['batch_size']:,}, median of {config['rounds']}")
    return format_table(title, ["reader", "s", "msgs/s"], rows) + "\n\n" + targets_table(doc["targets"])


def main() -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    defaults = StreamingConfig()
    p.add_argument("--messages", type=int, default=defaults.messages, help="messages read each way (default 100,000)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="streaming batch size (default 10,000)")
    p.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds of each reader (default 2)")
    args = p.parse_args()
    config = StreamingConfig(messages=args.messages, batch_size=args.batch_size, body_size=args.body_size,
                             rounds=args.rounds)
    with contextlib.redirect_stdout(sys.stderr):
        doc = run(config)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
