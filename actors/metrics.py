"""A partition's metrics on Ray's Prometheus endpoint, through `ray.util.metrics`.

The partition actor runs its engine operations through `PartitionMetrics.run`, which gathers
counts in plain dicts (`ray_broker.observability.Meter`); `tick`, called from the housekeeping
loop, hands them to Ray every `EXPORT_INTERVAL_S` (one `inc` per counter and entity, one
`observe` per timed call) and refreshes the count gauges from the store every `GAUGE_INTERVAL_S`.

Ray prefixes every name with `ray_` and a counter's with `_total` too, so `broker_messages_sent`
is scraped as `ray_broker_messages_sent_total`. Every series carries the tags `namespace` and
`partition` (plus Ray's own, `WorkerId` among them: a restarted partition starts new series), and
all but the partition gauges `entity`.

Availability: `broker_partition_up` is 1 while the partition's housekeeping runs. Ray stops
exporting a gauge that is not set again within about 20 s, and drops a dead worker's series as
soon, so a partition that is down has no `up` series: dashboards compare the partitions up with
`broker_partitions` (the namespace's partition count, which every partition reports).
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from ray.util.metrics import Counter, Gauge, Histogram

from ray_broker.engine.partition import PartitionEngine
from ray_broker.observability import (
    COMPLETED,
    DEAD_LETTERED,
    EXPIRED,
    LOCK_LOST,
    RECEIVE,
    RECEIVED,
    SEND,
    SENT,
    Meter,
    runtime_counts,
    watch,
    with_vanished,
)
from ray_broker.wire import PartitionRequest

EXPORT_INTERVAL_S = 1.0
"""How often gathered counts and latencies are handed to Ray (which exports every few seconds)."""
GAUGE_INTERVAL_S = 5.0
"""How often the count gauges are read from the store and set again (well within Ray's ~20 s
staleness limit for gauges)."""
LATENCY_BOUNDARIES_S = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]
"""Histogram bucket bounds in seconds, for engine time per call (tens of microseconds to a second)."""

PARTITION_TAGS = ("namespace", "partition")
ENTITY_TAGS = (*PARTITION_TAGS, "entity")

COUNTER_METRICS: dict[str, tuple[str, str]] = {
    SENT: ("broker_messages_sent", "Messages stored by send calls (dropped duplicates excluded)."),
    RECEIVED: ("broker_messages_received", "Messages handed to receivers (locked or received and deleted)."),
    COMPLETED: ("broker_messages_completed", "Messages completed."),
    DEAD_LETTERED: ("broker_messages_dead_lettered",
                    "Messages moved to a dead-letter queue (by a receiver, past the maximum delivery count, "
                    "on expiry, on a filter error)."),
    EXPIRED: ("broker_messages_expired", "Messages whose time to live ran out (deleted or dead-lettered)."),
    LOCK_LOST: ("broker_lock_lost", "Settlements and session operations that found their lock lost."),
}
GAUGE_METRICS: dict[str, tuple[str, str]] = {
    "active": ("broker_active_messages", "Active messages held, by entity, on this partition."),
    "scheduled": ("broker_scheduled_messages", "Scheduled messages held, by entity, on this partition."),
    "dead_letter": ("broker_dead_letter_messages", "Messages in the dead-letter queue, by entity, on this partition."),
}
LATENCY_METRICS: dict[str, tuple[str, str]] = {
    SEND: ("broker_send_latency_seconds", "Time a partition spends storing one send call."),
    RECEIVE: ("broker_receive_latency_seconds", "Time a partition spends on one receive call (waiting excluded)."),
}
GROUP_METRIC = ("broker_commit_group_callers",
                "Calls whose work one store commit holds (group commit): its count is the commits, its sum the calls.")
GROUP_BOUNDARIES = [1, 2, 4, 8, 16, 32, 64]
"""Histogram bucket bounds for the calls in one commit group."""
REPLICA_LAG_METRIC = ("broker_replica_lag",
                      "Changes a follower is behind its leader, by replica (absent while it waits for a whole copy).")
IN_SYNC_METRIC = ("broker_replicas_in_sync", "Replicas of the partition that hold every change of its leader, "
                  "the leader included.")
LEADER_CHANGES_METRIC = ("broker_leader_changes", "Times a replica of the partition took the lead (a new epoch).")
UP_METRIC = ("broker_partition_up", "1 while the partition runs; absent while it is down.")
PARTITIONS_METRIC = ("broker_partitions", "The namespace's partition count.")

T = TypeVar("T")


class PartitionMetrics:
    """The metrics of partition `index` of namespace `namespace`, which has `partition_count`.

    Args:
        namespace: the namespace's name (the `namespace` tag).
        index: the partition's index (the `partition` tag).
        partition_count: the namespace's partition count (published as `broker_partitions`).
        engine: the partition's engine; its expiries and dead-letterings are watched from now on.
    """

    def __init__(self, namespace: str, index: int, partition_count: int, engine: PartitionEngine) -> None:
        tags = {"namespace": namespace, "partition": str(index)}
        self._engine = engine
        self._meter = Meter()
        watch(engine, self._meter)
        self._counters = {key: Counter(name, description, tag_keys=ENTITY_TAGS).set_default_tags(tags)
                          for key, (name, description) in COUNTER_METRICS.items()}
        self._gauges = {key: Gauge(name, description, tag_keys=ENTITY_TAGS).set_default_tags(tags)
                        for key, (name, description) in GAUGE_METRICS.items()}
        self._latencies = {key: Histogram(name, description, boundaries=LATENCY_BOUNDARIES_S,
                                          tag_keys=ENTITY_TAGS).set_default_tags(tags)
                           for key, (name, description) in LATENCY_METRICS.items()}
        self._groups = Histogram(*GROUP_METRIC, boundaries=GROUP_BOUNDARIES,
                                 tag_keys=PARTITION_TAGS).set_default_tags(tags)
        self._group_sizes: list[int] = []
        self._up = Gauge(*UP_METRIC, tag_keys=PARTITION_TAGS).set_default_tags(tags)
        self._partitions = Gauge(*PARTITIONS_METRIC, tag_keys=PARTITION_TAGS).set_default_tags(tags)
        self._partition_count = partition_count
        self._lag = Gauge(*REPLICA_LAG_METRIC, tag_keys=(*PARTITION_TAGS, "replica")).set_default_tags(tags)
        self._in_sync = Gauge(*IN_SYNC_METRIC, tag_keys=PARTITION_TAGS).set_default_tags(tags)
        self._leader_changes = Counter(*LEADER_CHANGES_METRIC, tag_keys=PARTITION_TAGS).set_default_tags(tags)
        self._entities: set[str] = set()
        self._exported_at = self._gauges_at = float("-inf")

    def run(self, function: Callable[[], T], request: PartitionRequest | None = None) -> T:
        """Call `function`, which runs the partition request `request` (or housekeeping, without
        one), and count what it did."""
        return self._meter.run(function, request)

    def group_committed(self, calls: int) -> None:
        """Count one store commit that held the work of `calls` calls."""
        self._group_sizes.append(calls)

    def took_the_lead(self) -> None:
        """Count a leader change: this replica leads from now on."""
        self._leader_changes.inc()

    def replicas(self, lag: dict[int, int | None]) -> None:
        """Set the followers' lag (as the leader sees it) and the count of replicas in sync."""
        for replica, behind in lag.items():
            if behind is not None:
                self._lag.set(behind, tags={"replica": str(replica)})
        self._in_sync.set(1 + sum(1 for behind in lag.values() if behind == 0))

    def tick(self) -> bool:
        """Export what was gathered, if `EXPORT_INTERVAL_S` has passed since the last export, and
        refresh the count gauges every `GAUGE_INTERVAL_S`. Called from the housekeeping loop.

        Returns True when it refreshed the gauges: reading an entity's counts enqueues its scheduled
        messages that came due, so waiting receivers should be woken.
        """
        now = time.monotonic()
        if now - self._exported_at < EXPORT_INTERVAL_S:
            return False
        self._exported_at = now
        tally = self._meter.take()
        for (counter, entity), n in tally.counts.items():
            self._counters[counter].inc(n, tags={"entity": entity})
        for (latency, entity), values in tally.latencies.items():
            histogram, tags = self._latencies[latency], {"entity": entity}
            for value in values:
                histogram.observe(value, tags=tags)
        sizes, self._group_sizes = self._group_sizes, []
        for size in sizes:
            self._groups.observe(size)
        self._up.set(1)
        self._partitions.set(self._partition_count)
        if now - self._gauges_at < GAUGE_INTERVAL_S:
            return False
        self._gauges_at = now
        self._refresh_gauges()
        return True

    def _refresh_gauges(self) -> None:
        counts = runtime_counts(self._engine)
        for entity, values in with_vanished(counts, self._entities).items():
            for key, value in values.items():
                self._gauges[key].set(value, tags={"entity": entity})
        self._entities = set(counts)
