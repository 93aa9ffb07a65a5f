"""Engine alone: the send / receive (peek-lock) / complete cycle against plain sqlite3, with no Ray.

One cycle is one batch (100 messages of 1 KB) sent with `PartitionEngine.send`, taken back with
one `receive` in peek-lock mode, and completed with one `settle`. The floor is the same rows (the
same envelope payloads) inserted, selected and deleted with plain `sqlite3`, each step one
transaction, on a store with the same pragmas (durability "normal": WAL, synchronous=NORMAL, a
temporary directory on disk), in the same process. Rounds alternate the two so that load drift on
a shared machine hits both alike; figures are medians over rounds. Target: the engine's cycle
reaches 0.5x the floor's throughput (at most twice its time). CPU time per batch is reported too:
on a shared machine it varies less than wall time.

    python -m benchmarks.engine_cycle [--rounds 7] [--batches 50] [--batch-size 100] [--receive-size 0]
                                      [--body-size 1024] [--durability normal]
"""
from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ray_broker.clock import SystemClock
from ray_broker.engine.partition import MAIN, PEEK_LOCK, PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.entities import normalize_queue_options
from ray_broker.message import Message
from ray_broker.wire import Settlement

from .common import PhaseClock, emit, format_table, machine_info, make_body, median, parser, ratio, target, \
    targets_table

TARGET_RATIO = 0.5
QUEUE = "engine-cycle"


@dataclass
class EngineCycleConfig:
    """What the engine cycle runs."""

    rounds: int = 7
    batches: int = 50
    warmup: int = 5
    batch_size: int = 100
    receive_size: int = 0
    """Messages per receive (0: the whole batch in one receive)."""
    body_size: int = 1024
    durability: str = "normal"


class EngineSystem:
    """A `PartitionEngine` over a file store with one queue."""

    def __init__(self, directory: Path, durability: str, receive_size: int) -> None:
        self.engine = PartitionEngine(0, 1, Store(str(directory / "engine.db"), durability), SystemClock())
        self.engine.create_entity({"name": QUEUE, "kind": "queue", "options": normalize_queue_options({}),
                                   "incarnation": f"{QUEUE}-1", "created_at": 0.0, "updated_at": 0.0})
        self.receive_size = receive_size

    def cycle(self, envelopes: Sequence[dict[str, Any]], clock: PhaseClock) -> None:
        """Send the batch, receive it locked, complete it."""
        engine = self.engine
        with clock("send"):
            engine.send(QUEUE, envelopes)
        with clock("receive"):
            records: list[dict[str, Any]] = []
            for start in range(0, len(envelopes), self.receive_size or len(envelopes)):
                wanted = min(self.receive_size or len(envelopes), len(envelopes) - start)
                records += engine.receive(QUEUE, MAIN, wanted, PEEK_LOCK)["messages"]
        with clock("settle"):
            results = engine.settle(QUEUE, MAIN, [Settlement("complete", r["sequence_number"], r["lock_token"]) for r in records])
        if len(records) != len(envelopes) or any(r is not None for r in results):
            raise RuntimeError(f"engine cycle: received {len(records)} of {len(envelopes)}, results {results[:3]}")

    def close(self) -> None:
        """Close the store."""
        self.engine.store.close()


class RawSystem:
    """Plain sqlite3 with the engine's pragmas: a table of (sequence number, payload)."""

    def __init__(self, directory: Path, durability: str, receive_size: int) -> None:
        self.db = sqlite3.connect(str(directory / "raw.db"), isolation_level=None)
        self.receive_size = receive_size
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=" + ("FULL" if durability == "fsync" else "NORMAL"))
        self.db.execute("PRAGMA cache_size=-16000")
        self.db.execute("PRAGMA temp_store=MEMORY")
        self.db.execute("CREATE TABLE messages (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
        self.next_seq = 1

    def cycle(self, envelopes: Sequence[dict[str, Any]], clock: PhaseClock) -> None:
        """Insert the batch, select it, delete it: one transaction each."""
        db, first = self.db, self.next_seq
        self.next_seq += len(envelopes)
        with clock("send"):
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO messages (seq, payload) VALUES (?, ?)",
                           [(first + i, e["payload"]) for i, e in enumerate(envelopes)])
            db.execute("COMMIT")
        with clock("receive"):
            rows: list[tuple[int, bytes]] = []
            for start in range(0, len(envelopes), self.receive_size or len(envelopes)):
                wanted = min(self.receive_size or len(envelopes), len(envelopes) - start)
                db.execute("BEGIN")
                rows += db.execute("SELECT seq, payload FROM messages WHERE seq > ? ORDER BY seq LIMIT ?",
                                   (rows[-1][0] if rows else 0, wanted)).fetchall()
                db.execute("COMMIT")
        with clock("settle"):
            db.execute("BEGIN IMMEDIATE")
            db.executemany("DELETE FROM messages WHERE seq = ?", [(r[0],) for r in rows])
            db.execute("COMMIT")
        if len(rows) != len(envelopes):
            raise RuntimeError(f"raw cycle: selected {len(rows)} of {len(envelopes)}")

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def measure(cycle: Callable[[Sequence[dict[str, Any]], PhaseClock], None], envelopes: Sequence[dict[str, Any]],
            config: EngineCycleConfig) -> dict[str, Any]:
    """One round: warm-up cycles, then `batches` timed cycles."""
    for _ in range(config.warmup):
        cycle(envelopes, PhaseClock())
    clock = PhaseClock()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(config.batches):
        cycle(envelopes, clock)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"ms_per_batch": round(elapsed * 1000 / config.batches, 3),
            "msgs_per_s": round(config.batches * config.batch_size / elapsed, 1),
            "cpu_ms_per_batch": round(cpu * 1000 / config.batches, 3),
            "phases_ms_per_batch": clock.per(config.batches)}


