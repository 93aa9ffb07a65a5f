"""Projection: throughput on 4, 16 and 64 cores from the CPU each kind of process spends per message.

For each partition count in --partitions (a premium namespace, one shared queue) and each client
count in --clients, that many client processes (Ray actors, as in `benchmarks.scale`) run P1's
cycle at once (send a batch, receive it, complete it); same-run baseline: the same clients doing
put/get batch cycles on one shared `ray.util.queue.Queue`. A warm-up pass runs first, outside the
window; the timed pass repeats until --min-window seconds have passed. Over the timed window
psutil reads the CPU seconds (user + system) of every process of the Ray instance this process
started, by kind: clients, partitions, gateway, queue_actor, raylet, gcs_server, driver (this
process) and other_ray (Ray's agents and monitors, idle workers). From CPU seconds per message `benchmarks.projection_model` projects throughput on more
cores (the model is stated there). Targets: 16 partitions on 16 cores >= 6x one partition and
>= 4x `ray.util.queue`, both projected from the run with the most clients.

    python -m benchmarks.projection [--partitions 1,4,16] [--clients 1,2,4] [--batches 20] [--min-window 3]
        [--cores 4,16,64]
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import psutil
import ray
from ray._private.state import actors as actor_table

from .baselines import RayQueueBaseline
from .common import (
    broker_namespace,
    format_table,
    gateway_pid,
    int_list,
    machine_info,
    parser,
    partition_handles,
    partition_pids,
    ratio,
    run_and_emit,
    target,
    targets_table,
)
from .projection_model import PARTITIONS, CpuProfile, projections
from .scale import CycleClient, ScaleConfig, aggregate

QUEUE = "projection"
TARGET_CORES = 16
TARGET_VS_ONE_PARTITION = 6.0
TARGET_VS_RAY_QUEUE = 4.0
SYSTEM_PROCESSES = ("raylet", "gcs_server")
"""Ray's own processes recognised by name in the process tree."""
CLIENT_SIDE = ("clients", "driver")
"""Kinds of process left out of the cores in the clients-elsewhere variant."""
VARIANTS = ("projected", "projected_clients_elsewhere")
"""The projections of each point: all processes on the cores, and the broker's alone."""


@dataclass
class ProjectionConfig:
    """What the projection benchmark measures and projects."""

    partitions: list[int] = field(default_factory=lambda: [1, 4, 16])
    clients: list[int] = field(default_factory=lambda: [1, 2, 4])
    cores: list[int] = field(default_factory=lambda: [4, 16, 64])
    batches: int = 20
    warmup: int = 3
    batch_size: int = 100
    body_size: int = 1024
    durability: str = "normal"
    max_wait: float = 30.0
    min_window: float = 3.0

    def cycles(self, *, warmup: bool) -> ScaleConfig:
        """What each client runs: the warm-up pass or the timed one (no warm-up inside it)."""
        return ScaleConfig(batches=self.warmup if warmup else self.batches, warmup=0, batch_size=self.batch_size,
                           body_size=self.body_size, durability=self.durability, max_wait=self.max_wait)


# ---------------------------------------------------------------------- processes and their CPU

def ray_processes() -> dict[int, str]:
    """Kind of every process of the Ray instance this process started, by process id: raylet and
    gcs_server by name, this process as the driver, the rest of its process tree as other_ray."""
    driver = psutil.Process()
    kinds = {driver.pid: "driver"}
    for proc in driver.children(recursive=True):
        try:
            name = proc.name()
        except psutil.Error:
            continue
        kinds[proc.pid] = name if name in SYSTEM_PROCESSES else "other_ray"
    missing = [name for name in SYSTEM_PROCESSES if name not in kinds.values()]
    if missing:
        raise RuntimeError(f"no {' or '.join(missing)} among this process's children: the projection measures a "
                           "local Ray that it starts itself; run it as a script, not attached to a running cluster")
    return kinds


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds so far of each live process among `pids`."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = times.user + times.system
    return out


