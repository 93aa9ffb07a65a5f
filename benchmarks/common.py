"""Shared plumbing of the benchmarks: Ray and namespace lifetimes, timing, ratios and output.

Output convention: a script prints exactly one JSON document on stdout (so `> result.json` works)
and a human-readable table on stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Sequence, TypeVar

import psutil
import ray

import ray_broker as rb
from ray_broker.client.lifecycle import ensure_ray as start_ray
from ray_broker.config import gateway_actor_name, partition_actor_name

RAY_NAMESPACE = "ray_broker"
"""The Ray namespace of every broker actor (API.md, operations contract)."""

Channel = tuple[Callable[[float], "tuple[int, float] | None"], Callable[[int], None]]
"""A latency channel: `receive_one(max_wait)` blocks up to `max_wait` seconds and returns the tag
of the message received with the `time.perf_counter()` it arrived at (or None); `send_one(tag)`
sends one message carrying `tag`."""

C = TypeVar("C")
"""A benchmark's configuration type."""


# ---------------------------------------------------------------------- Ray and namespaces

def ensure_ray() -> bool:
    """Start the local Ray a user of the library gets (its namespace and settings) unless Ray is
    up; True if this call started it."""
    if ray.is_initialized():
        return False
    start_ray("local")
    return True


@contextlib.contextmanager
def ray_session() -> Iterator[None]:
    """Ray for the length of a script: started once here (unless already up) and shut down after.

    Meanwhile stdout goes to stderr, so that what Ray prints there (raylet warnings) stays out of
    the JSON document a script prints after the session.
    """
    with contextlib.redirect_stdout(sys.stderr):
        started = ensure_ray()
        try:
            yield
        finally:
            if started:
                ray.shutdown()


@contextlib.contextmanager
def broker_namespace(prefix: str, *, sku: str = "standard", partitions: int | None = None,
                     durability: str = "normal", replicas: int = 1,
                     amqp_port: int | None = None) -> Iterator[rb.Namespace]:
    """A fresh namespace with a unique name and a temporary data dir, stopped and deleted after."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    data_dir = None if durability == "memory" else tempfile.mkdtemp(prefix=f"rb-{name}-")
    try:
        yield rb.start(name, sku=sku, partitions=partitions, data_dir=data_dir, durability=durability,
                       replicas=replicas, amqp_port=amqp_port)
    finally:
        rb.stop(name, delete_data=True)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


def partition_handles(ns: rb.Namespace) -> list[Any]:
    """The partition actors of a namespace, by partition index."""
    return [ray.get_actor(partition_actor_name(ns.name, k), namespace=RAY_NAMESPACE) for k in range(ns.partition_count)]


def partition_pids(ns: rb.Namespace) -> dict[int, int]:
    """Process id of each partition actor of a namespace, by partition index."""
    return dict(enumerate(ray.get([h.pid.remote() for h in partition_handles(ns)], timeout=60)))


def gateway_pid(ns: rb.Namespace, index: int = 0) -> int:
    """Process id of gateway `index` of a namespace."""
    handle = ray.get_actor(gateway_actor_name(ns.name, index), namespace=RAY_NAMESPACE)
    return int(ray.get(handle.pid.remote(), timeout=60))


def make_body(size: int) -> bytes:
    """A message body of `size` random (incompressible, reproducible) bytes."""
    return random.Random(size).randbytes(size)


def drain_received(receiver: rb.Receiver, count: int, max_wait: float) -> list[rb.ReceivedMessage]:
    """Receive until `count` messages arrived; RuntimeError when `max_wait` passes without one."""
    got: list[rb.ReceivedMessage] = []
    while len(got) < count:
        batch = receiver.receive_messages(count - len(got), max_wait_time=max_wait)
        if not batch:
            raise RuntimeError(f"received {len(got)} of {count} messages; none arrived within {max_wait} s")
        got.extend(batch)
    return got


# ---------------------------------------------------------------------- figures

def rate(count: float, seconds: float) -> float:
    """Items per second (0 when no time passed)."""
    return count / seconds if seconds > 0 else 0.0


def ratio(value: float | None, baseline: float | None) -> float | None:
    """`value / baseline`, rounded; None when either is missing or the baseline is zero."""
    if value is None or not baseline:
        return None
    return round(value / baseline, 3)


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    return float(statistics.median(values))


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Count, median, p90, p99, min and max of durations given in seconds, in milliseconds."""
    ordered = sorted(seconds)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"n": len(ordered), "median_ms": round(median(ordered) * 1000, 3), "p90_ms": pct(0.90),
            "p99_ms": pct(0.99), "min_ms": round(ordered[0] * 1000, 3), "max_ms": round(ordered[-1] * 1000, 3)}


