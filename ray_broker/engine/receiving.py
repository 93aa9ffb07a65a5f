"""Receiving on one partition: locked or destructive receives, deferred messages, peek, availability."""
from __future__ import annotations

import os
from typing import Any, Iterable

from ..errors import MessageNotFoundError
from ..protocol import DEFERRED, PEEK_LOCK, RECEIVE_AND_DELETE
from .queries import MessageRow
from .state import PartitionState, message_record


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
    session_id = state.check_session(frag, subq, session)
    now = state.clock.now()
    state.activate_due(now, frag.key)
    q = state.queries
    taken: list[MessageRow] = []
    with state.store.transaction():
        after = 0
        while len(taken) < max_count:
            rows = state.available_rows(frag.key, subq, now, max_count - len(taken), session_id, after)
            if not rows:
                break
            after = rows[-1].seq
            usable = state.screen(frag, rows, now)
            taken.extend(usable)
            if len(usable) == len(rows):
                break
        unseen = (q.locked_in_session(frag.key, subq, session_id, now, int(session_seen), max_count)
                  if session_id is not None and session_seen is not None and mode == PEEK_LOCK else [])
        resent = {r.seq for r in unseen}
        if unseen:
            taken = sorted(unseen + taken, key=lambda r: r.seq)[:max_count]
        if mode == RECEIVE_AND_DELETE:
            q.delete_messages(frag.key, [r.seq for r in taken])
            state.sizes.add(frag.key, -sum(r.size for r in taken))
            taken = [r._replace(delivery_count=r.delivery_count + 1, lock_token=None) for r in taken]
        else:
            until = state.session_until(frag.key, session_id) if session_id else now + frag.options["lock_duration"]
            taken = [r if r.seq in resent else
                     r._replace(lock_token=os.urandom(16), locked_until=until, delivery_count=r.delivery_count + 1)
                     for r in taken]
            q.lock_messages([(r.lock_token, r.locked_until, r.delivery_count, frag.key, r.seq)
                             for r in taken if r.seq not in resent])
    more = len(taken) >= max_count and state.exists_available(frag.key, subq, now, session_id)
    return {"messages": [message_record(r) for r in taken], "more": more}


def receive_deferred(state: PartitionState, entity: str, subq: int, sequence_numbers: Iterable[int],
                     mode: str = PEEK_LOCK, session: tuple[str, bytes] | None = None) -> list[dict[str, Any]]:
    """Receive deferred messages by sequence number (locked, or removed in receive-and-delete)."""
    frag = state.fragment(entity)
    state.check_receivable(frag)
    session_id = state.check_session(frag, subq, session)
    now = state.clock.now()
    q = state.queries
    records = []
    with state.store.transaction():
        for seq in dict.fromkeys(int(s) for s in sequence_numbers):
            row = q.message(frag.key, subq, seq)
            if (row is None or row.state != DEFERRED or (session_id is not None and row.session_id != session_id)
                    or (row.locked_until is not None and row.locked_until > now)):
                raise state.error(MessageNotFoundError,
                                  f"no deferred message with sequence number {seq} is available in {frag.name!r}"
                                  + (f" for session {session_id!r}" if session_id else ""), frag.name)
            if mode == RECEIVE_AND_DELETE:
                q.delete_messages(frag.key, [seq])
                state.sizes.add(frag.key, -row.size)
                row = row._replace(delivery_count=row.delivery_count + 1, lock_token=None)
            else:
                until = state.session_until(frag.key, session_id) if session_id else now + frag.options["lock_duration"]
                row = row._replace(lock_token=os.urandom(16), locked_until=until, delivery_count=row.delivery_count + 1)
                q.lock_messages([(row.lock_token, row.locked_until, row.delivery_count, frag.key, seq)])
            records.append(message_record(row))
    return records


def peek(state: PartitionState, entity: str, subq: int, from_sequence: int, max_count: int,
         session_id: str | None = None) -> list[dict[str, Any]]:
    """Browse messages from `from_sequence` in sequence order without locking them."""
    frag = state.fragment(entity)
    state.activate_due(state.clock.now(), frag.key)
    rows = state.queries.browse(frag.key, subq, int(from_sequence), int(max_count), session_id)
    return [message_record(r, with_lock=False) for r in rows]


def has_available(state: PartitionState, entity: str, subq: int, session_id: str | None = None,
                  free_session: bool = False) -> bool:
    """Whether a receive could get a message now (for a session, or any unlocked session)."""
    frag = state.fragment(entity)
    now = state.clock.now()
    state.activate_due(now, frag.key)
    if free_session:
        return state.next_free_session(frag.key, now) is not None
    return state.exists_available(frag.key, subq, now, session_id)
