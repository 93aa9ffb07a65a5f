"""A replica's side of replication: applying a leader's changes, beginning epochs, divergence.

A partition's stores form a sequence of changes (see `changes`): position 1, 2, ... Each store
records where it stands (`Store.replication_position`: its epoch and the position of its last
change) durably with its data. An epoch is a term of one leader: a store that takes the lead
begins a new, higher epoch at its position + 1 (`begin_epoch`), every time it takes the lead (a
restarted leader too, since its last commits may not have survived), and its changes carry that
epoch. Each store keeps its epoch history: for each epoch it led or followed, the position of
the epoch's first change there (`Store.epoch_history`). Two stores hold the same change at a
position exactly when their histories give that position the same epoch, so comparing histories
says how far a follower's changes agree with its leader's (`divergence`), as Kafka's leader epochs
do.
"""
from __future__ import annotations

import sqlite3
from typing import Sequence

from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    OutOfOrderChangeError,
    ReplicationError,
    StaleEpochError,
)
from .changes import Change
from .queries import EpochStart, Queries
from .store import Store


def apply(store: Store, change: Change) -> bool:
    """Run one change of a leader's on a follower's store (see `apply_all`); True when applied,
    False for a change the store holds already."""
    return apply_all(store, [change]) == 1


def apply_all(store: Store, changes: Sequence[Change]) -> int:
    """Run a leader's consecutive changes on a follower's store, with their positions and epochs,
    in one transaction (one commit however many they are); how many were applied: changes the
    store holds already (repeats of positions it took in the same epoch) are skipped.

    Raises `StaleEpochError` for a change from an epoch older than the store's (or than the change
    before it), `OutOfOrderChangeError` for one that does not follow the store's last change (a
    gap, or a position the store holds from another epoch), and `ReplicationError` when a statement
    fails (the store's rows differ from the leader's: rebuild it with a full copy); nothing of the
    changes is applied then. Each error carries the store's epoch and position.
    """
    if store.in_transaction:
        raise InvalidOperationError("apply a change outside a unit of work: it is one of its own")
    epoch, position = store.replication_position
    fresh = _fresh(store, changes, epoch, position)
    if not fresh:
        return 0
    db = store.connection
    queries = Queries(db)
    with store.transaction():
        current = epoch
        for change in fresh:
            try:
                for sql, parameters, many in change.statements:
                    if many:
                        db.executemany(sql, parameters)
                    else:
                        db.execute(sql, parameters)
            except sqlite3.Error as exc:
                raise ReplicationError(f"change {change.position} of epoch {change.epoch} failed on this store "
                                       f"({exc}): its rows differ from the leader's; rebuild it from a full copy "
                                       "(Store.restore)", epoch=epoch, position=position) from exc
            if change.epoch > current:
                queries.add_epoch(change.epoch, change.position)
                current = change.epoch
        queries.set_position(current, fresh[-1].position)
    return len(fresh)


def _fresh(store: Store, changes: Sequence[Change], epoch: int, position: int) -> list[Change]:
    """The changes a store at (`epoch`, `position`) has yet to apply, checked to follow it in order
    (see `apply_all` for what is raised)."""
    fresh: list[Change] = []
    history = None
    for change in changes:
        last_epoch = fresh[-1].epoch if fresh else epoch
        if change.epoch < last_epoch:
            raise StaleEpochError(f"change {change.position} is of epoch {change.epoch}, older than this store's "
                                  f"epoch {last_epoch}: its sender no longer leads and must stop shipping changes",
                                  epoch=epoch, position=position)
        expected = (fresh[-1].position if fresh else position) + 1
        if change.position == expected:
            fresh.append(change)
            continue
        if not fresh and 0 < change.position <= position:
            history = store.epoch_history() if history is None else history
            if epoch_at(history, change.position) == change.epoch:
                continue
        raise OutOfOrderChangeError(f"change {change.position} of epoch {change.epoch} does not follow this store's "
                                    f"last change, {position} of epoch {epoch}: send the changes after {position}, "
                                    "or a full copy if the store's changes diverge from the leader's",
                                    epoch=epoch, position=position)
    return fresh


def begin_epoch(store: Store, epoch: int) -> None:
    """Take the lead of the store's partition in `epoch`, higher than any epoch the store knows:
    its next change is the epoch's first (recorded durably before any).

    Raises `StaleEpochError` for an epoch not above the store's.
    """
    if store.in_transaction:
        raise InvalidOperationError("begin an epoch outside a unit of work")
    current, position = store.replication_position
    if epoch <= current:
        raise StaleEpochError(f"epoch {epoch} is not above this store's epoch {current}: a new leader takes an epoch "
                              "higher than any before it", epoch=current, position=position)
    queries = Queries(store.connection)
    with store.transaction():
        queries.add_epoch(epoch, position + 1)
        queries.set_position(epoch, position)


def epoch_at(history: Sequence[tuple[int, int]], position: int) -> int:
    """The epoch of the change at `position` by an epoch history ((epoch, first position) pairs in
    epoch order): the highest epoch begun at or before it; 0 before any."""
    for epoch, first in reversed(history):
        if first <= position:
            return epoch
    return 0


def divergence(leader_history: Sequence[EpochStart], leader_position: int,
               follower_history: Sequence[EpochStart], follower_position: int) -> int | None:
    """The position up to which a follower's changes agree with its leader's, so that it takes
    the leader's changes after it: its own position when all its changes are the leader's; None
    when it holds changes the leader does not have (a dead leader's, beyond where that epoch ended
    for the new leader, or beyond the leader's last), and must be rebuilt from a full copy.

    Changes agree where both histories give their positions the same epoch; histories change only
    at the epochs' first positions, so those are the places to compare. The follower's whole
    history is needed, not its last epoch: a dead leader that began its epoch behind the new one
    wrote positions the new leader holds from an older epoch.

    Raises `StaleEpochError` when the follower knows a higher epoch than the leader (the leader
    was deposed).

    Example:
        >>> divergence([EpochStart(1, 1), EpochStart(3, 41)], 60, [EpochStart(1, 1), EpochStart(2, 41)], 45) is None
        True
        >>> divergence([EpochStart(1, 1), EpochStart(3, 41)], 60, [EpochStart(1, 1)], 40)
        40
    """
    if leader_position < 0 or follower_position < 0:
        raise InvalidArgumentError(f"positions are 0 or more, got {leader_position} and {follower_position}")
    leader_epoch, follower_epoch = _last_epoch(leader_history), _last_epoch(follower_history)
    if follower_epoch > leader_epoch:
        raise StaleEpochError(f"the follower follows epoch {follower_epoch}, newer than the leader's "
                              f"{leader_epoch}: the leader was deposed and must stop leading",
                              epoch=follower_epoch, position=follower_position)
    agreed = min(leader_position, follower_position)
    for first in sorted({first for _, first in (*leader_history, *follower_history)}):
        if first > agreed:
            break
        if epoch_at(leader_history, first) != epoch_at(follower_history, first):
            agreed = first - 1
            break
    return follower_position if agreed == follower_position else None


def _last_epoch(history: Sequence[EpochStart]) -> int:
    return history[-1].epoch if history else 0
