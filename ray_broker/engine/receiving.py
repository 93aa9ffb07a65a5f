"""Receiving on one partition: locked or destructive receives, deferred messages, peek, availability."""
from __future__ import annotations

import os
from typing import Any, Iterable

from ..errors import MessageNotFoundError
from ..protocol import DEFERRED, PEEK_LOCK, RECEIVE_AND_DELETE
from .queries import MessageRow, lock_token
from .state import Fragment, PartitionState, message_record


def receive(state: PartitionState, entity: str, subq: int, max_count: int, mode: str = PEEK_LOCK,
            session: tuple[str, bytes] | None = None, session_seen: int | None = None) -> dict[str, Any]:
    """Take up to `max_count` available messages in sequence order.

    Returns `{"messages": [record, ...], "more": bool}`; `more` says whether further messages
    are available right now. In peek-lock mode each message is locked and its delivery count
    raised; in receive-and-delete mode it is removed.

    A session receiver passes `session_seen`, the highest sequence number it has received in
    the session: messages locked under its session lock above that number were lost on their
    way (a crash between lock and reply) and are handed out again first, keeping session order.
    """
    frag = state.fragment(entity)
    state.check_receivable(frag)
    with state.store.transaction():
        session_id, session_until = state.check_session(frag, subq, session)
        now = state.clock.now()
        state.activate_due(now, frag)
        taken, more = _take_available(state, frag, subq, max_count, now, session_id)
        if session_id is not None and session_seen is not None and mode == PEEK_LOCK:
            unseen = state.queries.locked_in_session(frag.entity_id, subq, session_id, now, int(session_seen),
                                                     max_count)
            if unseen:
                return _with_unseen(state, frag, subq, max_count, now, session_id, session_until, taken, unseen)
        if mode == RECEIVE_AND_DELETE:
            state.queries.delete_messages([r.id for r in taken])
            state.sizes.add(frag.key, -sum(r.size for r in taken))
            return {"messages": [message_record(r, r.delivery_count + 1) for r in taken], "more": more}
        until = session_until if session_id is not None else now + frag.options["lock_duration"]
        return {"messages": _lock(state, taken, until), "more": more}


def _take_available(state: PartitionState, frag: Fragment, subq: int, max_count: int, now: float,
                    session_id: str | None) -> tuple[list[MessageRow], bool]:
    """Up to `max_count` deliverable messages in order (screening out expired and over-delivered
    ones on the way), and whether more are available beyond them."""
    taken: list[MessageRow] = []
    after = 0
    while len(taken) < max_count:
        wanted = max_count - len(taken)
        rows = state.available_rows(frag, subq, now, wanted + 1, session_id, after)
        considered = rows[:wanted]
        taken += state.screen(frag, considered, now)
        if len(rows) <= wanted:
            return taken, False
        after = considered[-1].id
    return taken, max_count > 0 or state.exists_available(frag, subq, now, session_id)


def _lock(state: PartitionState, rows: list[MessageRow], until: float) -> list[dict[str, Any]]:
    """Lock messages until `until`, counting a delivery of each; their records."""
    prefix = os.urandom(8)
    state.queries.lock_messages([row.id for row in rows], prefix, until)
    return [message_record(row, row.delivery_count + 1, lock_token(prefix, row.id), until) for row in rows]


def _with_unseen(state: PartitionState, frag: Fragment, subq: int, max_count: int, now: float, session_id: str,
                 session_until: float, fresh: list[MessageRow], unseen: list[MessageRow]) -> dict[str, Any]:
    """A session receive that hands out again, in order, messages locked for the session earlier
    that its receiver never got (they keep their lock and delivery count)."""
    resent = {row.id for row in unseen}
    taken = sorted(unseen + fresh)[:max_count]
    records = {r["sequence_number"]: r for r in _lock(state, [r for r in taken if r.id not in resent], session_until)}
    messages = [records.get(row.seq) or message_record(row, row.delivery_count, row.lock_token, row.locked_until)
                for row in taken]
    more = len(taken) >= max_count and state.exists_available(frag, subq, now, session_id)
    return {"messages": messages, "more": more}


def receive_deferred(state: PartitionState, entity: str, subq: int, sequence_numbers: Iterable[int],
                     mode: str = PEEK_LOCK, session: tuple[str, bytes] | None = None) -> list[dict[str, Any]]:
    """Receive deferred messages by sequence number (locked, or removed in receive-and-delete)."""
    frag = state.fragment(entity)
    state.check_receivable(frag)
    q = state.queries
    records = []
    with state.store.transaction():
        session_id, session_until = state.check_session(frag, subq, session)
        now = state.clock.now()
        for seq in dict.fromkeys(int(s) for s in sequence_numbers):
            row = q.message(frag.row_id(seq), seq, subq)
            if (row is None or row.state != DEFERRED or (session_id is not None and row.session_id != session_id)
                    or (row.locked_until is not None and row.locked_until > now)):
                raise state.error(MessageNotFoundError,
                                  f"no deferred message with sequence number {seq} is available in {frag.name!r}"
                                  + (f" for session {session_id!r}" if session_id else ""), frag.name)
            if mode == RECEIVE_AND_DELETE:
                q.delete_messages([row.id])
                state.sizes.add(frag.key, -row.size)
                records.append(message_record(row, row.delivery_count + 1))
            else:
                until = session_until if session_id is not None else now + frag.options["lock_duration"]
                records += _lock(state, [row], until)
    return records


def peek(state: PartitionState, entity: str, subq: int, from_sequence: int, max_count: int,
         session_id: str | None = None) -> list[dict[str, Any]]:
    """Browse messages from `from_sequence` in sequence order without locking them."""
    frag = state.fragment(entity)
    with state.store.transaction():
        state.activate_due(state.clock.now(), frag)
        rows = state.queries.browse(frag.entity_id, subq, int(from_sequence), int(max_count), session_id)
    return [message_record(r, r.delivery_count) for r in rows]


def has_available(state: PartitionState, entity: str, subq: int, session_id: str | None = None,
                  free_session: bool = False) -> bool:
    """Whether a receive could get a message now (for a session, or any unlocked session)."""
    frag = state.fragment(entity)
    with state.store.transaction():
        now = state.clock.now()
        state.activate_due(now, frag)
        if free_session:
            return state.next_free_session(frag, now) is not None
        return state.exists_available(frag, subq, now, session_id)
