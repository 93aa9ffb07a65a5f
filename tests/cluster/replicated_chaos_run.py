"""The chaos run of `tests.chaos` on replicated partitions, with nodes lost instead of processes:
a 4-node `ray.cluster_utils.Cluster` (a head and three workers without store labels), a premium
namespace of 4 partitions with 3 replicas each, and the same senders, receivers, session
receivers, consumer crashes and ledger. Every `NODE_INTERVAL_S` a random worker is removed and,
`NODE_ABSENT_S` later, a new one added: the leaders that were on it fail over, its replicas are
made again on a node holding none of their partition, and they catch up. Run as its own process
(a test process is already attached to the shared Ray); prints one JSON line of what it observed.

    python -m tests.cluster.replicated_chaos_run WORKDIR [MESSAGES]
"""
from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from tests.chaos.ledger import Ledger
from tests.moved_in_doubt import MovedInDoubtLog
from tests.chaos.test_chaos import (
    LOCK_DURATION,
    MAX_DELIVERY_COUNT,
    NAMESPACE,
    QUEUE,
    SESSION_QUEUE,
    ChaosRun,
    Kill,
)
from tests.cluster.scenario import interruptible

CI_MESSAGES = 4_000
DEADLINE_S = 900.0
NODE_INTERVAL_S = 3.0
NODE_ABSENT_S = 1.5
WORKERS = 3
SEED = 20_261_125


class NodeChaosRun(ChaosRun):
    """`ChaosRun` whose killer removes and adds nodes."""

    def __init__(self, ns: rb.Namespace, total: int, ledger: Ledger, cluster: Cluster, workers: list[Any]) -> None:
        super().__init__(ns, total, ledger)
        self.cluster = cluster
        self.workers = workers
        self.rng = random.Random(SEED)
        self.removed: tuple[Any, float] | None = None
        """The worker removed last and when, until a new one is added."""
        self.next_loss = time.monotonic() + NODE_INTERVAL_S

    def kill_loop(self) -> None:
        """Nothing: nodes are added only on the main thread (Ray's node start needs it), so the
        chaos runs in `tick`."""

    def tick(self) -> None:
        """Remove a random worker every `NODE_INTERVAL_S`, and add a new one `NODE_ABSENT_S` later."""
        now = time.monotonic()
        if self.removed is not None and now - self.removed[1] >= NODE_ABSENT_S:
            victim, removed_at = self.removed
            self.workers.append(self.cluster.add_node(num_cpus=1))
            self.removed = None
            with self._lock:
                self.kills.append(Kill(f"node {victim.node_id[:8]}", 0, removed_at - self.started, now - removed_at))
        elif self.removed is None and now >= self.next_loss:
            victim = self.workers.pop(self.rng.randrange(len(self.workers)))
            self.cluster.remove_node(victim)
            self.removed = (victim, time.monotonic())
            self.next_loss = now + NODE_INTERVAL_S


def scenario(root: Path, total: int) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    workers = [cluster.add_node(num_cpus=1) for _ in range(WORKERS)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="ray_broker", logging_level="ERROR")
    try:
        ns = rb.start(NAMESPACE, sku="premium", partitions=4, replicas=3, data_dir=str(root / NAMESPACE))
        ns.create_queue(QUEUE, lock_duration=LOCK_DURATION, max_delivery_count=MAX_DELIVERY_COUNT)
        ns.create_queue(SESSION_QUEUE, requires_session=True, lock_duration=LOCK_DURATION,
                        max_delivery_count=MAX_DELIVERY_COUNT)
        ledger = Ledger()
        with MovedInDoubtLog() as doubts:
            outcome = NodeChaosRun(ns, total, ledger, cluster, workers).run(DEADLINE_S)
        ledger.record_moved_in_doubt(doubts.message_ids)
        return {"finished": outcome.finished, "duration_s": round(outcome.duration_s, 1),
                "node_losses": len(outcome.kills), "stats": ledger.stats(), "violations": ledger.violations(),
                "failures": outcome.failures, "hung_threads": outcome.hung_threads, "leftovers": outcome.leftovers,
                "errors": dict(outcome.errors), "error_samples": outcome.error_samples,
                "outstanding": ledger.outstanding_ids()}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    interruptible()
    try:
        result = scenario(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else CI_MESSAGES)
    except Exception as exc:  # noqa: BLE001 - reported to the test as JSON
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
