"""Operator actions: purging a full queue and resubmitting its dead letters, in messages per second.

On a partitioned queue of a fresh namespace (16 partitions, standard tier, durable "normal" stores):
- purge: `--purge` messages sent (untimed), then `Namespace.purge` timed until it returns; the
  queue must be empty after;
- resubmit: `--resubmit` messages sent and dead-lettered (untimed), then
  `Namespace.resubmit_dead_letters` timed until it returns; every one must be back on the queue and
  none left in its dead-letter queue;
- the same resubmit with a filter selecting half of them (`user.n % 2 = 0`), which reads every
  dead letter and moves half.
With `--console` each is measured again, on queues of its own, with the web console open on the
queue's page in a headless Chromium and refreshing on its own (`console_watch`), and compared with
the figures without it. Absolute figures otherwise: there is no peer to compare an operator's
batch job with.

    python -m benchmarks.operator_actions [--purge 100000] [--resubmit 10000] [--partitions N] [--console]
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any, ContextManager

import ray_broker as rb

from .common import broker_namespace, emit, format_table, machine_info, make_body, parser, rate, ratio, ray_session
from .console_watch import ConsoleWatch, console_open

SEND_BATCH = 200
"""Messages per send call while filling the queue (untimed)."""


@dataclass
class OperatorConfig:
    """What the operator-actions benchmark runs."""

    purge: int = 100_000
    resubmit: int = 10_000
    partitions: int | None = None
    """None: the standard tier's 16; a number: a premium namespace with that many."""
    body_size: int = 1024
    console: bool = False
    """Measure each action again with the web console open on its queue and refreshing."""


def _fill(ns: rb.Namespace, queue: str, count: int, body: bytes) -> None:
    """Send `count` messages (property n numbered, keys spread over partitions)."""
    with ns.get_queue_sender(queue) as sender:
        for start in range(0, count, SEND_BATCH):
            sender.send_messages([rb.Message(body, partition_key=f"k{i % 64}", application_properties={"n": i})
                                  for i in range(start, min(count, start + SEND_BATCH))])


def _dead_letter_all(ns: rb.Namespace, queue: str, count: int) -> None:
    """Receive the queue's `count` messages and dead-letter each."""
    done = 0
    with ns.get_queue_receiver(queue) as receiver:
        while done < count:
            batch = receiver.receive_messages(200, max_wait_time=10)
            if not batch:
                raise RuntimeError(f"only {done} of {count} messages could be dead-lettered")
            for message in batch:
                receiver.dead_letter_message(message, reason="benchmark")
            done += len(batch)


def _counts(ns: rb.Namespace, queue: str) -> tuple[int, int]:
    counts = ns.get_queue_runtime_properties(queue)
    return counts.active_message_count, counts.dead_letter_message_count


def _timed(action: Any) -> tuple[int, float]:
    start = time.perf_counter()
    done = action()
    return int(done), time.perf_counter() - start


def _result(done: int, seconds: float) -> dict[str, Any]:
    return {"messages": done, "seconds": round(seconds, 3), "msgs_per_s": round(rate(done, seconds), 1)}


def _watched(ns: rb.Namespace, queue: str, console: bool) -> ContextManager[ConsoleWatch | None]:
    """The console open on `queue`'s page while the block runs (with `console`), else nothing."""
    return console_open(ns, f"#/queue/{queue}") if console else nullcontext()


