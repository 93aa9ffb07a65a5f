"""What `ray-broker status` reports about a namespace: each partition's node, process, health,
restarts and message counts, and each queue's and subscription's counts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..replies import ReplicaState

PING_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PartitionStatus:
    """One partition as the cluster and the partition itself report it."""

    index: int
    node: str | None
    """The node's IP and the first 8 characters of its id, or None when Ray places it nowhere."""
    pid: int | None
    health: str
    """up when it answered, else Ray's state of its actor (RESTARTING, DEAD, ...), or missing."""
    restarts: int | None
    """How many times Ray restarted the actor (a recreated partition counts from 0 again)."""

    def row(self, counts: tuple[int, int, int]) -> list[Any]:
        """The partition's row in the status table, with its (active, dead-letter, scheduled) counts."""
        return [self.index, self.node, self.pid, self.health, self.restarts, *counts]


PARTITION_HEADERS = ["partition", "node", "pid", "health", "restarts", "active", "dead-letter", "scheduled"]
STATUS_PARTITION_KEYS = ["index", "node", "pid", "health", "restarts", "active_message_count",
                         "dead_letter_message_count", "scheduled_message_count"]
"""The keys of a partition's row in `status --json` (the columns of `PARTITION_HEADERS`)."""


def partition_statuses(ns: Any, leaders: list[Any] | None = None,
                       timeout: float = PING_TIMEOUT_S) -> list[PartitionStatus]:
    """Every partition of `ns` (each replicated one by its `leaders`' entry): asks each for its
    process id (waiting up to `timeout` in all) and reads its node, state and restart count from
    Ray's actor table."""
    import ray

    from ..config import RAY_NAMESPACE, partition_actor_name

    handles: list[Any] = []
    for k in range(ns.partition_count):
        try:
            handles.append(leaders[k] if leaders is not None else
                           ray.get_actor(partition_actor_name(ns.name, k), namespace=RAY_NAMESPACE))
        except ValueError:
            handles.append(None)
    pids = _answers([None if h is None else h.pid.remote() for h in handles], timeout)
    return [_status(k, handle, pid) for k, (handle, pid) in enumerate(zip(handles, pids))]


REPLICA_HEADERS = ["partition", "replica", "node", "role", "epoch", "position", "behind", "in sync"]
STATUS_REPLICA_KEYS = ["partition", "replica", "node", "role", "epoch", "position", "behind", "in_sync"]
"""The keys of a replica's row in `status --json` (the columns of `REPLICA_HEADERS`)."""


