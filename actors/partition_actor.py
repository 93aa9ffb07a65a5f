"""The partition actor: one `PartitionEngine` and its store, behind a threaded actor.

Thin by design: it runs partition requests (`ray_broker.wire`, encoded on the way in) on the
engine through the operation table (`engine.operations`), wakes waiting receivers when messages may
have become available (`waiting_receives`), runs housekeeping (scheduled messages, expiry) on a
thread of its own, and, once an entity here auto-forwards, a forwarder thread that sends the
outbox on through a router of its own (`forwarder_thread`); a replicated partition's leading and
following are `replica`'s.

Data operations run on Ray's default group, several threads wide (a call to a synchronous actor
method costs less than one to an asyncio method: no hand-off to the actor's event loop), through a
`GroupCommitter`: calls that meet share one store commit, and each is answered once that commit
is done. Waiting receives park in the `waits` concurrency group, one thread each, on a condition
that every group with an operation that may make messages available notifies. One lock
serializes every use of the engine.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

import ray

from actors.forwarder_thread import ForwardThread, LockedOutbox
from actors.metrics import PartitionMetrics
from actors.replica import Replica, ReplicationTimes
from actors.waiting_receives import WaitingReceives
from ray_broker.callers import Token
from ray_broker.clock import OffsetClock
from ray_broker.config import NODE_DATA_DIR_ENV, NamespaceConfig
from ray_broker.engine.group_commit import Group, GroupCommitter
from ray_broker.engine.in_sync import InSync
from ray_broker.engine.operations import operation
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import CommitTimes, Store
from ray_broker.errors import InvalidOperationError, NotLeaderError
from ray_broker.replies import ReplicaState
from ray_broker.wire import PartitionRequest, Receive, SessionRef, decode

logger = logging.getLogger("ray_broker.partition")

HOUSEKEEPING_INTERVAL_S = 0.25
HOUSEKEEPING_LOG_EVERY = 240
"""A housekeeping round that keeps failing is logged on its first failure and every this many after."""
WAIT_THREADS = 128
"""Waiting receives one partition serves at once (one thread each); more wait in Ray's queue
until one ends (at most `WATCH_TIMEOUT_S` later)."""
STORE_TAKEOVER_WAIT_S = 30.0
"""How long a restarted partition waits for its previous process to let go of the store's lock."""
@ray.remote(concurrency_groups={"waits": WAIT_THREADS, "replication": 1, "health": 1})
class PartitionActor:
    """Partition `index` of a namespace; its store is reopened whenever Ray restarts it.

    The store is opened under its exclusive lock, owned by this cluster's actor of this name: a
    restart takes the lock over from its dead predecessor, and any other process is refused with
    `StoreLockedError` (the actor then fails to start, touching nothing).

    With several replicas per partition (`NamespaceConfig.replicas`) this is replica `replica`: it
    follows (applying its leader's changes, refusing callers with `NotLeaderError`) until the
    control plane tells it to `lead` (see `actors.replica`).
    """

    def __init__(self, config: dict[str, Any], index: int, replica: int = 0) -> None:
        namespace = NamespaceConfig(**config)
        self.config = namespace
        self.index = index
        self.clock = OffsetClock()
        """The engine's clock: the wall clock, moved ahead only by `advance_clock` (tests)."""
        owner = f"Ray cluster {ray.get_runtime_context().gcs_address}, actor {namespace.replica_name(index, replica)}"
        path = namespace.store_path(index, os.environ.get(NODE_DATA_DIR_ENV), replica)
        self.store = Store(path, namespace.durability, owner=owner, takeover_wait_s=STORE_TAKEOVER_WAIT_S,
                           partition=index, replicated=namespace.replicated, node=self.node())
        self._lock = threading.RLock()
        self.replica = Replica(namespace, index, replica, self.store, self._lock) if namespace.replicated else None
        self.engine: PartitionEngine | None = None
        self.metrics: PartitionMetrics | None = None
        self._committer: GroupCommitter | None = None
        self._waits = WaitingReceives(self._lock, self._run,
                                      f"partition {index} of namespace {namespace.name!r}")
        self._forwarder: ForwardThread | None = None
        self._calls: Counter[str] = Counter()
        """Calls taken, by method (and by operation for `run`): see `call_counts`."""
        self._calls_lock = threading.Lock()
        self._held_waiting = threading.Event()
        """Set when this replica took changes that it holds in memory only (`Replica.intake`)."""
        if self.replica is None:
            self._serve()
        else:
            threading.Thread(target=self._write_held_loop, name="write-held", daemon=True).start()
            threading.Thread(target=self.replica.pump, name="replication-pump", daemon=True).start()
        threading.Thread(target=self._housekeeping_loop, name="housekeeping", daemon=True).start()

    def _serve(self) -> None:
        """Build the engine over the store (as it is now) and serve calls."""
        engine = PartitionEngine(self.index, self.config.partition_count, self.store, self.clock)
        self.metrics = PartitionMetrics(self.config.name, self.index, self.config.partition_count, engine)
        self._committer = GroupCommitter(engine, self._execute, lock=self._lock, durable=self._durable,
                                         committed=self._committed)
        self.engine = engine

    def _serving(self) -> tuple[PartitionEngine, PartitionMetrics, GroupCommitter]:
        """The engine, its metrics and committer; `NotLeaderError` on a replica that does not lead."""
        engine, metrics, committer = self.engine, self.metrics, self._committer
        if engine is None or metrics is None or committer is None:
            assert self.replica is not None, "a partition of one replica serves from its start"
            raise self.replica.not_leader("it does not lead")
        return engine, metrics, committer

    def _durable(self, wait: bool = True) -> None:
        """Make what was just committed durable beyond this store: on a replicated partition, held
        by enough replicas (`Replica.ship`, called under the lock, which it lets go while it waits,
        waking waiting receives first; without `wait`, only shipped); nothing to do with one
        replica. A replica that finds it no longer leads stops serving."""
        if self.replica is None:
            return
        try:
            self.replica.ship(wait, before_wait=self._notify)
        except NotLeaderError:
            if self.replica.leading is None:
                self._stop_serving()
            raise

    def _notify(self) -> None:
        """Wake waiting receives and the forwarder (the caller holds the lock)."""
        self._waits.changed.notify_all()
        if self._forwarder is not None:
            self._forwarder.wake()

    def _housekeeping_loop(self) -> None:
        failures = 0
        while True:
            time.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                self._housekeep()
                failures = 0
            except Exception:  # noqa: BLE001 - housekeeping must keep running; the next round retries
                if failures % HOUSEKEEPING_LOG_EVERY == 0:
                    logger.exception("housekeeping of partition %d of namespace %r failed (%d time(s) in a row); "
                                     "retried every %g s", self.index, self.config.name, failures + 1,
                                     HOUSEKEEPING_INTERVAL_S)
                failures += 1

    def _write_held_loop(self) -> None:
        """Write the changes a follower took to its store soon after it answered for them."""
        replica = self._replicated()
        while True:
            self._held_waiting.wait()
            self._held_waiting.clear()
            try:
                with self._lock:
                    replica.write_held()
            except Exception:  # noqa: BLE001 - the next shipment, or anything reading the state, writes again
                logger.exception("replica %d of partition %d of namespace %r: writing the changes it held failed; "
                                 "retried at the next shipment", replica.replica, self.index, self.config.name)

    def _execute(self, request: PartitionRequest) -> Any:
        """Run one request on the engine (in a group, under the lock), counted by the metrics."""
        engine, metrics, _ = self._serving()
        how = operation(request)
        return metrics.run(lambda: how.run(engine, request), request)

    def _committed(self, group: Group) -> None:
        """After a group's commit (under the lock): count it, and wake waiting receives and the
        forwarder if it may have made messages available."""
        self._serving()[1].group_committed(len(group))
        if any(operation(request).wakes for request in group.requests()):
            self._notify()

    def run(self, *fields: Any) -> Any:
        """Run one partition request, as `wire.encode` gave it (`InvalidOperationError` for an
        operation partitions do not run); answered once the commit that holds it is done."""
        request = decode(fields)
        self._count(request.OPERATION)
        return self._serving()[2].submit([request])[0]

    def run_batch(self, requests: list[list[Any]]) -> list[Any]:
        """Run several encoded partition requests in one call and one store commit, in order;
        results in the same order. A request that raises ends the batch: those before it stay
        applied."""
        batch = [decode(fields) for fields in requests]
        self._count("+".join(request.OPERATION for request in batch))
        return self._serving()[2].submit(batch)

    def _run(self, request: PartitionRequest) -> Any:
        """Run a request alone, outside the groups (a waiting receive's check already holds the
        lock, so it must not wait for a group), waking waiting receivers when it may have made
        messages available."""
        with self._lock:
            result = self._execute(request)
            self._durable()
            if operation(request).wakes:
                self._notify()
        return result

    @ray.method(concurrency_group="waits")
    def wait_available(self, entity: str, subq: int, session_id: str | None = None,
                       free_session: bool = False, timeout: float = 5.0) -> bool:
        """Return True as soon as a receive could get a message, or False after `timeout` seconds."""
        self._count("wait_available")
        engine = self._serving()[0]
        return self._waits.wait(lambda: engine.has_available(entity, subq, session_id, free_session) or None,
                                timeout) is not None

    @ray.method(concurrency_group="waits")
    def receive_waiting(self, receiver_id: str, entity: str, subq: int, max_count: int, mode: str,
                        session: list[Any] | None, seen: int | None, timeout: float,
                        caller: Token | None = None) -> dict[str, Any]:
        """A receive that waits: as soon as messages are available, lock up to `max_count` of them
        for the caller and return them (the wake-up carries the messages); an empty reply after
        `timeout`, or at once when `end_waits(receiver_id)` is called (`WaitingReceives.receive`)."""
        self._count("receive_waiting")
        self._serving()
        ref = None if session is None else SessionRef(session[0], session[1])
        return self._waits.receive(receiver_id, Receive(entity, subq, max_count, mode, ref, seen), timeout, caller)

    def _housekeep(self) -> None:
        """One round of housekeeping: due scheduled messages activated, expired ones and lapsed
        locks dealt with, the forwarder started when an entity forwards, metrics kept."""
        with self._lock:
            if self.engine is None or self.metrics is None:
                return
            engine, metrics = self.engine, self.metrics
            if self._forwarder is None and engine.forwards():
                self._forwarder = ForwardThread(self.config, self.index,
                                                LockedOutbox(lambda: self._serving()[0], self._lock, self._durable))
                self._forwarder.start()
            changed = metrics.run(engine.housekeeping)
            self._durable(wait=False)
            if self.replica is not None:
                metrics.replicas(self.replica.lag())
            if metrics.tick() or changed:
                self._notify()

    def advance_clock(self, seconds: float) -> float:
        """Move this partition's clock `seconds` ahead and do its housekeeping at once (tests:
        `ray_broker.testing.advance_clock`); the clock's offset from the wall clock now."""
        with self._lock:
            self.clock.advance(seconds)
        self._housekeep()
        with self._lock:
            self._notify()
        return self.clock.offset

    def end_waits(self, receiver_id: str) -> None:
        """End the `receive_waiting` of `receiver_id` now, if one is under way (its receiver is closing)."""
        self._waits.end(receiver_id)

    # ------------------------------------------------------------------ replicas (see actors.replica)

    def _replicated(self) -> Replica:
        if self.replica is None:
            raise InvalidOperationError(f"partition {self.index} of namespace {self.config.name!r} has one replica: "
                                        "there is nothing to replicate")
        return self.replica

    @ray.method(concurrency_group="replication")
    def replica_state(self) -> dict[str, Any]:
        """This replica's epoch, position, epoch history, followed and led epochs, (leading) its
        followers' lag, and its node: a `ReplicaState`, encoded."""
        replica = self._replicated()
        with self._lock:
            return replica.state()._replace(lag=replica.lag(), node=self.node()).encode()

    @ray.method(concurrency_group="health")
    def leads(self) -> int | None:
        """The epoch this replica leads, or None (the control plane's health check: answered on a
        thread of its own, without the lock, so that a long commit does not read as a failure)."""
        return self._replicated().leading

    @ray.method(concurrency_group="health")
    def in_sync_state(self) -> list[Any]:
        """The epoch this replica leads (or None) and, leading with an in-sync set, the set
        (`InSync`, encoded; else None): the control plane's health check with an in-sync set."""
        replica = self._replicated()
        leading, in_sync = replica.leading, replica.in_sync
        return [leading, None if leading is None or in_sync is None else in_sync.encode()]

    @ray.method(concurrency_group="replication")
    def fence(self, epoch: int) -> dict[str, Any]:
        """Refuse changes from epochs older than `epoch` (stepping down if this replica led an
        older one); this replica's state after it (a `ReplicaState`, encoded)."""
        replica = self._replicated()
        with self._lock:
            if replica.fence(epoch):
                self._stop_serving()
            return replica.state().encode()

    @ray.method(concurrency_group="replication")
    def lead(self, epoch: int, followers: list[int], states: dict[int, dict[str, Any]],
             in_sync: list[Any] | None = None) -> None:
        """Lead the partition in `epoch` with `followers` (the control plane fenced the replicas at
        it, read their `states`, encoded `ReplicaState`s, and chose this one), and with an in-sync
        set, `in_sync` (encoded): build the engine from the store and serve."""
        replica = self._replicated()
        with self._lock:
            replica.lead(epoch, followers, {r: ReplicaState.decode(s) for r, s in states.items()},
                         None if in_sync is None else InSync.decode(in_sync))
            self._serve()
            self._serving()[1].took_the_lead()
            self._notify()

    @ray.method(concurrency_group="health")
    def replication_times(self, reset: bool = False) -> dict[str, Any]:
        """Where this replica's replication time went (`ReplicationTimes`, with its store's commit
        count and seconds) since it was started or last reset; with `reset`, start counting anew."""
        replica = self._replicated()
        times = {**asdict(replica.times), "commits": self.store.commits.count,
                 "commit_s": self.store.commits.seconds}
        if reset:
            replica.times = ReplicationTimes()
            self.store.commits = CommitTimes()
        return times

    @ray.method(concurrency_group="replication")
    def store_digest(self) -> tuple[int, str]:
        """This replica's position and a digest of its whole store (`Store.digest`): replicas at the
        same position hold the same rows exactly when their digests are equal."""
        with self._lock:
            self._replicated().write_held()
            return self.store.replication_position.position, self.store.digest()

    @ray.method(concurrency_group="replication")
    def take_shipment(self, epoch: int, *pieces: bytes) -> int:
        """Take the leader's shipment, in pieces (see `Replica.take_shipment`); the position held
        after its changes (in memory, written to the store by the write-held thread right after)."""
        replica = self._replicated()
        with self._lock:
            position = replica.take_shipment(epoch, pieces)
        self._held_waiting.set()
        return position

    @ray.method(concurrency_group="replication")
    def install_copy(self, epoch: int, data: bytes) -> int:
        """Replace the store with the leader's whole copy; the position it holds."""
        replica = self._replicated()
        with self._lock:
            return replica.install_copy(epoch, data)

    def _stop_serving(self) -> None:
        """Stop serving (the lock held): callers are refused with `NotLeaderError` from now on and
        waiting receives end."""
        self.engine = None
        self.metrics = None
        self._committer = None
        self._notify()

    def _count(self, kind: str) -> None:
        with self._calls_lock:
            self._calls[kind] += 1

    def call_counts(self) -> dict[str, int]:
        """The calls this process has taken since it started, by kind: `run` by its operation
        (`send`, `receive`, `settle`, ...), `run_batch` by its operations joined with `+`
        (`settle+receive`), `receive_waiting` and `wait_available` (for benchmarks and operators:
        Ray calls per message moved)."""
        with self._calls_lock:
            return dict(self._calls)

    @ray.method(concurrency_group="health")
    def pid(self) -> int:
        """The process id (for operators and failure tests, and the probe of a partition that let
        a call time out: answered on a thread of its own, whatever the other calls wait on)."""
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node this partition runs on (for operators and failure tests)."""
        return str(ray.get_runtime_context().get_node_id())