def _actions(ns: rb.Namespace, config: OperatorConfig, console: bool) -> dict[str, Any]:
    """The three measurements on queues of their own (with `console`, each timed one with the
    console open on its queue's page); the results by action."""
    body = make_body(config.body_size)
    suffix = "-console" if console else ""
    results: dict[str, Any] = {}
    purged, resubmitted = f"purged{suffix}", f"resubmitted{suffix}"
    watches: list[ConsoleWatch] = []
    ns.create_queue(purged, enable_partitioning=True)
    _fill(ns, purged, config.purge, body)
    with _watched(ns, purged, console) as watch:
        results["purge"] = _result(*_timed(lambda: ns.purge(purged)))
    watches += [watch] if watch else []
    if _counts(ns, purged) != (0, 0) or results["purge"]["messages"] != config.purge:
        raise RuntimeError(f"purge removed {results['purge']['messages']} of {config.purge}, "
                           f"left {_counts(ns, purged)}")
    ns.create_queue(resubmitted, enable_partitioning=True)
    _fill(ns, resubmitted, config.resubmit, body)
    _dead_letter_all(ns, resubmitted, config.resubmit)
    with _watched(ns, resubmitted, console) as watch:
        results["resubmit"] = _result(*_timed(lambda: ns.resubmit_dead_letters(resubmitted)))
        if _counts(ns, resubmitted) != (config.resubmit, 0):
            raise RuntimeError(f"after resubmit the queue holds {_counts(ns, resubmitted)} (active, dead), "
                               f"not ({config.resubmit}, 0)")
        _dead_letter_all(ns, resubmitted, config.resubmit)
        moved, seconds = _timed(lambda: ns.resubmit_dead_letters(resubmitted, filter="user.n % 2 = 0"))
    watches += [watch] if watch else []
    results["resubmit_filtered"] = {**_result(moved, seconds), "read": config.resubmit,
                                    "read_per_s": round(rate(config.resubmit, seconds), 1)}
    if moved != (config.resubmit + 1) // 2:
        raise RuntimeError(f"the filtered resubmit moved {moved}, not {(config.resubmit + 1) // 2}")
    if watches:
        calls, seconds = sum(w.api_calls for w in watches), sum(w.seconds for w in watches)
        results["console"] = {"api_calls": calls, "seconds": round(seconds, 1),
                              "calls_per_s": round(rate(calls, seconds), 2),
                              "refreshed": all(w.refreshed for w in watches)}
    return results


def run(config: OperatorConfig) -> dict[str, Any]:
    """Run the three measurements on one namespace (and, with `config.console`, again with the web
    console open and refreshing on each one's queue); the JSON document."""
    sku = "standard" if config.partitions is None else "premium"
    with broker_namespace("operator", sku=sku, partitions=config.partitions) as ns:
        results = _actions(ns, config, console=False)
        watched = _actions(ns, config, console=True) if config.console else None
        partitions = ns.partition_count
    doc: dict[str, Any] = {
        "benchmark": "operator_actions",
        "machine": machine_info(),
        "config": {**asdict(config), "partitions": partitions},
        "results": results,
        "targets": [],
    }
    if watched is not None:
        doc["console_open"] = {**watched, "vs_closed": {
            action: ratio(watched[action]["msgs_per_s"], results[action]["msgs_per_s"]) for action in results}}
    return doc


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    config = doc["config"]
    rows = [[what, r["messages"], r["seconds"], r["msgs_per_s"]] for what, r in doc["results"].items()]
    watched = doc.get("console_open")
    if watched is not None:
        rows += [[f"{what}, console open", watched[what]["messages"], watched[what]["seconds"],
                  watched[what]["msgs_per_s"], watched["vs_closed"][what]] for what in doc["results"]]
        rows = [row + [""] * (5 - len(row)) for row in rows]
    headers = ["action", "messages", "seconds", "msgs/s"] + (["vs console closed"] if watched is not None else [])
    title = (f"Operator actions: a partitioned queue on {config['partitions']} partitions, "
             f"{config['body_size']} B bodies")
    if watched is not None:
        title += f" (the console open made {watched['console']['calls_per_s']} API calls/s)"
    return format_table(title, headers, rows)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    defaults = OperatorConfig()
    p.add_argument("--purge", type=int, default=defaults.purge, help="messages to purge (default 100000)")
    p.add_argument("--resubmit", type=int, default=defaults.resubmit, help="dead letters to resubmit (default 10000)")
    p.add_argument("--partitions", type=int, default=None,
                   help="a premium namespace with this many partitions (default: the standard tier's 16)")
    p.add_argument("--console", action="store_true",
                   help="measure each action again with the web console open on its queue in a headless "
                        "Chromium, refreshing")
    args = p.parse_args(argv)
    config = OperatorConfig(purge=args.purge, resubmit=args.resubmit, partitions=args.partitions,
                            body_size=args.body_size, console=args.console)
    with ray_session():
        doc = run(config)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