@dataclass(frozen=True)
class ReplicaSurvey:
    """Every replica of a replicated namespace and what it answered (`replica_state`), asked once."""

    replicas: int
    handles: list[Any]
    """Replica r of partition k at `k * replicas + r`; None where no such actor exists."""
    states: list[ReplicaState | None]
    """Each replica's state, None where it did not answer."""

    def group(self, partition: int) -> list[ReplicaState | None]:
        """The states of `partition`'s replicas, by replica number."""
        return self.states[partition * self.replicas:(partition + 1) * self.replicas]

    def leaders(self) -> list[Any]:
        """Each partition's leader (the replica leading the newest epoch; None while it has none)."""
        out = []
        for k in range(len(self.states) // self.replicas):
            leading = [(s.leading, self.handles[k * self.replicas + r]) for r, s in enumerate(self.group(k))
                       if s is not None and s.leading is not None]
            out.append(max(leading, key=lambda pair: pair[0])[1] if leading else None)
        return out

    def rows(self) -> list[list[Any]]:
        """One row per replica (see `REPLICA_HEADERS`): its node, role (leader, follower, or down
        when it does not answer), epoch, position, how many changes it is behind its leader (None:
        waiting for a whole copy) and whether it is in sync."""
        rows = []
        for k in range(len(self.states) // self.replicas):
            group = self.group(k)
            lag = next((s.lag or {} for s in group if s is not None and s.leading is not None), {})
            for r, state in enumerate(group):
                if state is None:
                    rows.append([k, r, None, "down", None, None, None, False])
                    continue
                leads = state.leading is not None
                behind = 0 if leads else lag.get(r)
                rows.append([k, r, (state.node or "")[:8], "leader" if leads else "follower", state.epoch,
                             state.position, behind, behind == 0])
        return rows


def survey_replicas(ns: Any, timeout: float = PING_TIMEOUT_S) -> ReplicaSurvey:
    """Ask every replica of `ns` where it stands, all at once (waiting up to `timeout` in all)."""
    import ray

    from ..config import RAY_NAMESPACE

    config = ns.config
    handles: list[Any] = []
    for k in range(ns.partition_count):
        for r in range(config.replicas):
            try:
                handles.append(ray.get_actor(config.replica_name(k, r), namespace=RAY_NAMESPACE))
            except ValueError:
                handles.append(None)
    answers = _answers([None if h is None else h.replica_state.remote() for h in handles], timeout)
    return ReplicaSurvey(config.replicas, handles, [None if a is None else ReplicaState.decode(a) for a in answers])


def _answers(refs: list[Any], timeout: float) -> list[Any]:
    """Each ref's value, or None for one that failed or did not answer in `timeout`."""
    import ray

    pending = [r for r in refs if r is not None]
    done = set(ray.wait(pending, num_returns=len(pending), timeout=timeout)[0]) if pending else set()
    values: list[Any] = []
    for ref in refs:
        try:
            values.append(ray.get(ref) if ref is not None and ref in done else None)
        except ray.exceptions.RayError:
            values.append(None)
    return values


def _status(index: int, handle: Any, pid: int | None) -> PartitionStatus:
    if handle is None:
        return PartitionStatus(index, None, None, "missing", None)
    record = _actor_record(handle)
    address = record.get("Address") or {}
    node_id = str(address.get("NodeID") or "")
    node = f"{address.get('IPAddress')} ({node_id[:8]})" if node_id else None
    health = "up" if pid is not None else str(record.get("State") or "not answering")
    restarts = record.get("NumRestarts")
    return PartitionStatus(index, node, pid if pid is not None else record.get("Pid") or None, health,
                           None if restarts is None else int(restarts))


def _actor_record(handle: Any) -> dict[str, Any]:
    """The actor's entry in Ray's actor table (node, state, restarts), or {} where the table cannot
    be read (through Ray Client). Ray's public state API needs its dashboard, which a cluster may
    not run, so the table is read from the GCS directly."""
    from ray._private import state

    try:
        return dict(state.actors(actor_id=handle._actor_id.hex()) or {})
    except Exception:  # noqa: BLE001 - node and restarts then show as unknown; the rest of the row stands
        return {}


def partition_counts(runtimes: list[Any], partitions: int) -> list[tuple[int, int, int]]:
    """(active, dead-letter, scheduled) per partition, summed over the entities' runtime properties."""
    totals = [[0, 0, 0] for _ in range(partitions)]
    for runtime in runtimes:
        for p in runtime.partitions:
            total = totals[p.index]
            total[0] += p.active_message_count
            total[1] += p.dead_letter_message_count
            total[2] += p.scheduled_message_count
    return [(a, d, s) for a, d, s in totals]


def entity_runtimes(ns: Any) -> list[tuple[str, str, Any, Any]]:
    """(kind, path, properties, runtime properties) of every queue and every subscription."""
    from ..errors import InvalidOperationError

    entities: list[tuple[str, str, Any, Any]] = [
        ("queue", q.name, q, ns.get_queue_runtime_properties(q.name)) for q in ns.list_queues()]
    try:
        topics = ns.list_topics()
    except InvalidOperationError:
        topics = []
    for topic in topics:
        for sub in ns.list_subscriptions(topic.name):
            entities.append(("subscription", f"{topic.name}/subscriptions/{sub.name}", sub,
                             ns.get_subscription_runtime_properties(topic.name, sub.name)))
    return entities