class PhaseClock:
    """Accumulates wall time per named phase (`with clock("send"): ...`)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] = self.totals.get(phase, 0.0) + time.perf_counter() - start

    def per(self, count: int) -> dict[str, float]:
        """Milliseconds per unit of each phase over `count` units."""
        return {k: round(v * 1000 / count, 3) for k, v in self.totals.items()} if count else {}


def interleaved_latency(channels: dict[str, Channel], *, samples: int, warmup: int, gap: float,
                        max_wait: float = 5.0) -> dict[str, list[float]]:
    """Send-to-receive latency of single messages, each channel with a receiver thread blocked waiting.

    Channels take turns (one message each per round, `gap` seconds apart, so every receiver is
    blocked again before its next message): drift in a noisy machine's load hits them alike.
    Returns each channel's latencies in seconds, warm-up excluded.
    """
    arrivals: dict[str, queue.Queue[tuple[int, float]]] = {name: queue.Queue() for name in channels}
    stop = threading.Event()

    def listen(name: str) -> None:
        receive_one = channels[name][0]
        while not stop.is_set():
            got = receive_one(max_wait)
            if got is not None:
                arrivals[name].put(got)

    threads = [threading.Thread(target=listen, args=(name,), daemon=True, name=f"latency-{name}") for name in channels]
    for thread in threads:
        thread.start()
    latencies: dict[str, list[float]] = {name: [] for name in channels}
    try:
        for i in range(warmup + samples):
            for name, (_, send_one) in channels.items():
                time.sleep(gap)
                start = time.perf_counter()
                send_one(i)
                tag, arrived = arrivals[name].get(timeout=60)
                if tag != i:
                    raise RuntimeError(f"{name}: expected message {i}, received {tag}")
                if i >= warmup:
                    latencies[name].append(arrived - start)
    finally:
        stop.set()
        for name, (_, send_one) in channels.items():
            send_one(-1)
        for thread in threads:
            thread.join(timeout=max_wait + 30)
    return latencies


def target(name: str, value: float | None, threshold: float, *, at_most: bool = False) -> dict[str, Any]:
    """A target from the issue: met when `value >= threshold` (or `<=` with `at_most`)."""
    met = None if value is None else (value <= threshold if at_most else value >= threshold)
    return {"name": name, "value": value, "threshold": threshold, "comparison": "<=" if at_most else ">=", "met": met}


def machine_info() -> dict[str, Any]:
    """Where and when the figures were taken."""
    return {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "platform": platform.platform(terse=True),
    }


# ---------------------------------------------------------------------- output

def format_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with a title line; numbers are right-aligned, text left-aligned."""
    cells = [[(_cell(v), isinstance(v, (int, float)) and not isinstance(v, bool)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i][0]) for r in cells]) for i, h in enumerate(headers)]
    out = [title, "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(text.rjust(w) if numeric else text.ljust(w)
                      for (text, numeric), w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def targets_table(targets: Sequence[dict[str, Any]], title: str = "Targets") -> str:
    """The targets of a document as a table."""
    return format_table(title, ["target", "value", "threshold", "met"],
                        [[t["name"], t["value"], f"{t['comparison']} {t['threshold']}", t["met"]] for t in targets])


def emit(document: dict[str, Any], table: str, json_path: str | None = None) -> None:
    """Print the JSON document on stdout (and write it to `json_path`, if given) and the table on stderr."""
    text = json.dumps(document, indent=2, default=str) + "\n"
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            out.write(text)
    sys.stderr.write(table + "\n")
    sys.stderr.flush()
    sys.stdout.write(text)
    sys.stdout.flush()


def run_and_emit(run: Callable[[C], dict[str, Any]], table: Callable[[dict[str, Any]], str], config: C,
                 json_path: str | None) -> int:
    """Run one benchmark on a Ray session of its own, print its document and table; the exit status."""
    with ray_session():
        doc = run(config)
    emit(doc, table(doc), json_path)
    return 0


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--body-size", type=int, default=1024, help="message body size in bytes (default 1024)")
    p.add_argument("--json", metavar="PATH", help="also write the JSON document to PATH")
    return p


def int_list(text: str) -> list[int]:
    """Parse "1,2,4" into [1, 2, 4]."""
    return [int(part) for part in text.split(",") if part.strip()]
