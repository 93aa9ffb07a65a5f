"""P6: recovery: from SIGKILL of a partition holding a backlog to its first successful receive.

A non-partitioned queue of a standard namespace (durable store in a temporary data dir) lives
whole on one partition; it is filled with --messages messages of 1 KB. A receiver is open (one
peek has gone through the gateway and the partition); then the partition's process is killed with
SIGKILL and the receiver calls `receive_messages(1, max_wait_time=...)` until a message comes
back (it stays locked, so the active count must not drop: nothing lost). Target: under 3 s.
Same-run baseline: the same kill of a bare Ray actor with `max_restarts=-1`, timed to its first
answered call (Ray's own restart floor).

    python -m benchmarks.p6_recovery [--messages 100000] [--trials 3]
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass
from typing import Any

import ray

import ray_broker as rb

from .baselines import PayloadActor
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
)

QUEUE = "p6-recovery"
TARGET_S = 3.0


@dataclass
class P6Config:
    """What P6 runs."""

    messages: int = 100_000
    trials: int = 3
    batch_size: int = 200
    body_size: int = 1024
    durability: str = "normal"
    receive_wait: float = 1.0
    give_up: float = 120.0


def bare_actor_restart(trials: int, give_up: float) -> list[float]:
    """Seconds from SIGKILL of a bare restartable actor to its first answered call, per trial."""
    actor = PayloadActor.options(max_restarts=-1, max_task_retries=0).remote()
    times = []
    try:
        for _ in range(trials):
            pid = ray.get(actor.pid.remote(), timeout=120)
            start = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            while True:
                try:
                    if ray.get(actor.pid.remote(), timeout=5) != pid:
                        break
                except Exception:  # noqa: BLE001 - the actor is restarting
                    if time.perf_counter() - start > give_up:
                        raise RuntimeError(f"bare actor not back after {give_up} s") from None
                    time.sleep(0.01)
            times.append(time.perf_counter() - start)
    finally:
        ray.kill(actor)
    return times


def home_partition(ns: rb.Namespace, queue: str) -> int:
    """The partition that holds a non-partitioned queue's messages (from runtime properties)."""
    runtime = ns.get_queue_runtime_properties(queue)
    return next(p.index for p in runtime.partitions if p.active_message_count > 0)


def kill_to_first_receive(ns: rb.Namespace, receiver: rb.Receiver, partition: int,
                          config: P6Config) -> dict[str, Any]:
    """SIGKILL `partition`, then receive until a message comes back (left locked, so it still counts)."""
    pid = partition_pids(ns)[partition]
    errors: list[str] = []
    attempts = 0
    start = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    while True:
        attempts += 1
        try:
            got = receiver.receive_messages(1, max_wait_time=config.receive_wait)
        except rb.ServiceBusError as exc:
            errors.append(type(exc).__name__)
            got = []
        if got:
            seconds = time.perf_counter() - start
            break
        if time.perf_counter() - start > config.give_up:
            raise RuntimeError(f"no message received {config.give_up} s after killing partition {partition}")
    new_pid = partition_pids(ns)[partition]
    return {"seconds": round(seconds, 3), "receive_calls": attempts, "errors": errors, "restarted": new_pid != pid}


def run(config: P6Config) -> dict[str, Any]:
    """Run P6 (Ray must be up) and return its JSON document."""
    body = make_body(config.body_size)
    baseline = bare_actor_restart(config.trials, config.give_up)
    with broker_namespace("p6", durability=config.durability) as ns:
        ns.create_queue(QUEUE)
        start = time.perf_counter()
        with ns.get_queue_sender(QUEUE) as sender:
            for sent in range(0, config.messages, config.batch_size):
                sender.send_messages([rb.Message(body) for _ in range(min(config.batch_size, config.messages - sent))])
        fill_seconds = time.perf_counter() - start
        partition = home_partition(ns, QUEUE)
        trials = []
        with ns.get_queue_receiver(QUEUE) as receiver:
            for _ in range(config.trials):
                before = ns.get_queue_runtime_properties(QUEUE).active_message_count
                receiver.peek_messages(1)
                trial = kill_to_first_receive(ns, receiver, partition, config)
                trial["lost"] = before - ns.get_queue_runtime_properties(QUEUE).active_message_count
                trials.append(trial)
    seconds = median([t["seconds"] for t in trials])
    floor = median(baseline)
    return {
        "benchmark": "p6_recovery",
        "machine": machine_info(),
        "config": asdict(config),
        "fill": {"messages": config.messages, "seconds": round(fill_seconds, 1),
                 "msgs_per_s": round(rate(config.messages, fill_seconds), 1), "partition": partition},
        "baselines": {"bare_actor_restart_s": [round(t, 3) for t in baseline],
                      "bare_actor_restart_median_s": round(floor, 3)},
        "results": {"trials": trials, "median_s": seconds, "messages_lost": sum(t["lost"] for t in trials)},
        "ratios": {"recovery_vs_bare_actor_restart": ratio(seconds, floor)},
        "targets": [target(f"P6 SIGKILL to first receive, {config.messages:,} messages on the partition (s)",
                           seconds, TARGET_S, at_most=True)],
    }


def table(doc: dict[str, Any]) -> str:
    """P6 as text."""
    floor = doc["baselines"]["bare_actor_restart_s"]
    rows = [[i + 1, t["seconds"], floor[i] if i < len(floor) else None, t["receive_calls"],
             ",".join(t["errors"]) or "-", t["lost"]] for i, t in enumerate(doc["results"]["trials"])]
    title = (f"P6 recovery: SIGKILL of partition {doc['fill']['partition']} holding {doc['fill']['messages']:,} "
             f"x {doc['config']['body_size']} B messages, to the first successful receive")
    t = doc["targets"][0]
    verdict = (f"median {t['value']} s (target < {t['threshold']} s): {'met' if t['met'] else 'NOT met'}; "
               f"{doc['ratios']['recovery_vs_bare_actor_restart']}x a bare actor's restart")
    headers = ["trial", "seconds", "bare actor s", "receive calls", "errors seen", "lost"]
    return format_table(title, headers, rows) + "\n" + verdict


def main(argv: list[str] | None = None) -> int:
    """Run P6 from the command line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=P6Config.messages, help="messages on the killed partition")
    p.add_argument("--trials", type=int, default=P6Config.trials, help="kills (of the same partition)")
    p.add_argument("--durability", default=P6Config.durability, choices=("normal", "fsync"))
    args = p.parse_args(argv)
    config = P6Config(messages=args.messages, trials=args.trials, body_size=args.body_size,
                      durability=args.durability)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
