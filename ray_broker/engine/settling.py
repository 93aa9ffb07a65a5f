"""Settling on one partition: complete, abandon, defer, dead-letter, release and renew by lock token."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import InvalidOperationError, MessageLockLostError, ServiceBusError, SessionLockLostError
from ..protocol import ACTIVE, MAIN, SETTLE_ACTIONS
from ..wire import SessionRef, Settlement
from . import messages
from .queries import LockState
from .state import Fragment, PartitionState


def settle(state: PartitionState, entity: str, subq: int, ops: Sequence[Settlement],
           session: SessionRef | None = None) -> list[Any]:
    """Apply settlements (under the held session lock `session`, for a session's messages).

    Returns one result per op: None on success, the new lock expiry for `renew`, or the
    `ServiceBusError` that op met (the others still apply).
    """
    frag = state.fragment(entity)
    now = state.clock.now()
    with state.store.transaction():
        if session is not None:
            try:
                state.held_session(frag, session.session_id, session.lock_token, now)
            except SessionLockLostError as exc:
                return [exc] * len(ops)
        seqs = [int(op.sequence_number) for op in ops]
        locks, whole = _rows_to_settle(state, frag, subq, ops, seqs, now, session)
        completed: dict[int, LockState] = {}
        settled: list[tuple[bytes, str]] = []
        results: list[Any] = []
        for index, (op, seq) in enumerate(zip(ops, seqs)):
            action, token = op.action, op.lock_token
            run = whole.get(index)
            if run is not None:
                completed[run.id] = run
                results.append(None)
                settled.append((token, action))
                continue
            lock = locks.pop(seq, None)
            try:
                if lock is None or not _held(lock, 0, subq, token, now, session):
                    results.append(_without_lock(state, frag, action, seq, token, retry=lock is None))
                    continue
                if action == "complete":
                    completed[lock.id] = lock
                    results.append(None)
                else:
                    results.append(_apply(state, frag, op, lock, locks, now, session))
                if action != "renew":
                    settled.append((token, action))
            except ServiceBusError as exc:
                results.append(exc)
        rows = list(completed.values())
        state.remove(frag, [row.id for row in rows], [row.body for row in rows], sum(row.size for row in rows))
        state.settled.extend(settled)
    return results


def _rows_to_settle(state: PartitionState, frag: Fragment, subq: int, ops: Sequence[Settlement],
                    seqs: list[int], now: float,
                    session: SessionRef | None) -> tuple[dict[int, LockState], dict[int, LockState]]:
    """The rows the settlements act on: `(locks, whole)`.

    `locks` holds, by sequence number, the messages stored as rows of their own; `whole`, by the
    index of the op, the held completes of runs whose every message is completed here, which are
    deleted as they are. Any other run that a held lock settles something in is first cut so
    that each such message is a row of its own.
    """
    located = messages.locate(state.queries, frag.entity_id, [frag.row_id(seq) for seq in seqs], seqs)
    locks: dict[int, LockState] = {}
    runs: dict[int, LockState] = {}
    held: dict[int, dict[int, list[tuple[int, str]]]] = {}
    for index, (op, seq) in enumerate(zip(ops, seqs)):
        found = located.get(seq)
        if found is None:
            continue
        row, offset = found
        if row.span == 1:
            locks[seq] = row
        elif _held(row, offset, subq, op.lock_token, now, session):
            runs[row.id] = row
            held.setdefault(row.id, {}).setdefault(offset, []).append((index, op.action))
    whole: dict[int, LockState] = {}
    for run_id, by_offset in held.items():
        run = runs[run_id]
        if len(by_offset) == run.span and all(action == "complete" for ops_at in by_offset.values()
                                              for _, action in ops_at):
            whole.update((index, run) for ops_at in by_offset.values() for index, _ in ops_at)
            continue
        cuts = sorted({c for offset in by_offset for c in (offset, offset + 1) if 0 < c < run.span})
        for piece in messages.cut(state.queries, run, cuts):
            if piece.id - run.id in by_offset:
                locks[piece.seq] = piece
    return locks, whole


def _held(lock: LockState, offset: int, subq: int, token: bytes | None, now: float,
          session: SessionRef | None) -> bool:
    """Whether `token` holds the lock on the message at `offset` in a row of sub-queue `subq` (a
    session's lock covers its messages, so their own expiry does not count)."""
    return (token is not None and messages.message_token(lock, offset) == token and lock.subq == subq
            and (session is not None or (lock.locked_until or 0) > now))


def _without_lock(state: PartitionState, frag: Fragment, action: str, seq: int, token: bytes | None, *,
                  retry: bool) -> None:
    """A settlement whose lock is not held: when the message is gone (`retry`), a repeat of a
    settlement already applied succeeds (None); an unknown action or a lost lock raises."""
    if action not in SETTLE_ACTIONS:
        raise InvalidOperationError(f"unknown settlement {action!r}")
    if retry and token is not None and state.settled.action(token) == action:
        return None
    raise state.error(MessageLockLostError, f"the lock on message {seq} of {frag.name!r} was lost (it expired, "
                      "or the message was settled or received again); receive the message again", frag.name)


def _apply(state: PartitionState, frag: Fragment, op: Settlement, lock: LockState, locks: dict[int, LockState],
           now: float, session: SessionRef | None) -> float | None:
    """Apply a settlement other than complete to a held lock; the new expiry for a renew."""
    action, q = op.action, state.queries
    if action not in SETTLE_ACTIONS:
        locks[lock.seq] = lock
        raise InvalidOperationError(f"unknown settlement {action!r}")
    if action in ("abandon", "release"):
        count = max(0, lock.delivery_count - 1) if action == "release" else lock.delivery_count
        q.unlock(lock.id, count)
        if (action == "abandon" and lock.subq == MAIN and lock.state == ACTIVE
                and count >= frag.options["max_delivery_count"]):
            state.dead_letter(frag.key, lock.id, 1, "MaxDeliveryCountExceeded",
                              f"Message could not be consumed after {count} delivery attempts.")
    elif action == "defer":
        q.defer(lock.id)
    elif action == "dead_letter":
        if lock.subq != MAIN:
            locks[lock.seq] = lock
            raise state.error(InvalidOperationError, f"message {lock.seq} is already in a dead-letter queue of "
                              f"{frag.name!r}; complete it instead", frag.name)
        state.dead_letter(frag.key, lock.id, 1, op.reason, op.description)
    else:
        if session is not None:
            locks[lock.seq] = lock
            raise state.error(InvalidOperationError, "messages of a session are locked by the session lock; renew "
                              "it with receiver.session.renew_lock()", frag.name)
        until = now + frag.options["lock_duration"]
        q.extend_lock(lock.id, until)
        locks[lock.seq] = lock._replace(locked_until=until)
        return until
    return None
