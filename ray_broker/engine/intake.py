"""A follower's intake: its leader's changes taken in order into memory, answered at once, and
written to the store in groups.

A follower that held each shipment in its store before answering would put its own apply and
commit on every acknowledgement's path. Instead it checks that a shipment follows what it holds
(in the store and in memory), keeps it in memory and answers with the position it now holds; its
applier writes everything taken so far in one transaction (`replication.apply_all`) soon after.
The promise this keeps: an acknowledged change is committed to the leader's store and held in
order by a majority of replicas, each on a node of its own (as `acks=all` promises in Kafka), so
that losing one node, with its disk, loses nothing acknowledged. Losing a follower's process
before its applier wrote what it held costs nothing either (the leader still has those changes and
ships them again, since the follower answers from its store after a restart); losing that process
and the leader's node at once can lose changes acknowledged in that moment.

Everything that reads where a follower stands (its state for an election, a digest, taking the
lead) first writes what it holds (`flush`), so that what it reports is in its store.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ReplicationError, StaleEpochError
from .changes import Change
from .queries import ReplicaPosition
from .replication import apply_all
from .store import Store

MAX_HELD = 2000
"""A follower holding this many changes in memory writes them before it takes more (a bound on
its memory and on what a restart would have to ship again)."""


class Intake:
    """The changes a follower took from its leader and has yet to write to `store`."""

    def __init__(self, store: Store, max_held: int = MAX_HELD) -> None:
        self.store = store
        self.max_held = max_held
        self._held: list[Change] = []
        self._failed: ReplicationError | None = None
        """A write of held changes that failed, told to the leader at its next shipment."""

    @property
    def held(self) -> int:
        """How many changes wait in memory."""
        return len(self._held)

    def position(self) -> ReplicaPosition:
        """Where the follower stands counting what it holds in memory."""
        if self._held:
            last = self._held[-1]
            return ReplicaPosition(last.epoch, last.position)
        return self.store.replication_position

    def take(self, changes: Sequence[Change]) -> ReplicaPosition:
        """Take a leader's changes in order; where the follower stands after them.

        Changes that continue what it holds are kept in memory (written first when `max_held`
        are waiting); anything else (a repeat of what it holds, a gap, another epoch's position)
        is judged against the store once what is held is written, as `replication.apply_all`
        judges it, and raises its errors (nothing of the shipment is taken then). After a write
        of held changes failed, the next shipment gets that `ReplicationError` (the leader then
        sends a whole copy)."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
        if not changes:
            return self.position()
        epoch, position = self.position()
        if self._continues(changes, epoch, position):
            self._held.extend(changes)
            if len(self._held) >= self.max_held:
                self.flush()
            return self.position()
        self.flush()
        apply_all(self.store, changes)
        return self.store.replication_position

    def flush(self) -> int:
        """Write what is held to the store in one transaction; how many changes that was. On an
        error (a statement that fails on this store) nothing held is kept and the error is raised:
        the leader finds the follower where its store stands at its next shipment."""
        held, self._held = self._held, []
        if held:
            try:
                apply_all(self.store, held)
            except ReplicationError as exc:
                self._failed = exc
                raise
        return len(held)

    def drop(self) -> None:
        """Forget what is held, and a failed write (the store is about to be replaced by a whole copy)."""
        self._held = []
        self._failed = None

    @staticmethod
    def _continues(changes: Sequence[Change], epoch: int, position: int) -> bool:
        """Whether `changes` follow (`epoch`, `position`) one by one, epochs never going back;
        raises `StaleEpochError` for one of an epoch older than those before it."""
        for change in changes:
            if change.epoch < epoch:
                raise StaleEpochError(f"change {change.position} is of epoch {change.epoch}, older than this "
                                      f"replica's epoch {epoch}: its sender no longer leads and must stop shipping "
                                      "changes", epoch=epoch, position=position)
            if change.position != position + 1:
                return False
            epoch, position = change.epoch, change.position
        return True