def actor_pid(handle: Any) -> int:
    """Process id of an actor that cannot report its own, from the GCS actor table."""
    return int(actor_table(handle._actor_id.hex())["Pid"])


def call_counts(partitions: list[Any]) -> Counter[str]:
    """The calls the partitions have taken so far, by kind, summed over them."""
    total: Counter[str] = Counter()
    for counts in ray.get([p.call_counts.remote() for p in partitions], timeout=60):
        total.update(counts)
    return total


def measure(known: dict[int, str], calls: Callable[[ScaleConfig], list[Any]],
            config: ProjectionConfig, partitions: list[Any] | None = None) -> dict[str, Any]:
    """Run the clients' warm-up pass, then timed passes until `config.min_window` seconds have
    passed (CPU times come in clock ticks: a longer window reads them closer), with the CPU of
    every Ray process read before and after; the aggregate throughput and the CPU profile of the
    window. `known` names the kinds of processes the tree alone cannot tell (clients, partitions,
    gateway, queue actor). Processes that started or ended within the window are left out and
    counted. With `partitions` (their actors), the Ray calls they took in the window are counted
    too, by kind, per 100 messages moved."""
    if config.warmup:
        ray.get(calls(config.cycles(warmup=True)))
    kinds = {**ray_processes(), **known}
    calls_before = call_counts(partitions) if partitions else Counter()
    before = cpu_seconds(list(kinds))
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    while not results or time.perf_counter() - start < config.min_window:
        results += ray.get(calls(config.cycles(warmup=False)))
    seconds = time.perf_counter() - start
    after_kinds = {**ray_processes(), **known}
    after = cpu_seconds(list(after_kinds))
    calls_taken = call_counts(partitions) - calls_before if partitions else Counter()
    both = [pid for pid in before if pid in after]
    by_kind: dict[str, float] = {}
    for pid in both:
        by_kind[kinds[pid]] = by_kind.get(kinds[pid], 0.0) + after[pid] - before[pid]
    if sum(by_kind.values()) <= 0:
        raise RuntimeError(f"no CPU time was read over a {seconds:.3f} s window: raise --min-window")
    partitions = tuple(after[pid] - before[pid] for pid in both if kinds[pid] == PARTITIONS)
    profile = CpuProfile(sum(r["messages"] for r in results), by_kind, partitions)
    return {
        **aggregate(results),
        "messages": profile.messages,
        "window_s": round(seconds, 3),
        "cpu_cores_busy": round(sum(by_kind.values()) / seconds, 2),
        "processes_not_measured": len((set(before) | set(after)) - set(both)),
        "partition_calls_per_100_msgs": {kind: round(100 * n / profile.messages, 2)
                                         for kind, n in sorted(calls_taken.items())},
        "profile": profile,
    }


# ---------------------------------------------------------------------- the run

