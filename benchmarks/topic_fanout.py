"""Topic fan-out: what publishing costs with 1, 5 and 20 subscriptions (TrueFilter rules).

Two measurements, each against the 1-subscription figure of the same run:
- engine: `PartitionEngine.send` of batches (100 x 1 KB) to a topic on a durable store, no Ray; each
  round drains every subscription between timed sends so the stores stay small; medians over
  alternating rounds, with the bytes stored per message;
- namespace: a 16-partition topic on a real namespace, batches sent with a topic sender (the
  direct path) after untimed warm-up batches; each subscription's count is checked afterwards.
Since a message's body is stored once per partition, whatever the subscriptions, 20 subscriptions
should cost less than 2x one (the target).

    python -m benchmarks.topic_fanout [--subscriptions 1,5,20] [--rounds 5] [--batches 20] [--warmup 10]
                                      [--batch-size 100] [--engine-only]
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ray_broker as rb
from ray_broker.clock import SystemClock
from ray_broker.engine.partition import MAIN, RECEIVE_AND_DELETE, PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.entities import (
    INHERITED_TOPIC_OPTIONS,
    normalize_subscription_options,
    normalize_topic_options,
    subscription_path,
)
from ray_broker.filters import DEFAULT_RULE_NAME, RuleProperties, TrueFilter, rule_to_wire
from ray_broker.message import Message

from .common import (
    broker_namespace,
    emit,
    format_table,
    int_list,
    machine_info,
    make_body,
    median,
    parser,
    rate,
    ratio,
    ray_session,
    target,
    targets_table,
)

TOPIC = "fanout"
TARGET_RATIO = 2.0
"""The most that publishing to the largest subscription count may cost, as a multiple of one."""


@dataclass
class FanoutConfig:
    """What the fan-out benchmark runs."""

    subscriptions: list[int] = field(default_factory=lambda: [1, 5, 20])
    rounds: int = 5
    batches: int = 20
    warmup: int = 10
    """Untimed batches sent to each namespace topic first."""
    batch_size: int = 100
    body_size: int = 1024
    namespace: bool = True
    """Also measure on a real namespace (needs Ray)."""


def _engine_topic(directory: Path, subscriptions: int) -> PartitionEngine:
    """A partition engine over a file store with a topic and `subscriptions` TrueFilter subscriptions."""
    engine = PartitionEngine(0, 1, Store(str(directory / f"fanout-{subscriptions}.db"), "normal"), SystemClock())
    topic = {"name": TOPIC, "kind": "topic", "options": normalize_topic_options({}), "incarnation": "t",
             "created_at": 0.0, "updated_at": 0.0}
    engine.create_entity(topic)
    inherited = {key: topic["options"][key] for key in INHERITED_TOPIC_OPTIONS}
    default_rule = rule_to_wire(RuleProperties(DEFAULT_RULE_NAME, TrueFilter(), None))
    for k in range(subscriptions):
        engine.create_entity({"name": subscription_path(TOPIC, f"s{k}"), "kind": "subscription", "topic": TOPIC,
                              "subscription": f"s{k}", "options": {**normalize_subscription_options({}), **inherited},
                              "rules": [default_rule], "incarnation": f"s{k}", "created_at": 0.0, "updated_at": 0.0})
    return engine


def _engine_round(engine: PartitionEngine, subscriptions: int, envelopes: list[dict[str, Any]],
                  config: FanoutConfig) -> tuple[float, float]:
    """Timed sends of one round (ms per batch), then every subscription drained; and the bytes
    the store held per message before draining."""
    elapsed = 0.0
    for _ in range(config.batches):
        start = time.perf_counter()
        engine.send(TOPIC, envelopes)
        elapsed += time.perf_counter() - start
    stored = engine.runtime(TOPIC)["size"] / (config.batches * config.batch_size)
    for k in range(subscriptions):
        path = subscription_path(TOPIC, f"s{k}")
        while engine.receive(path, MAIN, 10_000, RECEIVE_AND_DELETE)["messages"]:
            pass
    return elapsed * 1000 / config.batches, stored


def run_engine(config: FanoutConfig, envelopes: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine measurement: ms per published batch per subscription count."""
    directory = Path(tempfile.mkdtemp(prefix="rb-fanout-"))
    engines = {n: _engine_topic(directory, n) for n in config.subscriptions}
    rounds: dict[int, list[float]] = {n: [] for n in config.subscriptions}
    stored: dict[int, float] = {}
    try:
        for n, engine in engines.items():
            _engine_round(engine, n, envelopes, FanoutConfig(batches=2, batch_size=config.batch_size))
        for _ in range(config.rounds):
            for n, engine in engines.items():
                ms, stored[n] = _engine_round(engine, n, envelopes, config)
                rounds[n].append(ms)
    finally:
        for engine in engines.values():
            engine.store.close()
        shutil.rmtree(directory, ignore_errors=True)
    return {str(n): {"ms_per_batch": round(median(rounds[n]), 3),
                     "msgs_per_s": round(rate(config.batch_size, median(rounds[n]) / 1000), 1),
                     "stored_bytes_per_message": round(stored[n], 1),
                     "rounds_ms_per_batch": [round(r, 3) for r in rounds[n]]} for n in config.subscriptions}


