"""Receiving on one partition: locked or destructive receives, deferred messages, peek, availability."""
from __future__ import annotations

import os
from typing import Any, Iterable

from ..errors import MessageNotFoundError
from ..protocol import DEFERRED, PEEK_LOCK, RECEIVE_AND_DELETE
from ..wire import SessionRef
from . import messages
from .queries import MessageRow, lock_token
from .state import Fragment, PartitionState

END_OF_SEQUENCES = (1 << 63) - 1
"""Above every sequence number a partition gives (the largest SQLite integer): a browse with no end."""
BACKLOG_ROWS_COUNTED = 256
"""A receive that leaves messages behind counts at most this many of the rows after what it took,
for its reply's `backlog` (a walk of an index, a few microseconds)."""


def receive(state: PartitionState, entity: str, subq: int, max_count: int, mode: str = PEEK_LOCK,
            session: SessionRef | None = None, session_seen: int | None = None) -> dict[str, Any]:
    """Take up to `max_count` available messages in sequence order.

    Returns `{"messages": [record, ...], "more": bool, "backlog": int}`; `more` says whether
    further messages are available right now, and `backlog` how many at least (a lower bound
    read on the way, for callers choosing where to receive next; 0 when `more` is false). In peek-lock mode each message is locked and its delivery count
    raised; in receive-and-delete mode it is removed.

    A session receiver passes `session_seen`, the highest sequence number it has received in
    the session: messages locked under its session lock above that number were lost on their
    way (a crash between lock and reply) and are handed out again first, keeping session order.
    """
    frag = state.fragment(entity)
    state.check_receivable(frag, subq)
    with state.store.transaction():
        session_id, session_until = state.check_session(frag, subq, session)
        now = state.clock.now()
        state.activate_due(now, frag)
        taken, backlog = _take_available(state, frag, subq, max_count, now, session_id)
        if session_id is not None and session_seen is not None and mode == PEEK_LOCK:
            unseen = state.queries.locked_in_session(frag.entity_id, subq, session_id, now, int(session_seen),
                                                     max_count)
            if unseen:
                return _with_unseen(state, frag, subq, max_count, now, session_id, session_until, taken, unseen)
        if mode == RECEIVE_AND_DELETE:
            found = messages.payloads(state.queries, taken)
            state.remove(frag, [row.id for row in taken], [row.body for row in taken], sum(row.size for row in taken))
            records = [r for row, p in zip(taken, found)
                       for r in messages.records(row, p, row.delivery_count + 1, locked=False)]
            return _reply(records, backlog)
        until = session_until if session_id is not None else now + frag.options["lock_duration"]
        return _reply(_lock(state, taken, until), backlog)


def _reply(records: list[dict[str, Any]], backlog: int) -> dict[str, Any]:
    return {"messages": records, "more": backlog > 0, "backlog": backlog}


def _take_available(state: PartitionState, frag: Fragment, subq: int, max_count: int, now: float,
                    session_id: str | None) -> tuple[list[MessageRow], int]:
    """Rows holding up to `max_count` deliverable messages in order (screening out expired and
    over-delivered ones on the way, cutting a run that holds more than are wanted), and how many
    more at least are available beyond them (`_backlog`; 0 when there are none)."""
    taken: list[MessageRow] = []
    count, after = 0, 0
    while True:
        wanted = max_count - count
        rows = state.available_rows(frag, subq, now, wanted + 1, session_id, after)
        for row in state.screen(frag, rows, now):
            if count >= max_count:
                return taken, _backlog(state, frag, subq, session_id, taken, row.span)
            if row.span > max_count - count:
                taken.append(messages.cut(state.queries, row, [max_count - count])[0])
                return taken, _backlog(state, frag, subq, session_id, taken, row.span - (max_count - count))
            taken.append(row)
            count += row.span
        if len(rows) <= wanted:
            return taken, 0
        after = rows[-1].id


def _backlog(state: PartitionState, frag: Fragment, subq: int, session_id: str | None, taken: list[MessageRow],
             next_row: int) -> int:
    """How many messages at least are left after `taken`: those of the next row (`next_row`, a
    run's count), or the never-locked rows after it, counted up to `BACKLOG_ROWS_COUNTED`,
    whichever is more."""
    after = taken[-1].id if taken else 0
    return max(next_row, state.queries.count_free(frag.entity_id, subq, after, session_id, BACKLOG_ROWS_COUNTED))


def _lock(state: PartitionState, rows: list[MessageRow], until: float) -> list[dict[str, Any]]:
    """Lock the messages of some rows until `until`, counting a delivery of each; their records."""
    prefix = os.urandom(8)
    state.queries.lock_messages([row.id for row in rows], prefix, until)
    found = messages.payloads(state.queries, rows)
    return [record for row, p in zip(rows, found)
            for record in messages.records(row._replace(lock_token=lock_token(prefix, row.id),
                                                        locked_until=until),
                                           p, row.delivery_count + 1, locked=True)]


def _with_unseen(state: PartitionState, frag: Fragment, subq: int, max_count: int, now: float, session_id: str,
                 session_until: float, fresh: list[MessageRow], unseen: list[MessageRow]) -> dict[str, Any]:
    """A session receive that hands out again, in order, messages locked for the session earlier
    that its receiver never got (they keep their lock and delivery count). Session messages are
    never runs."""
    resent = {row.id for row in unseen}
    taken = sorted(unseen + fresh)[:max_count]
    locked = {r["sequence_number"]: r for r in _lock(state, [r for r in taken if r.id not in resent], session_until)}
    again = [row for row in taken if row.id in resent]
    kept = {r["sequence_number"]: r for row, p in zip(again, messages.payloads(state.queries, again))
            for r in messages.records(row, p, row.delivery_count, locked=True)}
    more = len(taken) >= max_count and state.exists_available(frag, subq, now, session_id)
    return _reply([locked.get(row.seq) or kept[row.seq] for row in taken], int(more))


def receive_deferred(state: PartitionState, entity: str, subq: int, sequence_numbers: Iterable[int],
                     mode: str = PEEK_LOCK, session: SessionRef | None = None) -> list[dict[str, Any]]:
    """Receive deferred messages by sequence number (locked, or removed in receive-and-delete).
    A deferred message is never part of a run: deferring cuts it out."""
    frag = state.fragment(entity)
    state.check_receivable(frag, subq)
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
                (payload,) = messages.payloads(q, [row])
                state.remove(frag, [row.id], [row.body], row.size)
                records += messages.records(row, payload, row.delivery_count + 1, locked=False)
            else:
                until = session_until if session_id is not None else now + frag.options["lock_duration"]
                records += _lock(state, [row], until)
    return records


def peek(state: PartitionState, entity: str, subq: int, from_sequence: int, max_count: int,
         session_id: str | None = None, to_sequence: int | None = None) -> list[dict[str, Any]]:
    """Browse messages from `from_sequence` (up to `to_sequence`, exclusive, when given) in sequence
    order without locking them."""
    frag = state.fragment(entity)
    from_sequence, max_count = int(from_sequence), int(max_count)
    end = END_OF_SEQUENCES if to_sequence is None else int(to_sequence)
    with state.store.transaction():
        state.activate_due(state.clock.now(), frag)
        rows = state.queries.browse(frag.entity_id, subq, from_sequence, end, max_count, session_id)
        found = messages.payloads(state.queries, rows)
    records = []
    for row, row_payloads in zip(rows, found):
        first = max(0, from_sequence - row.seq)
        records += messages.records(row, row_payloads[first:end - row.seq],
                                    row.delivery_count, locked=False, first=first)
    return records[:max(0, max_count)]


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
