"""The chaos run of `tests.chaos` on replicated partitions, with nodes lost instead of processes:
a 4-node `ray.cluster_utils.Cluster` (a head and three workers without store labels), a premium
namespace of 4 partitions with 3 replicas each, and the same senders, receivers, session
receivers, consumer crashes and ledger. A random worker is removed and, `NODE_ABSENT_S` later, a
new one added: the leaders that were on it fail over, its replicas are made again on a node holding
none of their partition, and they catch up. The next worker goes `BETWEEN_LOSSES_S` after every
partition has a leader again and every replica answers with the changes shipped to it (what
`ray-broker status` shows), the first `FIRST_LOSS_S` into the run: one node lost at a time, which
is what replication promises to survive, however long the recovery takes on a loaded machine
(a second loss before it would leave a partition without a majority, waiting). The senders hold
the second and the last third of their messages back until the first and the second loss, so that
each loss meets messages on their way whatever the machine's speed. Run as its own process
(a test process is already attached to the shared Ray); prints one JSON line of what it observed.

    python -m tests.cluster.replicated_chaos_run WORKDIR [MESSAGES]
"""
from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from ray_broker.cli.status import STATUS_REPLICA_KEYS, survey_replicas
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
DEADLINE_S = 360.0
"""How long the CI run's chaos may last: its process has 600 s in all (`test_replicated_chaos`), of
which starting the cluster and the namespace takes up to three minutes on a loaded machine, so a run
that cannot finish reports what it left outstanding instead of being killed."""
LONG_DEADLINE_S = 3 * 3600.0
FIRST_LOSS_S = 3.0
BETWEEN_LOSSES_S = 1.0
LOSSES = 2
"""Node losses the senders wait for: the last part of their messages goes after the last of them."""
NODE_ABSENT_S = 1.5
WORKERS = 3
SEED = 20_261_125


class NodeChaosRun(ChaosRun):
    """`ChaosRun` whose killer removes and adds nodes, and whose senders send the k-th of
    `LOSSES + 1` parts of their messages once k nodes were lost: every loss happens with messages
    on their way, however long the recoveries before it took."""

    def __init__(self, ns: rb.Namespace, total: int, ledger: Ledger, cluster: Cluster, workers: list[Any]) -> None:
        super().__init__(ns, total, ledger)
        self.cluster = cluster
        self.workers = workers
        self.rng = random.Random(SEED)
        self.removed: Kill | None = None
        """The last loss, from the worker's removal until a new one is added."""
        self.recovering: Kill | None = None
        """The last loss, from the new worker's start until the namespace recovered."""
        self.next_loss = time.monotonic() + FIRST_LOSS_S
        self.losses = threading.Condition(self._lock)
        """Notified at each loss (`kills` grows)."""

    def plan(self, sender: int) -> Iterator[tuple[list[rb.Message], str | None]]:
        """`ChaosRun.plan`, the k-th of `LOSSES + 1` parts held back until k nodes were lost."""
        batches = list(super().plan(sender))
        for number, batch in enumerate(batches):
            part = number * (LOSSES + 1) // len(batches)
            with self.losses:
                while len(self.kills) < part and not self.stop.is_set():
                    self.losses.wait(1.0)
            yield batch

    def kill_loop(self) -> None:
        """Nothing: nodes are added only on the main thread (Ray's node start needs it), so the
        chaos runs in `tick`."""

    def tick(self) -> None:
        """Add a new worker `NODE_ABSENT_S` after one was removed; once the namespace recovered,
        note how long it took; remove a random worker `BETWEEN_LOSSES_S` after that."""
        now = time.monotonic()
        if self.removed is not None and now - self.started - self.removed.at_s >= NODE_ABSENT_S:
            self.workers.append(self.cluster.add_node(num_cpus=1))
            self.recovering, self.removed = self.removed, None
        elif self.recovering is not None and self._recovered():
            self.recovering.back_after_s = self.clock() - self.recovering.at_s
            self.recovering = None
            self.next_loss = time.monotonic() + BETWEEN_LOSSES_S
        elif self.removed is None and self.recovering is None and now >= self.next_loss:
            victim = self.workers.pop(self.rng.randrange(len(self.workers)))
            self.cluster.remove_node(victim)
            self.removed = Kill(f"node {victim.node_id[:8]}", 0, self.clock(), None)
            with self.losses:
                self.kills.append(self.removed)
                self.losses.notify_all()

    def _recovered(self) -> bool:
        """Whether every partition has a leader and every replica answers, none waiting for a whole copy."""
        rows = [dict(zip(STATUS_REPLICA_KEYS, row)) for row in survey_replicas(self.ns).rows()]
        led = {row["partition"] for row in rows if row["role"] == "leader"}
        return len(led) == self.ns.partition_count and all(row["behind"] is not None for row in rows)


def scenario(root: Path, total: int) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
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
            outcome = NodeChaosRun(ns, total, ledger, cluster, workers).run(
                DEADLINE_S if total <= CI_MESSAGES else LONG_DEADLINE_S)
        ledger.record_moved_in_doubt(doubts.message_ids)
        return {"finished": outcome.finished, "duration_s": round(outcome.duration_s, 1),
                "node_losses": len(outcome.kills),
                "recoveries_s": [None if k.back_after_s is None else round(k.back_after_s, 1) for k in outcome.kills],
                "stats": ledger.stats(), "violations": ledger.violations(),
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