def _publish(ns: rb.Namespace, topic: str, subscriptions: int, body: bytes, config: FanoutConfig) -> float:
    """Create a 16-partition topic with TrueFilter subscriptions, send warm-up batches and then
    `config.batches` timed ones, check the first subscription's count, delete the topic; the
    seconds the timed batches took."""
    ns.create_topic(topic, enable_partitioning=True)
    for k in range(subscriptions):
        ns.create_subscription(topic, f"s{k}")
    with ns.get_topic_sender(topic) as sender:
        for _ in range(config.warmup):
            sender.send_messages([rb.Message(body) for _ in range(config.batch_size)])
        start = time.perf_counter()
        for _ in range(config.batches):
            sender.send_messages([rb.Message(body) for _ in range(config.batch_size)])
        elapsed = time.perf_counter() - start
    expected = (config.batches + config.warmup) * config.batch_size
    held = ns.get_subscription_runtime_properties(topic, "s0").active_message_count
    if held != expected:
        raise RuntimeError(f"{topic}/s0 holds {held} messages, not {expected}")
    ns.delete_topic(topic)
    return elapsed


def run_namespace(config: FanoutConfig, body: bytes) -> dict[str, Any]:
    """The namespace measurement: topic sender throughput per subscription count (after one
    untimed topic that warms the partitions up)."""
    results: dict[str, Any] = {}
    with broker_namespace("fanout") as ns:
        _publish(ns, f"{TOPIC}-warm", 1, body, config)
        for n in config.subscriptions:
            elapsed = _publish(ns, f"{TOPIC}-{n}", n, body, config)
            results[str(n)] = {"ms_per_batch": round(elapsed * 1000 / config.batches, 3),
                               "msgs_per_s": round(rate(config.batches * config.batch_size, elapsed), 1)}
    return results


def run(config: FanoutConfig) -> dict[str, Any]:
    """Run both measurements; the JSON document."""
    body = make_body(config.body_size)
    envelopes = [Message(body).to_envelope() for _ in range(config.batch_size)]
    results = {"engine": run_engine(config, envelopes)}
    if config.namespace:
        with ray_session():
            results["namespace"] = run_namespace(config, body)
    first, last = str(config.subscriptions[0]), str(config.subscriptions[-1])
    ratios = {where: {n: ratio(r[n]["ms_per_batch"], r[first]["ms_per_batch"]) for n in r}
              for where, r in results.items()}
    return {
        "benchmark": "topic_fanout",
        "machine": machine_info(),
        "config": asdict(config),
        "results": results,
        "cost_vs_first": ratios,
        "targets": [target(f"{where}: publishing with {last} subscriptions vs {first} (x time)", ratios[where][last],
                           TARGET_RATIO, at_most=True) for where in results],
    }


def table(doc: dict[str, Any]) -> str:
    """The fan-out figures as text."""
    config = doc["config"]
    rows = []
    for where, per_count in doc["results"].items():
        for n, r in per_count.items():
            rows.append([where, int(n), r["ms_per_batch"], r["msgs_per_s"], doc["cost_vs_first"][where][n],
                         r.get("stored_bytes_per_message")])
    title = (f"Topic fan-out: {config['batch_size']} x {config['body_size']} B per batch, TrueFilter subscriptions, "
             f"{config['batches']} batches")
    return (format_table(title, ["where", "subscriptions", "ms/batch", "msgs/s", "x first", "stored B/msg"], rows)
            + "\n\n" + targets_table(doc["targets"]))


def main() -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    defaults = FanoutConfig()
    p.add_argument("--subscriptions", type=int_list, default=defaults.subscriptions, help="e.g. 1,5,20")
    p.add_argument("--rounds", type=int, default=defaults.rounds, help="engine rounds (default 5)")
    p.add_argument("--batches", type=int, default=defaults.batches, help="timed batches per round (default 20)")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help="untimed namespace batches (default 10)")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size, help="messages per batch (default 100)")
    p.add_argument("--engine-only", action="store_true", help="skip the namespace measurement (no Ray)")
    args = p.parse_args()
    config = FanoutConfig(subscriptions=args.subscriptions, rounds=args.rounds, batches=args.batches,
                          warmup=args.warmup, batch_size=args.batch_size, body_size=args.body_size,
                          namespace=not args.engine_only)
    doc = run(config)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
