"""Sessions on one partition: accept (a named or the next free session), renew, release, state, list."""
from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidOperationError, SessionCannotBeLockedError
from .state import PartitionState


def accept_session(state: PartitionState, entity: str, session_id: str | None) -> dict[str, Any] | None:
    """Lock a session (a named one, or the next one with available messages and no holder).

    Returns `{"session_id", "lock_token", "locked_until"}`, or None when `session_id` is None
    and no session is free here.
    """
    frag = state.fragment(entity)
    if not frag.options["requires_session"]:
        raise state.error(InvalidOperationError, f"entity {frag.name!r} does not require sessions; open a receiver "
                          "without session_id", frag.name)
    state.check_receivable(frag)
    now = state.clock.now()
    with state.store.transaction():
        state.activate_due(now, frag)
        if session_id is None:
            session_id = state.next_free_session(frag, now)
            if session_id is None:
                return None
        held = state.queries.session_lock(frag.key, session_id)
        if held is not None and held.locked_until is not None and held.locked_until > now:
            raise state.error(SessionCannotBeLockedError, f"session {session_id!r} of {frag.name!r} is locked by "
                              "another receiver until it is closed or its lock expires; try again later or accept "
                              "another session", frag.name)
        token, until = os.urandom(16), now + frag.options["lock_duration"]
        state.queries.lock_session(frag.key, session_id, token, until)
        state.queries.set_session_message_locks(frag.entity_id, session_id, None)
    return {"session_id": session_id, "lock_token": token, "locked_until": until}


def renew_session(state: PartitionState, entity: str, session_id: str, token: bytes) -> float:
    """Extend a held session lock (and its messages' locks) by the entity's lock duration."""
    frag = state.fragment(entity)
    now = state.clock.now()
    until = now + frag.options["lock_duration"]
    with state.store.transaction():
        state.held_session(frag, session_id, token, now)
        state.queries.set_session_lock_expiry(frag.key, session_id, until)
        state.queries.set_session_message_locks(frag.entity_id, session_id, until)
    return until


def release_session(state: PartitionState, entity: str, session_id: str, token: bytes) -> None:
    """Give a session back; the messages it received but did not settle become available again.

    Their deliveries were counted when they were received, so the next delivery of each has a
    higher count (messages a gateway cached but never handed out are released one by one
    beforehand, without counting)."""
    frag = state.fragment(entity)
    with state.store.transaction():
        lock = state.queries.session_lock(frag.key, session_id)
        if lock is None or lock.lock_token != token:
            return
        state.queries.set_session_lock_expiry(frag.key, session_id, None)
        state.queries.set_session_message_locks(frag.entity_id, session_id, None)


def get_session_state(state: PartitionState, entity: str, session_id: str, token: bytes) -> bytes | None:
    """The session's state blob (None if never set)."""
    frag = state.fragment(entity)
    state.held_session(frag, session_id, token, state.clock.now())
    return state.queries.session_state(frag.key, session_id)


def set_session_state(state: PartitionState, entity: str, session_id: str, token: bytes,
                      session_state: bytes | None) -> None:
    """Replace the session's state blob (None clears it)."""
    frag = state.fragment(entity)
    with state.store.transaction():
        now = state.clock.now()
        state.held_session(frag, session_id, token, now)
        state.queries.set_session_state(frag.key, session_id, session_state, now)


def list_sessions(state: PartitionState, entity: str, updated_after: float | None = None) -> list[str]:
    """The sessions of a session-enabled entity here with active messages or a stored state, in id
    order; with `updated_after` (epoch seconds), those whose state was set after it instead."""
    frag = state.fragment(entity)
    if not frag.options["requires_session"]:
        raise state.error(InvalidOperationError, f"entity {frag.name!r} does not require sessions, so it has none "
                          "to list", frag.name)
    with state.store.transaction():
        state.activate_due(state.clock.now(), frag)
    return state.queries.listed_sessions(frag.entity_id, frag.key, updated_after)