def run(config: ProjectionConfig) -> dict[str, Any]:
    """Measure every point and project it (Ray must be up, started by this process); the JSON document."""
    cores = sorted(set(config.cores) | {TARGET_CORES})
    clients = [CycleClient.remote() for _ in range(max(config.clients))]
    client_kinds = {pid: "clients" for pid in ray.get([c.pid.remote() for c in clients], timeout=300)}
    points: list[dict[str, Any]] = []
    try:
        for count in config.clients:
            shared = RayQueueBaseline()
            try:
                known = {**client_kinds, actor_pid(shared.queue.actor): "queue_actor"}
                point = measure(known, lambda cfg: [c.ray_queue.remote(shared.queue, cfg)
                                                    for c in clients[:count]], config)
            finally:
                shared.close()
            points.append({"system": "ray_queue", "partitions": None, "clients": count, **point})
        for partitions in config.partitions:
            with broker_namespace("projection", sku="premium", partitions=partitions,
                                  durability=config.durability) as ns:
                ns.create_queue(QUEUE)
                known = {**client_kinds, **{pid: PARTITIONS for pid in partition_pids(ns).values()},
                         gateway_pid(ns): "gateway"}
                handles = partition_handles(ns)
                for count in config.clients:
                    point = measure(known, lambda cfg: [c.broker.remote(ns, QUEUE, cfg)
                                                        for c in clients[:count]], config, handles)
                    points.append({"system": "broker", "partitions": partitions, "clients": count, **point})
    finally:
        for client in clients:
            ray.kill(client)
    results = [_described(point, cores) for point in points]
    headline = _headline(results, config)
    return {
        "benchmark": "projection",
        "machine": machine_info(),
        "config": asdict(config),
        "model": ("throughput(N) = min(N / total CPU s per msg, 1 / busiest partition's CPU s per msg, "
                  "1 / CPU s per msg of each single process: gateway, queue actor, raylet, GCS); "
                  "one node of N cores, clients scaling with the cores, one core per actor process; "
                  f"the clients-elsewhere variant leaves {', '.join(CLIENT_SIDE)} out of the total"),
        "results": results,
        "projection": headline,
        "targets": [
            target(f"projected {headline['partitions_high']} partitions vs {headline['partitions_low']} on "
                   f"{TARGET_CORES} cores (x)", headline["ratios"]["high_vs_low_partitions"],
                   TARGET_VS_ONE_PARTITION),
            target(f"projected {headline['partitions_high']} partitions vs ray.util.queue on {TARGET_CORES} "
                   "cores (x)", headline["ratios"]["high_partitions_vs_ray_queue"], TARGET_VS_RAY_QUEUE),
        ],
    }


def _described(point: dict[str, Any], cores: list[int]) -> dict[str, Any]:
    """A measured point as JSON: CPU microseconds per message by kind, serial parts, projections
    (all processes on the cores, and the broker's alone with its clients elsewhere)."""
    profile: CpuProfile = point.pop("profile")
    per = profile.per_message()
    return {
        **point,
        "cpu_us_per_msg": {kind: round(seconds * 1e6, 2) for kind, seconds in sorted(per.items())},
        "total_cpu_us_per_msg": round(profile.total_per_message() * 1e6, 2),
        "busiest_partition_cpu_us_per_msg": round(profile.busiest_partition_per_message() * 1e6, 2),
        "projected": projections(profile, cores),
        "projected_clients_elsewhere": projections(profile, cores, CLIENT_SIDE),
    }


def _headline(results: list[dict[str, Any]], config: ProjectionConfig) -> dict[str, Any]:
    """Projections of the fewest and most partitions and of the queue from the runs with the most
    clients, and the ratios on the target's core count for every client count and both variants."""
    low, high = min(config.partitions), max(config.partitions)
    names = {("ray_queue", None): "ray_queue", ("broker", low): f"broker_{low}_partitions",
             ("broker", high): f"broker_{high}_partitions"}

    def systems(clients: int, variant: str) -> dict[str, dict[str, Any]]:
        return {names[(r["system"], r["partitions"])]: r[variant] for r in results
                if r["clients"] == clients and (r["system"], r["partitions"]) in names}

    def ratios(clients: int, variant: str) -> dict[str, float | None]:
        at = {name: projected[str(TARGET_CORES)]["msgs_per_s"] for name, projected in systems(clients, variant).items()}
        hi = at[f"broker_{high}_partitions"]
        return {"high_vs_low_partitions": ratio(hi, at[f"broker_{low}_partitions"]),
                "high_partitions_vs_ray_queue": ratio(hi, at["ray_queue"])}

    most = max(config.clients)
    return {
        "clients": most,
        "partitions_low": low,
        "partitions_high": high,
        "cores": TARGET_CORES,
        "msgs_per_s_by_cores": {name: {n: p["msgs_per_s"] for n, p in projected.items()}
                                for name, projected in systems(most, "projected").items()},
        "ratios": ratios(most, "projected"),
        "ratios_by_clients": {str(c): {variant: ratios(c, variant) for variant in VARIANTS} for c in config.clients},
    }


