"""A replicated partition's replica: following its leader, and leading when the control plane says.

Every replica of a partition is a partition actor with a store of its own (on a node of its own).
A follower applies the changes its leader ships (`engine.replication.apply`) and refuses any
from an epoch older than the one it was last fenced at. The gateway that decides leadership
(`actors.leadership`) fences the reachable replicas at a new epoch, picks the one holding the most
changes and tells it to lead: it begins the epoch in its store, finds where each follower's
changes agree with its own (`engine.replication.divergence`), and from then on ships every commit
(`ship`) before the callers whose work it holds are answered: a change counts once a majority of
the replicas hold it (`NamespaceConfig.required_copies`), or with an in-sync set (`engine.in_sync`)
once each member holds it; a member a change waits on for `IN_SYNC_LAG_S` is dropped from the set,
the deciding gateway recording it first (`_drop_lagging`), and one that caught up is added back. A leader that cannot reach enough
followers within `SHIP_TIMEOUT_S`, or that a follower tells of a newer epoch, acknowledges
nothing: its callers get `NotLeaderError` and find the leader anew.

Peek-lock across a failover: lock tokens, `locked_until` and delivery counts are rows like any
other, so a message locked on the old leader is locked on the new one with the same token, as
long as the change that locked it was acknowledged; one locked by an unacknowledged change is
unlocked there with its delivery count kept.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import ray

from ray_broker.codec import packb, unpackb
from ray_broker.config import RAY_NAMESPACE, NamespaceConfig
from ray_broker.engine.change_log import ChangeLog
from ray_broker.engine.changes import Change
from ray_broker.engine.in_sync import IN_SYNC_LAG_S, InSync
from ray_broker.engine.intake import Intake
from ray_broker.engine.pieces import split
from ray_broker.engine.replication import begin_epoch, divergence
from ray_broker.engine.shipping import HEARTBEAT_S, LAZY_S, Shipment, Shipping
from ray_broker.engine.store import Store
from ray_broker.errors import (
    NotLeaderError,
    OutOfOrderChangeError,
    ReplicationError,
    StaleEpochError,
    unwrap_remote_error,
)
from ray_broker.replies import ReplicaState

logger = logging.getLogger("ray_broker.replica")

SHIP_TIMEOUT_S = 5.0
"""How long a leader waits for enough followers to hold a commit before it answers its callers
with `NotLeaderError` (it may have lost its followers, or its own place)."""
PUMP_LOG_EVERY = 200
"""A replication pump failing pass after pass logs the first failure and then every this many."""
DROP_TIMEOUT_S = 2.0
"""How long a leader waits for the deciding gateway to record a follower dropped from its in-sync set."""
SHIPMENT_TIMEOUT_S = 10.0
"""How long a shipment may go unanswered before its follower counts as out of reach (a whole copy
of a large store takes seconds, so this is longer than `SHIP_TIMEOUT_S`)."""


@dataclass
class ReplicationTimes:
    """Where a replica's replication time went since it was last read. As leader: the rounds that
    waited for copies, the seconds they spent encoding and sending shipments, and the seconds from
    their start until the change was held. As follower: the shipments and changes taken, the
    seconds taking them took (on the leader's path), and the seconds writing them to the store
    took afterwards (off it; the store's own commits, `Store.commits`, are part of those)."""

    rounds: int = 0
    ship_s: float = 0.0
    held_s: float = 0.0
    shipments: int = 0
    changes: int = 0
    take_s: float = 0.0
    write_s: float = 0.0


@dataclass(frozen=True)
class Flight:
    """A shipment under way and when it was sent."""

    shipment: Shipment
    sent: float


def replica_state(store: Store, followed: int, leading: int | None, in_sync: InSync | None = None) -> ReplicaState:
    """What a replica tells the control plane and its leader: its store's epoch, position and
    epoch history, the epoch it follows (the highest it was fenced at), the epoch it leads (or
    None) and, leading, its in-sync set (if it keeps one)."""
    epoch, position = store.replication_position
    return ReplicaState(epoch, position, tuple(store.epoch_history()), followed, leading, in_sync=in_sync)


class Replica:
    """Replica `replica` of partition `index`: its replication state, as follower and as leader.

    The partition actor serializes the calls under its lock (`lock`): follower calls on its
    replication thread, leader shipping from the calls that commit; a leader waiting for copies
    lets the lock go and takes the answers itself as Ray hands them back; its pump thread (`pump`)
    takes the answers nobody waits on (lazy followers, retries).
    """

    def __init__(self, config: NamespaceConfig, index: int, replica: int, store: Store, lock: threading.RLock) -> None:
        self.config = config
        self.index = index
        self.replica = replica
        self.store = store
        self.followed = store.replication_position.epoch
        """The highest epoch this replica was fenced at: changes from older ones are refused."""
        self.leading: int | None = None
        """The epoch this replica leads, or None while it follows."""
        self._shipping: Shipping | None = None
        self._in_flight: dict[Any, Flight] = {}
        """Shipments under way, by their result's ref."""
        self._handles: dict[int, Any] = {}
        self.times = ReplicationTimes()
        self._lock = lock
        self._answers = threading.Condition(lock)
        """Notified when followers' answers were taken (and when this replica stops leading)."""
        self._shipped = threading.Event()
        """Set when shipping is left to the pump (after a commit no caller waits on, once the last
        waiting caller is done, when this replica takes the lead), to wake it."""
        self._waiters = 0
        """Calls waiting in `ship` for their changes to be held: while there are any, they take the
        followers' answers themselves and the pump keeps out of their way."""
        self.intake = Intake(store)
        """The leader's changes this replica holds in memory, answered, until `write_held`."""
        self._dropping = False
        """A drop from the in-sync set is being recorded: no member is added back meanwhile."""
        self._drop_tried_at = float("-inf")

    # ------------------------------------------------------------------ as a follower

    def state(self) -> ReplicaState:
        """See `replica_state` (what this replica holds in memory written first)."""
        self.write_held()
        return replica_state(self.store, self.followed, self.leading, self.in_sync)

    @property
    def in_sync(self) -> InSync | None:
        """Leading with an in-sync set: the set (changed by this leader, a drop once the gateway
        recorded it); else None."""
        return None if self._shipping is None or self.leading is None else self._shipping.in_sync

    def write_held(self) -> None:
        """Write the changes held in memory to the store (`Intake.flush`); one that fails there is
        logged, dropped and told to the leader at its next shipment."""
        began = time.perf_counter()
        try:
            written = self.intake.flush()
        except ReplicationError as exc:
            logger.warning("replica %d of partition %d: the changes it held failed on its store (%s); its leader "
                           "will send a whole copy", self.replica, self.index, exc)
            return
        if written:
            self.times.write_s += time.perf_counter() - began

    def fence(self, epoch: int) -> bool:
        """Refuse changes of epochs older than `epoch` from now on; True when this replica led an
        older epoch and so steps down (the actor then stops serving)."""
        self.followed = max(self.followed, epoch)
        if self.leading is not None and epoch > self.leading:
            logger.warning("replica %d of partition %d of namespace %r: epoch %d begins, so it no longer leads "
                           "(it led epoch %d)", self.replica, self.index, self.config.name, epoch, self.leading)
            self.leading = None
            self._shipping = None
            self._in_flight.clear()
            self._answers.notify_all()
            return True
        return False

    def apply_changes(self, epoch: int, changes: list[list[Any]]) -> int:
        """Take a leader's changes (encoded) in order (`Intake.take`: held in memory until
        `write_held`); the position of the last one held."""
        self._check_sender(epoch)
        began = time.perf_counter()
        position = self.intake.take([Change.decode(fields) for fields in changes]).position
        self.times.shipments += 1
        self.times.changes += len(changes)
        self.times.take_s += time.perf_counter() - began
        return position

    def take_shipment(self, epoch: int, pieces: tuple[bytes, ...]) -> int:
        """Take a leader's shipment, its encoded changes cut in pieces (`engine.pieces`): its
        changes (`apply_changes`); the position held after them."""
        return self.apply_changes(epoch, unpackb(b"".join(pieces)))

    def install_copy(self, epoch: int, data: bytes) -> int:
        """Replace the store with a leader's whole copy; the position it holds."""
        self._check_sender(epoch)
        self.intake.drop()
        self.store.restore(data)
        return self.store.replication_position.position

    def _check_sender(self, epoch: int) -> None:
        if epoch < self.followed or self.leading is not None:
            epoch_now, position = self.intake.position()
            raise StaleEpochError(f"replica {self.replica} of partition {self.index} follows epoch {self.followed}"
                                  f"{' and leads' if self.leading is not None else ''}; a sender of epoch {epoch} "
                                  "no longer leads", epoch=max(self.followed, epoch_now), position=position,
                                  partition=self.index)
        self.followed = epoch

    # ------------------------------------------------------------------ as the leader

    def lead(self, epoch: int, followers: list[int], states: dict[int, ReplicaState],
             in_sync: InSync | None = None) -> None:
        """Lead the partition in `epoch` (fenced at it already): begin the epoch in the store, and
        find where each follower's changes agree with this store's by the `states` the control
        plane read as it fenced them (those it could not reach, or that diverge, get a whole copy
        when they answer); with an in-sync set, beginning with `in_sync`."""
        self.write_held()
        begin_epoch(self.store, epoch)
        self.followed = epoch
        self.leading = epoch
        history = self.store.epoch_history()
        position = self.store.replication_position.position
        self._shipping = Shipping(followers, self.config.required_copies, ChangeLog(position), in_sync)
        self._in_flight.clear()
        for r in followers:
            state = states.get(r)
            if state is None:
                self._shipping.start(r, None)
                self._shipping.failed(r, time.monotonic())
                continue
            self._shipping.start(r, divergence(history, position, list(state.history), state.position))
        self._shipped.set()

    def ship(self, wait: bool = True, before_wait: Callable[[], None] = lambda: None) -> None:
        """Make this replica's committed changes held by enough replicas before anyone is answered:
        ship what is due now, then (with `wait`) wait for the followers' answers and take them
        (`_await_answers`), with the lock let go meanwhile, so that other calls run on the partition
        and ship their own changes as this round goes on (`before_wait` is called first, under
        the lock, when this call shipped changes of its own: it wakes receives waiting for
        messages). Every answer waits for the last change
        when it began, so nothing is answered on changes that are not held. Without `wait` (no
        caller waits on the changes: housekeeping) it ships what is due and returns.

        Raises `NotLeaderError` when it does not lead (any more), or (waiting) cannot get them held
        within `SHIP_TIMEOUT_S`. The caller holds the lock."""
        shipping = self._shipping
        if shipping is None or self.leading is None:
            self.store.take_changes()
            raise self.not_leader("it does not lead")
        changes = self.store.take_changes()
        for change in changes:
            shipping.log.append(change)
        position = shipping.log.last
        began = time.perf_counter()
        now = started = time.monotonic()
        self._give_up_on_silent(now)
        for shipment in shipping.due(position, now):
            self._send(shipment)
        sending_s = time.perf_counter() - began
        if not wait or shipping.held(position):
            self._leave_to_pump()
            return
        if changes:
            before_wait()
        deadline = started + SHIP_TIMEOUT_S
        self._waiters += 1
        try:
            while True:
                if self.leading is None or self._shipping is not shipping:
                    raise self.not_leader("a follower follows a newer epoch")
                if shipping.held(position):
                    self.times.rounds += 1
                    self.times.ship_s += sending_s
                    self.times.held_s += time.perf_counter() - began
                    return
                now = time.monotonic()
                if now >= deadline:
                    raise self.not_leader(f"only {shipping.copies(position)} of the {self.config.required_copies} "
                                          f"copies a change needs hold change {position} after {SHIP_TIMEOUT_S:g} s"
                                          + (f" (in-sync members {shipping.lagging(position)} do not)"
                                             if shipping.lagging(position) else ""))
                if now - started >= IN_SYNC_LAG_S and self._drop_lagging(shipping, position, now):
                    continue
                self._ship_due(shipping, now)
                self._await_answers(min(deadline - now, LAZY_S))
        finally:
            self._waiters -= 1
            self._leave_to_pump()

    def _drop_lagging(self, shipping: Shipping, position: int, now: float) -> bool:
        """Drop the in-sync members that do not hold the change at `position` from the set, once
        the deciding gateway has recorded it (with the lock let go meanwhile; one drop at a time,
        tried every `IN_SYNC_LAG_S / 2` at most): from then on a change no longer waits on them, and
        they may not lead. Whether a drop was tried. Raises `NotLeaderError` when the gateway
        refuses (this replica's epoch is over); a gateway out of reach leaves the set as it is, to
        be tried again. The caller holds the lock."""
        lagging = shipping.lagging(position)
        if not lagging or self._dropping or shipping.in_sync is None or now - self._drop_tried_at < IN_SYNC_LAG_S / 2:
            return False
        proposal = shipping.in_sync.without(lagging)
        if len(proposal.members) < self.config.required_copies:
            return False
        self._dropping, self._drop_tried_at = True, now
        held = self._lock._release_save()  # type: ignore[attr-defined]
        try:
            gateway = ray.get_actor(self.config.gateway_name(0), namespace=RAY_NAMESPACE)
            refusal = ray.get(gateway.call.remote("drop_from_in_sync", self.index, proposal.encode()),
                              timeout=DROP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the set stays as it is; tried again after a while
            logger.warning("replica %d of partition %d: the deciding gateway did not record followers %s out of "
                           "sync (%s)", self.replica, self.index, lagging, type(exc).__name__)
            return True
        finally:
            self._lock._acquire_restore(held)  # type: ignore[attr-defined]
            self._dropping = False
        if refusal is not None:
            raise self.not_leader(f"the deciding gateway refused to drop followers {lagging} from the in-sync set: "
                                  f"{refusal}")
        if self._shipping is shipping:
            logger.warning("replica %d of partition %d: followers %s are out of sync; changes are acknowledged "
                           "without them until they catch up", self.replica, self.index, lagging)
            shipping.drop(proposal)
        return True

    def _await_answers(self, timeout: float) -> None:
        """Wait up to `timeout` s for a shipment's answer with the lock let go, then take the
        answers that came, on this thread: a caller waiting for its change to be held is woken by
        Ray itself, not by the pump in turn (a thread hop, most of a millisecond on a busy
        machine), and what becomes due meanwhile is shipped by the pump once no caller waits, or
        by this caller if it must wait on. The caller holds the lock (perhaps more than once: it is
        let go wholly, as a `threading.Condition` does)."""
        refs = list(self._in_flight)
        if not refs:
            self._answers.wait(timeout=timeout)
            return
        held = self._lock._release_save()  # type: ignore[attr-defined]
        try:
            ready = ray.wait(refs, num_returns=1, timeout=timeout)[0]
        finally:
            self._lock._acquire_restore(held)  # type: ignore[attr-defined]
        self._take_ready(ready)

    def _leave_to_pump(self) -> None:
        """Wake the pump once no caller waits, to watch the shipments under way and time what is
        due next (the caller holds the lock)."""
        if not self._waiters:
            self._shipped.set()

    def pump(self) -> None:
        """Take the followers' answers nobody waits on as they come in, ship what is then due (a
        follower behind, one to retry, a heartbeat) and wake the calls waiting in `ship`; runs on a
        thread of its own for the replica's life, idle but for a look a second while it follows
        (an error in a pass is logged and the next pass goes on)."""
        failures = 0
        while True:
            try:
                self._pump_once()
                failures = 0
            except Exception:  # noqa: BLE001 - the pump must keep running, or every waiting call times out
                if failures % PUMP_LOG_EVERY == 0:
                    logger.exception("replica %d of partition %d: a pass of the replication pump failed (%d in a "
                                     "row)", self.replica, self.index, failures + 1)
                failures += 1
                time.sleep(LAZY_S)

    def _pump_once(self) -> None:
        """One pass of the pump: wait for an answer or until something is due (`Shipping.next_due`;
        while callers wait they take the answers themselves and the pump looks in every `LAZY_S`;
        a follower's looks in once a second, or when it takes the lead), take what came and ship
        what is due."""
        with self._lock:
            shipping = self._shipping
            refs = [] if self._waiters else list(self._in_flight)
            if shipping is None or self.leading is None:
                timeout = HEARTBEAT_S
            else:
                timeout = LAZY_S if self._waiters else shipping.next_due(time.monotonic())
        if refs:
            ray.wait(refs, num_returns=1, timeout=timeout)
        elif timeout > 0:
            self._shipped.wait(timeout)
            self._shipped.clear()
        with self._lock:
            shipping = self._shipping
            self._take_ready()
            if shipping is not None and self._shipping is shipping and self.leading is not None:
                self._ship_due(shipping, time.monotonic())

    def _take_ready(self, ready: list[Any] | None = None) -> None:
        """Take the followers' answers that came (those of `ready`, when given, as `ray.wait` just
        found them: another look costs a call into Ray) and wake the calls waiting in `ship` (the
        caller holds the lock)."""
        try:
            if self._shipping is None or self.leading is None:
                return
            for ref in self._ready() if ready is None else ready:
                flight = self._in_flight.pop(ref, None)
                if flight is not None:
                    self._answer(ref, flight)
        finally:
            self._answers.notify_all()

    def _ship_due(self, shipping: Shipping, now: float) -> None:
        """Ship what is due now to bring the followers to the last change (a follower behind, one
        to retry, one silent too long); the caller holds the lock."""
        self._give_up_on_silent(now)
        for shipment in shipping.due(shipping.log.last, now):
            self._send(shipment)

    def _ready(self) -> list[Any]:
        """The refs of the shipments under way that are done now."""
        refs = list(self._in_flight)
        return ray.wait(refs, num_returns=len(refs), timeout=0)[0] if refs else []

    def lag(self) -> dict[int, int | None]:
        """How many changes each follower is behind (None: waiting for a copy); empty unless leading."""
        if self._shipping is None:
            return {}
        return self._shipping.lag(self._shipping.log.last)

    def _send(self, shipment: Shipment) -> None:
        """Send a shipment: its changes in one call, as arguments small enough to travel inside it
        (`engine.pieces`), or a whole copy."""
        epoch = self.leading
        try:
            handle = self._handle(shipment.replica)
            if shipment.changes is None:
                ref = handle.install_copy.remote(epoch, self.store.snapshot())
            else:
                ref = handle.take_shipment.remote(epoch, *split(packb([c.encode() for c in shipment.changes])))
        except Exception as exc:  # noqa: BLE001 - a follower without an actor now is shipped to again later
            logger.info("replica %d of partition %d: follower %d not reached (%s)", self.replica, self.index,
                        shipment.replica, type(exc).__name__)
            self._handles.pop(shipment.replica, None)
            assert self._shipping is not None
            self._shipping.failed(shipment.replica, time.monotonic())
            return
        self._in_flight[ref] = Flight(shipment, time.monotonic())

    def _give_up_on_silent(self, now: float) -> None:
        """Count a shipment unanswered for `SHIPMENT_TIMEOUT_S` as failed (its follower's process
        may be gone with its node, or be restarting elsewhere): the follower is found by name and
        shipped to again after `RETRY_AFTER_S`, rather than waited on forever."""
        assert self._shipping is not None
        for ref, flight in list(self._in_flight.items()):
            if now - flight.sent >= SHIPMENT_TIMEOUT_S:
                del self._in_flight[ref]
                logger.info("replica %d of partition %d: follower %d did not answer a shipment in %g s",
                            self.replica, self.index, flight.shipment.replica, SHIPMENT_TIMEOUT_S)
                self._handles.pop(flight.shipment.replica, None)
                self._shipping.failed(flight.shipment.replica, now)

    def _answer(self, ref: Any, flight: Flight) -> None:
        shipping = self._shipping
        assert shipping is not None
        r = flight.shipment.replica
        try:
            shipping.answered(r, int(ray.get(ref)), time.monotonic())
        except Exception as exc:  # noqa: BLE001 - each kind of refusal says what the follower needs
            error = unwrap_remote_error(exc)
            if isinstance(error, StaleEpochError):
                logger.warning("replica %d of partition %d: follower %d follows a newer epoch; stepping down",
                               self.replica, self.index, r)
                self.fence(max(error.epoch, (self.leading or 0) + 1))
            elif isinstance(error, OutOfOrderChangeError):
                shipping.failed(r, time.monotonic(), error.position)
            elif isinstance(error, ReplicationError):
                shipping.failed(r, time.monotonic(), None)
            else:
                self._handles.pop(r, None)
                shipping.failed(r, time.monotonic())
            return
        if not self._dropping and shipping.caught_up(r):
            shipping.add_back(r)
            logger.info("replica %d of partition %d: follower %d caught up and is in sync again", self.replica,
                        self.index, r)

    def _handle(self, replica: int) -> Any:
        handle = self._handles.get(replica)
        if handle is None:
            handle = self._handles[replica] = ray.get_actor(self.config.replica_name(self.index, replica),
                                                            namespace=RAY_NAMESPACE)
        return handle

    def not_leader(self, why: str) -> NotLeaderError:
        """The error this replica's callers get when it cannot acknowledge their work, saying `why`."""
        return NotLeaderError(f"replica {self.replica} of partition {self.index} of namespace {self.config.name!r} "
                              f"cannot acknowledge: {why}; find the partition's leader in the routing table and "
                              "ask again", partition=self.index)