def run(config: EngineCycleConfig) -> dict[str, Any]:
    """Run the engine and the floor in alternating rounds; the JSON document."""
    body = make_body(config.body_size)
    envelopes = [Message(body, message_id=f"m{i}").to_envelope() for i in range(config.batch_size)]
    directory = Path(tempfile.mkdtemp(prefix="rb-engine-cycle-"))
    systems = {"engine": EngineSystem(directory, config.durability, config.receive_size),
               "raw_sqlite": RawSystem(directory, config.durability, config.receive_size)}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    try:
        for _ in range(config.rounds):
            for name, system in systems.items():
                rounds[name].append(measure(system.cycle, envelopes, config))
    finally:
        for system in systems.values():
            system.close()
        shutil.rmtree(directory, ignore_errors=True)
    results = {name: _summary(runs) for name, runs in rounds.items()}
    engine_vs_raw = ratio(results["engine"]["msgs_per_s"], results["raw_sqlite"]["msgs_per_s"])
    cpu_vs_raw = ratio(results["raw_sqlite"]["cpu_ms_per_batch"], results["engine"]["cpu_ms_per_batch"])
    return {
        "benchmark": "engine_cycle",
        "machine": machine_info(),
        "config": asdict(config),
        "results": results,
        "ratios": {"engine_vs_raw_sqlite": engine_vs_raw, "engine_vs_raw_sqlite_cpu": cpu_vs_raw},
        "targets": [target("engine send/receive/complete vs raw sqlite3 insert/select/delete (x)",
                           engine_vs_raw, TARGET_RATIO)],
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds, with the phase breakdown of the median round."""
    middle = sorted(runs, key=lambda r: r["ms_per_batch"])[len(runs) // 2]
    return {"ms_per_batch": round(median([r["ms_per_batch"] for r in runs]), 3),
            "msgs_per_s": round(median([r["msgs_per_s"] for r in runs]), 1),
            "cpu_ms_per_batch": round(median([r["cpu_ms_per_batch"] for r in runs]), 3),
            "rounds_ms_per_batch": [r["ms_per_batch"] for r in runs],
            "phases_ms_per_batch": middle["phases_ms_per_batch"]}


def table(doc: dict[str, Any]) -> str:
    """The engine cycle as text."""
    phases = ["send", "receive", "settle"]
    rows = [[name, r["ms_per_batch"], r["msgs_per_s"], r["cpu_ms_per_batch"],
             *(r["phases_ms_per_batch"].get(p) for p in phases)] for name, r in doc["results"].items()]
    config = doc["config"]
    receives = f", {config['receive_size']} per receive" if config["receive_size"] else ""
    title = (f"Engine cycle: {config['batch_size']} x {config['body_size']} B per batch{receives}, durability "
             f"{config['durability']}, median of {config['rounds']} rounds of {config['batches']} batches")
    return (format_table(title, ["system", "ms/batch", "msgs/s", "cpu ms/batch", *(f"{p} ms" for p in phases)], rows)
            + "\n\n" + targets_table(doc["targets"]))


def main() -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    defaults = EngineCycleConfig()
    p.add_argument("--rounds", type=int, default=defaults.rounds, help=f"alternating rounds (default {defaults.rounds})")
    p.add_argument("--batches", type=int, default=defaults.batches,
                   help=f"timed cycles per round (default {defaults.batches})")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help=f"untimed cycles per round (default {defaults.warmup})")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size,
                   help=f"messages per cycle (default {defaults.batch_size})")
    p.add_argument("--receive-size", type=int, default=defaults.receive_size,
                   help="messages per receive, and per select of the floor (default: the whole batch)")
    p.add_argument("--durability", choices=("normal", "fsync"), default=defaults.durability,
                   help="store durability of both systems (default normal)")
    args = p.parse_args()
    config = EngineCycleConfig(rounds=args.rounds, batches=args.batches, warmup=args.warmup,
                               batch_size=args.batch_size, receive_size=args.receive_size, body_size=args.body_size,
                               durability=args.durability)
    doc = run(config)
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
