"""Group commit: what several clients on one partition gain when their calls share store commits.

4 async senders and 4 async receivers (each its own `ray_broker.aio.Namespace` handle, all on one
event loop of the driver) move messages through a 16-partition queue: the senders send small
batches, the receivers receive them and complete each batch in a call of its own (`flush`), and
the clock stops when the last completion is stored (receivers still waiting then are not timed). Two
layouts: "one_partition" (every message keyed alike, so all calls go to one partition) and
"spread" (unkeyed: batches round robin over the 16 partitions). Each runs against two namespaces
started side by side, identical but for how their partitions take calls:

- "group_commit": started with `RAY_BROKER_GROUP_COMMIT=on` in the driver; a partition runs up
  to `GROUP_COMMIT_THREADS` calls at once and calls that meet share one store commit.
- "one_at_a_time": the default; each partition has one call thread: every call commits alone
  (the same code, with groups of one).

For each durability ("normal": WAL, synchronous=NORMAL; "fsync": synchronous=FULL, the durable
"full" mode), rounds alternate the two namespaces so that load drift on a shared machine hits
them alike; figures are medians over rounds of messages per second (sent and completed), with the
CPU the 16 partition processes spent per message. Target: group commit >= 1.3x one at a time.

The same comparison is also made on the engine alone, in this process, to show what group commit
saves where the partition itself is the bottleneck: `ENGINE_THREADS` threads send batches to one
`PartitionEngine` over a file store through one `GroupCommitter`, either freely ("group_commit")
or one submission at a time behind a lock ("one_at_a_time": groups of one, a commit per call).

    python -m benchmarks.group_commit [--batches 100] [--batch-size 10] [--rounds 3] [--durability normal,fsync]
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import psutil

import ray_broker as rb
import ray_broker.aio as rba
from ray_broker.config import GROUP_COMMIT_ENV, NamespaceConfig
from ray_broker.engine.group_commit import GroupCommitter
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.entities import normalize_queue_options
from ray_broker.wire import Send

from .common import (
    broker_namespace,
    format_table,
    machine_info,
    make_body,
    median,
    parser,
    partition_pids,
    rate,
    ratio,
    run_and_emit,
    target,
    targets_table,
)

TARGET_RATIO = 1.3
MODES = ("group_commit", "one_at_a_time")
LAYOUTS = ("one_partition", "spread")
ENGINE_THREADS = 8


@dataclass
class GroupCommitConfig:
    """What the group commit benchmark runs."""

    senders: int = 4
    receivers: int = 4
    batches: int = 100
    """Batches each sender sends per run."""
    batch_size: int = 10
    body_size: int = 256
    rounds: int = 3
    durabilities: list[str] = field(default_factory=lambda: ["normal", "fsync"])
    receive_wait_s: float = 0.5
    engine_calls: int = 200
    """Send calls each engine thread makes per run."""


@contextlib.contextmanager
def namespace(mode: str, durability: str) -> Iterator[rb.Namespace]:
    """A fresh 16-partition namespace whose partitions take calls as `mode` says."""
    previous = os.environ.get(GROUP_COMMIT_ENV)
    with contextlib.ExitStack() as stack:
        try:
            os.environ[GROUP_COMMIT_ENV] = "on" if mode == "group_commit" else "off"
            ns = stack.enter_context(broker_namespace(f"group-{mode.replace('_', '-')}", partitions=16,
                                                      durability=durability))
        finally:
            if previous is None:
                os.environ.pop(GROUP_COMMIT_ENV, None)
            else:
                os.environ[GROUP_COMMIT_ENV] = previous
        yield ns


async def traffic(config_ns: NamespaceConfig, queue: str, layout: str, config: GroupCommitConfig, body: bytes) -> float:
    """Messages per second of the senders and receivers moving every message once through `queue`."""
    total = config.senders * config.batches * config.batch_size
    key = "one-key" if layout == "one_partition" else None
    completed = 0
    handles = [rba.Namespace(config_ns) for _ in range(config.senders + config.receivers)]

    async def send(handle: rba.Namespace) -> None:
        async with handle.get_queue_sender(queue) as sender:
            for _ in range(config.batches):
                await sender.send_messages([rb.Message(body, partition_key=key) for _ in range(config.batch_size)])

    async def receive(handle: rba.Namespace) -> None:
        nonlocal completed, end
        async with handle.get_queue_receiver(queue, max_wait_time=config.receive_wait_s) as receiver:
            while completed < total:
                messages = await receiver.receive_messages(max_message_count=config.batch_size,
                                                           max_wait_time=config.receive_wait_s)
                for message in messages:
                    await receiver.complete_message(message)
                await receiver.flush()
                completed += len(messages)
                if completed >= total and end is None:
                    end = time.perf_counter()

    end: float | None = None
    try:
        start = time.perf_counter()
        await asyncio.gather(*(send(h) for h in handles[:config.senders]),
                             *(receive(h) for h in handles[config.senders:]))
    finally:
        for handle in handles:
            await handle.close()
    if completed != total or end is None:
        raise RuntimeError(f"{completed} messages completed of {total} sent")
    return rate(total, end - start)


def partitions_cpu_s(processes: list[psutil.Process]) -> float:
    """CPU seconds (user and system) the partition processes have used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def measure(ns: rb.Namespace, queue: str, layout: str, config: GroupCommitConfig, body: bytes) -> tuple[float, float]:
    """One run on a fresh queue, checked empty after: messages per second, and the partitions'
    CPU milliseconds per message."""
    ns.create_queue(queue, enable_partitioning=True)
    processes = [psutil.Process(pid) for pid in partition_pids(ns).values()]
    try:
        cpu = partitions_cpu_s(processes)
        speed = asyncio.run(traffic(ns.config, queue, layout, config, body))
        cpu = partitions_cpu_s(processes) - cpu
        left = ns.get_queue_runtime_properties(queue).active_message_count
        if left:
            raise RuntimeError(f"{queue}: {left} messages left after every message was completed")
        return speed, 1000 * cpu / (config.senders * config.batches * config.batch_size)
    finally:
        ns.delete_queue(queue)


