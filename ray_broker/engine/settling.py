"""Settling on one partition: complete, abandon, defer, dead-letter, release and renew by lock token."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import InvalidOperationError, MessageLockLostError, ServiceBusError, SessionLockLostError
from ..protocol import ACTIVE, MAIN, SETTLE_ACTIONS
from .queries import LockState
from .state import Fragment, PartitionState


@dataclass
class _SettleBatch:
    """Work gathered while applying a batch of settlements, written once at the end."""

    deletes: list[int] = field(default_factory=list)
    freed: int = 0


def settle(state: PartitionState, entity: str, subq: int, ops: Sequence[Sequence[Any]],
           session: tuple[str, bytes] | None = None) -> list[Any]:
    """Apply settlements `(action, sequence_number, lock_token[, reason, description])`.

    Returns one result per op: None on success, the new lock expiry for `renew`, or the
    `ServiceBusError` that op met (the others still apply).
    """
    frag = state.fragment(entity)
    now = state.clock.now()
    results: list[Any] = []
    session_error: ServiceBusError | None = None
    if session is not None:
        try:
            state.held_session(frag, session[0], session[1], now)
        except SessionLockLostError as exc:
            session_error = exc
    locks = state.queries.lock_states(frag.key, [int(op[1]) for op in ops])
    batch = _SettleBatch()
    with state.store.transaction():
        for op in ops:
            try:
                if session_error is not None:
                    raise session_error
                results.append(_settle_one(state, frag, subq, op, locks, now, session, batch))
                if op[0] != "renew":
                    state.settled.add(op[2], op[0])
            except ServiceBusError as exc:
                results.append(exc)
        state.queries.delete_messages(frag.key, batch.deletes)
        state.sizes.add(frag.key, -batch.freed)
    return results


def _settle_one(state: PartitionState, frag: Fragment, subq: int, op: Sequence[Any], locks: dict[int, LockState],
                now: float, session: tuple[str, bytes] | None, batch: _SettleBatch) -> Any:
    action, seq, token = op[0], int(op[1]), op[2]
    if action not in SETTLE_ACTIONS:
        raise InvalidOperationError(f"unknown settlement {action!r}")
    lock = locks.pop(seq, None)
    if lock is None and token is not None and state.settled.action(token) == action:
        return None
    if (lock is None or lock.subq != subq or lock.lock_token is None or lock.lock_token != token
            or (session is None and (lock.locked_until or 0) <= now)):
        raise state.error(MessageLockLostError, f"the lock on message {seq} of {frag.name!r} was lost (it expired, "
                          "or the message was settled or received again); receive the message again", frag.name)
    q = state.queries
    if action == "complete":
        batch.deletes.append(seq)
        batch.freed += lock.size
    elif action in ("abandon", "release"):
        count = max(0, lock.delivery_count - 1) if action == "release" else lock.delivery_count
        q.unlock(frag.key, seq, count)
        if (action == "abandon" and lock.subq == MAIN and lock.state == ACTIVE
                and count >= frag.options["max_delivery_count"]):
            state.dead_letter(frag.key, seq, "MaxDeliveryCountExceeded",
                              f"Message could not be consumed after {count} delivery attempts.")
    elif action == "defer":
        q.defer(frag.key, seq)
    elif action == "dead_letter":
        if lock.subq != MAIN:
            locks[seq] = lock
            raise state.error(InvalidOperationError, f"message {seq} is already in a dead-letter queue of "
                              f"{frag.name!r}; complete it instead", frag.name)
        state.dead_letter(frag.key, seq, op[3] if len(op) > 3 else None, op[4] if len(op) > 4 else None)
    else:
        if session is not None:
            locks[seq] = lock
            raise state.error(InvalidOperationError, "messages of a session are locked by the session lock; renew "
                              "it with receiver.session.renew_lock()", frag.name)
        until = now + frag.options["lock_duration"]
        q.extend_lock(frag.key, seq, until)
        locks[seq] = lock._replace(locked_until=until)
        return until
    return None