def table(doc: dict[str, Any]) -> str:
    """CPU per message by kind and the projections, as text."""
    cfg = doc["config"]
    kinds = sorted({kind for r in doc["results"] for kind in r["cpu_us_per_msg"]})
    cores = sorted({int(n) for r in doc["results"] for n in r["projected"]})
    rows = [[r["system"] if r["partitions"] is None else f"{r['partitions']} partitions", r["clients"],
             r["msgs_per_s"], r["cpu_cores_busy"], r["total_cpu_us_per_msg"],
             *(r["cpu_us_per_msg"].get(k) for k in kinds), r["busiest_partition_cpu_us_per_msg"],
             *(f"{r['projected'][str(n)]['msgs_per_s']:,.0f} ({r['projected'][str(n)]['bound']})" for n in cores)]
            for r in doc["results"]]
    title = (f"Projection: CPU us per message by process kind, {cfg['batches']} batches of {cfg['batch_size']} x "
             f"{cfg['body_size']} B per client, premium sku, durability={cfg['durability']}; projected msgs/s (bound)")
    headers = ["system", "clients", "msgs/s here", "cores busy", "total", *kinds, "busiest part.",
               *(f"{n} cores" for n in cores)]
    brokers = [r for r in doc["results"] if r["system"] == "broker"]
    call_kinds = sorted({kind for r in brokers for kind in r["partition_calls_per_100_msgs"]})
    call_rows = [[f"{r['partitions']} partitions", r["clients"], sum(r["partition_calls_per_100_msgs"].values()),
                  *(r["partition_calls_per_100_msgs"].get(k) for k in call_kinds)] for r in brokers]
    head = doc["projection"]
    by_clients = head["ratios_by_clients"]
    ratio_rows = [[f"{head['partitions_high']} vs {head['partitions_low']} partitions",
                   *(by_clients[c][v]["high_vs_low_partitions"] for c in by_clients for v in VARIANTS)],
                  [f"{head['partitions_high']} partitions vs ray.util.queue",
                   *(by_clients[c][v]["high_partitions_vs_ray_queue"] for c in by_clients for v in VARIANTS)]]
    ratio_headers = ["projected ratio", *(f"{c} cl.{' (cl. elsewhere)' if v != VARIANTS[0] else ''}"
                                          for c in by_clients for v in VARIANTS)]
    return "\n\n".join([format_table(title, headers, rows),
                         format_table("Ray calls the partitions took per 100 messages, by kind",
                                      ["system", "clients", "all", *call_kinds], call_rows),
                         format_table(f"Projected ratios on {head['cores']} cores, by client count measured",
                                      ratio_headers, ratio_rows),
                         targets_table(doc["targets"])])


def main(argv: list[str] | None = None) -> int:
    """Run the projection benchmark from the command line."""
    p = parser(__doc__.splitlines()[0])
    defaults = ProjectionConfig()
    p.add_argument("--partitions", type=int_list, default=defaults.partitions, help="e.g. 1,4,16")
    p.add_argument("--clients", type=int_list, default=defaults.clients, help="e.g. 1,2,4")
    p.add_argument("--cores", type=int_list, default=defaults.cores, help="core counts to project to, e.g. 4,16,64")
    p.add_argument("--batches", type=int, default=defaults.batches, help="measured batches per client")
    p.add_argument("--warmup", type=int, default=defaults.warmup, help="unmeasured batches per client")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--min-window", type=float, default=defaults.min_window,
                   help="repeat the timed pass until this many seconds have passed (default 3)")
    p.add_argument("--durability", default=defaults.durability, choices=("normal", "fsync", "memory"))
    args = p.parse_args(argv)
    config = ProjectionConfig(partitions=args.partitions, clients=args.clients, cores=args.cores,
                              batches=args.batches, warmup=args.warmup, batch_size=args.batch_size,
                              body_size=args.body_size, durability=args.durability, min_window=args.min_window)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