def engine_sending(mode: str, durability: str, config: GroupCommitConfig, body: bytes) -> float:
    """Send calls per second of `ENGINE_THREADS` threads on one engine over a fresh file store."""
    directory = tempfile.mkdtemp(prefix="rb-group-commit-")
    store = Store(os.path.join(directory, "partition.sqlite3"), durability)
    try:
        engine = PartitionEngine(0, 1, store)
        engine.create_entity({"name": "q", "kind": "queue", "options": normalize_queue_options({}),
                              "incarnation": "q-1", "created_at": time.time(), "updated_at": time.time()})
        committer = GroupCommitter(engine)
        one_at_a_time = threading.Lock() if mode == "one_at_a_time" else contextlib.nullcontext()
        envelopes = [rb.Message(body).to_envelope() for _ in range(config.batch_size)]

        def sender() -> None:
            for _ in range(config.engine_calls):
                with one_at_a_time:
                    committer.submit([Send("q", envelopes)])

        threads = [threading.Thread(target=sender) for _ in range(ENGINE_THREADS)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        stored = engine.runtime("q")["active"]
        if stored != ENGINE_THREADS * config.engine_calls * config.batch_size:
            raise RuntimeError(f"the engine holds {stored} messages, not all that were sent")
        return rate(ENGINE_THREADS * config.engine_calls, elapsed)
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def run(config: GroupCommitConfig) -> dict[str, Any]:
    """Run the benchmark (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    results: dict[str, Any] = {}
    ratios: dict[str, float | None] = {}
    targets = []
    for durability in config.durabilities:
        if durability != "memory":
            engine_rounds: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(config.rounds):
                for mode in MODES:
                    engine_rounds[mode].append(engine_sending(mode, durability, config, body))
            for mode, rates in engine_rounds.items():
                results[f"{durability}/engine/{mode}"] = {
                    "calls_per_s": round(median(rates), 1), "rounds_calls_per_s": [round(r, 1) for r in rates]}
            ratios[f"{durability}/engine/group_commit_vs_one_at_a_time"] = ratio(
                results[f"{durability}/engine/group_commit"]["calls_per_s"],
                results[f"{durability}/engine/one_at_a_time"]["calls_per_s"])
        rounds: dict[tuple[str, str], list[tuple[float, float]]] = {(m, lay): [] for m in MODES for lay in LAYOUTS}
        with namespace("group_commit", durability) as grouped, namespace("one_at_a_time", durability) as alone:
            namespaces = {"group_commit": grouped, "one_at_a_time": alone}
            for layout in LAYOUTS:
                for mode, ns in namespaces.items():
                    measure(ns, f"warmup-{layout}", layout, config, body)
                for i in range(config.rounds):
                    for mode, ns in namespaces.items():
                        rounds[(mode, layout)].append(measure(ns, f"{layout}-{i}", layout, config, body))
        for layout in LAYOUTS:
            for mode in MODES:
                rates = [speed for speed, _ in rounds[(mode, layout)]]
                cpu = [ms for _, ms in rounds[(mode, layout)]]
                results[f"{durability}/{layout}/{mode}"] = {
                    "msgs_per_s": round(median(rates), 1), "rounds_msgs_per_s": [round(r, 1) for r in rates],
                    "partition_cpu_ms_per_msg": round(median(cpu), 4)}
            speedup = ratio(results[f"{durability}/{layout}/group_commit"]["msgs_per_s"],
                            results[f"{durability}/{layout}/one_at_a_time"]["msgs_per_s"])
            ratios[f"{durability}/{layout}/group_commit_vs_one_at_a_time"] = speedup
            targets.append(target(f"group commit vs one call at a time, {layout}, durability={durability} (x)",
                                  speedup, TARGET_RATIO))
    return {
        "benchmark": "group_commit",
        "machine": machine_info(),
        "config": asdict(config),
        "results": results,
        "ratios": ratios,
        "targets": targets,
    }


def table(doc: dict[str, Any]) -> str:
    """The benchmark as text."""
    cfg = doc["config"]
    title = (f"Group commit: {cfg['senders']} senders + {cfg['receivers']} receivers, {cfg['batches']} batches of "
             f"{cfg['batch_size']} x {cfg['body_size']} B per sender, {cfg['rounds']} rounds, 16 partitions")
    rows, engine_rows = [], []
    for name, r in doc["results"].items():
        durability, layout, mode = name.split("/")
        unit = "calls_per_s" if layout == "engine" else "msgs_per_s"
        baseline = doc["results"][f"{durability}/{layout}/one_at_a_time"][unit]
        row = [durability, mode, r[unit], ratio(r[unit], baseline), " ".join(f"{v:,.0f}" for v in r[f"rounds_{unit}"])]
        if layout == "engine":
            engine_rows.append(row)
        else:
            rows.append([durability, layout, *row[1:], r["partition_cpu_ms_per_msg"]])
    engine_title = (f"The engine alone: {ENGINE_THREADS} threads x {cfg['engine_calls']} send calls of "
                    f"{cfg['batch_size']} x {cfg['body_size']} B, one file store")
    return "\n\n".join([format_table(title, ["durability", "layout", "partitions take", "msgs/s", "x alone",
                                             "rounds (msgs/s)", "partition CPU ms/msg"], rows),
                        format_table(engine_title, ["durability", "calls", "calls/s", "x alone", "rounds (calls/s)"],
                                     engine_rows),
                        targets_table(doc["targets"])])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line."""
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(body_size=GroupCommitConfig.body_size)
    p.add_argument("--senders", type=int, default=GroupCommitConfig.senders)
    p.add_argument("--receivers", type=int, default=GroupCommitConfig.receivers)
    p.add_argument("--batches", type=int, default=GroupCommitConfig.batches, help="batches per sender per run")
    p.add_argument("--batch-size", type=int, default=GroupCommitConfig.batch_size)
    p.add_argument("--rounds", type=int, default=GroupCommitConfig.rounds)
    p.add_argument("--durability", default="normal,fsync", help="comma-separated: normal, fsync, memory")
    args = p.parse_args(argv)
    config = GroupCommitConfig(senders=args.senders, receivers=args.receivers, batches=args.batches,
                               batch_size=args.batch_size, body_size=args.body_size, rounds=args.rounds,
                               durabilities=[d.strip() for d in args.durability.split(",") if d.strip()])
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
