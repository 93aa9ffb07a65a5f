"""The partition's SQL: one documented method per storage verb, rows returned as typed tuples.

Statements use named parameters, except the few run with `executemany` over a whole batch, whose
parameters are positional tuples in the order their docstrings give. Sub-queue and state values
come from `SubQueueNumber` and `MessageState` and are written into the SQL text as literals, so
that the partial indexes that name them apply and each statement's text stays constant (sqlite3
caches prepared statements by their text).

Row types are `NamedTuple`s: immutable and typed like frozen dataclasses, and built by C code
(`_make`) at a tenth of a frozen dataclass's cost, which matters for a batch of messages. Every
query that returns rows goes through the one converter, `_rows`.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Iterable, NamedTuple, Sequence, TypeVar

from ..protocol import MessageState, SubQueueNumber

_ACTIVE, _SCHEDULED = int(MessageState.ACTIVE), int(MessageState.SCHEDULED)
_MAIN = int(SubQueueNumber.MAIN)


class MessageRow(NamedTuple):
    """A stored message: everything a receiver or a peek needs, and what screening reads."""

    seq: int
    subq: int
    """A `SubQueueNumber` value."""
    state: int
    """A `MessageState` value."""
    session_id: str | None
    enqueued_at: float
    expires_at: float | None
    lock_token: bytes | None
    locked_until: float | None
    delivery_count: int
    size: int
    dl_reason: str | None
    dl_description: str | None
    dl_source: str | None
    enqueued_seq: int | None
    payload: bytes
    visible_at: float | None
    ttl: float | None


class EntityMessageRow(NamedTuple):
    """A stored message with the key of its entity (for work across entities)."""

    entity: str
    message: MessageRow


class LockState(NamedTuple):
    """The columns a settlement checks and changes."""

    seq: int
    subq: int
    state: int
    lock_token: bytes | None
    locked_until: float | None
    delivery_count: int
    size: int


class DueMessage(NamedTuple):
    """A scheduled message whose time has come."""

    entity: str
    seq: int
    ttl: float | None


class SessionLock(NamedTuple):
    """Who holds a session, and until when."""

    lock_token: bytes | None
    locked_until: float | None


class StoredDefinition(NamedTuple):
    """An entity definition as stored (msgpack)."""

    key: str
    definition: bytes


class EntityFigure(NamedTuple):
    """One number per entity (a stored size, a counter, a highest sequence number)."""

    entity: str
    value: int


class MessageCount(NamedTuple):
    """How many messages of an entity are in one sub-queue and state."""

    subq: int
    state: int
    count: int


R = TypeVar("R", bound=tuple)  # type: ignore[type-arg]


def _rows(row_type: type[R], cursor: Iterable[Sequence[Any]]) -> list[R]:
    """The one converter: database rows -> row tuples of `row_type`."""
    return list(map(row_type._make, cursor))  # type: ignore[attr-defined]


_MESSAGE_COLUMNS = ", ".join(MessageRow._fields)
_SELECT_MESSAGE = f"SELECT {_MESSAGE_COLUMNS} FROM messages"
_LOCK_COLUMNS = ", ".join(LockState._fields)
_AVAILABLE = f"entity = :entity AND subq = :subq AND state = {_ACTIVE} AND seq > :after"
_AVAILABLE_IN_SESSION = _AVAILABLE + " AND session_id = :session_id"
_UNLOCKED = "(locked_until IS NULL OR locked_until <= :now)"
_ENTITY_TABLES = (("messages", "entity"), ("sessions", "entity"), ("dedup", "entity"), ("counters", "entity"),
                  ("entities", "key"))


class Queries:
    """The storage verbs of one partition over its connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    # ------------------------------------------------------------------ entities and counters

    def definitions(self) -> list[StoredDefinition]:
        """Every stored entity definition."""
        return _rows(StoredDefinition, self.db.execute("SELECT key, definition FROM entities"))

    def put_definition(self, key: str, definition: bytes) -> None:
        """Store (or replace) an entity's definition."""
        self.db.execute("INSERT OR REPLACE INTO entities (key, definition) VALUES (:key, :definition)",
                        {"key": key, "definition": definition})

    def delete_entity(self, key: str) -> None:
        """Remove an entity and everything stored for it."""
        for table, column in _ENTITY_TABLES:
            self.db.execute(f"DELETE FROM {table} WHERE {column} = :key", {"key": key})

    def stored_sizes(self) -> list[EntityFigure]:
        """The bytes of messages stored per entity."""
        return _rows(EntityFigure, self.db.execute(
            "SELECT entity, COALESCE(SUM(size), 0) FROM messages GROUP BY entity"))

    def counters(self) -> list[EntityFigure]:
        """The next sequence counter per entity."""
        return _rows(EntityFigure, self.db.execute("SELECT entity, next_seq FROM counters"))

    def save_counter(self, key: str, next_seq: int) -> None:
        """Record an entity's next sequence counter."""
        self.db.execute("INSERT OR REPLACE INTO counters (entity, next_seq) VALUES (:entity, :next_seq)",
                        {"entity": key, "next_seq": next_seq})

    def highest_sequences(self) -> list[EntityFigure]:
        """The highest stored sequence number per entity."""
        return _rows(EntityFigure, self.db.execute("SELECT entity, MAX(seq) FROM messages GROUP BY entity"))

    def message_counts(self, key: str) -> list[MessageCount]:
        """How many messages of an entity are in each sub-queue and state."""
        return _rows(MessageCount, self.db.execute(
            "SELECT subq, state, COUNT(*) FROM messages WHERE entity = :entity GROUP BY subq, state",
            {"entity": key}))

    # ------------------------------------------------------------------ duplicate detection

    def dedup_expiry(self, key: str, message_key: str) -> float | None:
        """When a remembered message id stops counting as a duplicate (None if not remembered)."""
        row = self.db.execute("SELECT expires_at FROM dedup WHERE entity = :entity AND key = :key",
                              {"entity": key, "key": message_key}).fetchone()
        return None if row is None else float(row[0])

    def remember_message_id(self, key: str, message_key: str, expires_at: float) -> None:
        """Remember a message id for duplicate detection until `expires_at`."""
        self.db.execute("INSERT OR REPLACE INTO dedup (entity, key, expires_at) VALUES (:entity, :key, :expires_at)",
                        {"entity": key, "key": message_key, "expires_at": expires_at})

    def prune_message_ids(self, now: float) -> None:
        """Forget message ids whose duplicate-detection window has passed."""
        self.db.execute("DELETE FROM dedup WHERE expires_at <= :now", {"now": now})

    # ------------------------------------------------------------------ writing messages

    def insert_messages(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Store new messages; each row is (entity, seq, subq, state, session_id, message_id,
        visible_at, enqueued_at, ttl, expires_at, size, payload)."""
        self.db.executemany(
            "INSERT INTO messages (entity, seq, subq, state, session_id, message_id, visible_at, enqueued_at, "
            "ttl, expires_at, size, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def delete_messages(self, key: str, seqs: Iterable[int]) -> None:
        """Remove messages of an entity by sequence number."""
        self.db.executemany("DELETE FROM messages WHERE entity = ? AND seq = ?", [(key, s) for s in seqs])

    def lock_messages(self, rows: Sequence[tuple[bytes | None, float | None, int, str, int]]) -> None:
        """Lock messages; each row is (lock_token, locked_until, delivery_count, entity, seq)."""
        self.db.executemany(
            "UPDATE messages SET lock_token = ?, locked_until = ?, delivery_count = ? WHERE entity = ? AND seq = ?",
            rows)

    def unlock(self, key: str, seq: int, delivery_count: int) -> None:
        """Drop a message's lock and set its delivery count."""
        self.db.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL, delivery_count = :count "
                        "WHERE entity = :entity AND seq = :seq", {"count": delivery_count, "entity": key, "seq": seq})

    def defer(self, key: str, seq: int) -> None:
        """Unlock a message and set it aside as deferred."""
        self.db.execute(f"UPDATE messages SET state = {int(MessageState.DEFERRED)}, lock_token = NULL, "
                        "locked_until = NULL WHERE entity = :entity AND seq = :seq", {"entity": key, "seq": seq})

    def extend_lock(self, key: str, seq: int, until: float) -> None:
        """Move a message's lock expiry."""
        self.db.execute("UPDATE messages SET locked_until = :until WHERE entity = :entity AND seq = :seq",
                        {"until": until, "entity": key, "seq": seq})

    def dead_letter(self, key: str, seq: int, reason: str | None, description: str | None) -> None:
        """Move a message to its entity's dead-letter sub-queue, unlocked and active."""
        self.db.execute(
            f"UPDATE messages SET subq = {int(SubQueueNumber.DEAD_LETTER)}, state = {_ACTIVE}, lock_token = NULL, "
            "locked_until = NULL, dl_reason = :reason, dl_description = :description "
            "WHERE entity = :entity AND seq = :seq",
            {"reason": reason, "description": description, "entity": key, "seq": seq})

    # ------------------------------------------------------------------ reading messages

    def available(self, key: str, subq: int, after: int, limit: int, session_id: str | None, *,
                  lapsed_before: float | None = None) -> list[MessageRow]:
        """Active messages above sequence `after`, in order: never locked ones, or with
        `lapsed_before` those whose lock expired by then (each from its own index range)."""
        scope = _AVAILABLE if session_id is None else _AVAILABLE_IN_SESSION
        args = {"entity": key, "subq": subq, "after": after, "session_id": session_id, "limit": limit,
                "now": lapsed_before}
        if lapsed_before is None:
            sql = f"{_SELECT_MESSAGE} WHERE {scope} AND locked_until IS NULL ORDER BY seq LIMIT :limit"
        else:
            sql = (f"{_SELECT_MESSAGE} INDEXED BY messages_ready WHERE {scope} AND locked_until <= :now "
                   "ORDER BY seq LIMIT :limit")
        return _rows(MessageRow, self.db.execute(sql, args))

    def locked_in_session(self, key: str, subq: int, session_id: str, now: float, after: int,
                          limit: int) -> list[MessageRow]:
        """Active messages of a session above sequence `after` still locked (under the session's lock)."""
        return _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE entity = :entity AND subq = :subq AND session_id = :session_id "
            f"AND state = {_ACTIVE} AND lock_token IS NOT NULL AND locked_until > :now AND seq > :after "
            "ORDER BY seq LIMIT :limit",
            {"entity": key, "subq": subq, "session_id": session_id, "now": now, "after": after, "limit": limit}))

    def message(self, key: str, subq: int, seq: int) -> MessageRow | None:
        """One message of a sub-queue by sequence number."""
        found = _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE entity = :entity AND seq = :seq AND subq = :subq",
            {"entity": key, "seq": seq, "subq": subq}))
        return found[0] if found else None

    def browse(self, key: str, subq: int, from_seq: int, limit: int, session_id: str | None) -> list[MessageRow]:
        """Messages of a sub-queue from sequence `from_seq` on, in order, whatever their state."""
        session = "" if session_id is None else " AND session_id = :session_id"
        return _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE entity = :entity AND subq = :subq AND seq >= :from_seq{session} "
            "ORDER BY seq LIMIT :limit",
            {"entity": key, "subq": subq, "from_seq": from_seq, "session_id": session_id, "limit": limit}))

    def lock_states(self, key: str, seqs: Sequence[int]) -> dict[int, LockState]:
        """The lock columns of the given messages of an entity, by sequence number."""
        states: dict[int, LockState] = {}
        for i in range(0, len(seqs), 500):
            chunk = seqs[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for row in _rows(LockState, self.db.execute(
                    f"SELECT {_LOCK_COLUMNS} FROM messages WHERE entity = ? AND seq IN ({marks})", (key, *chunk))):
                states[row.seq] = row
        return states

    def scheduled_size(self, key: str, seq: int) -> int | None:
        """The size of a message if it is still scheduled."""
        row = self.db.execute(f"SELECT size FROM messages WHERE entity = :entity AND seq = :seq AND state = {_SCHEDULED}",
                              {"entity": key, "seq": seq}).fetchone()
        return None if row is None else int(row[0])

    # ------------------------------------------------------------------ time-based work

    def due(self, now: float, key: str | None) -> list[DueMessage]:
        """Scheduled messages due by `now` (of one entity, or all), in schedule order."""
        scope = "" if key is None else " AND entity = :entity"
        return _rows(DueMessage, self.db.execute(
            f"SELECT entity, seq, ttl FROM messages INDEXED BY messages_scheduled WHERE state = {_SCHEDULED} "
            f"AND visible_at <= :now{scope} ORDER BY visible_at, seq", {"now": now, "entity": key}))

    def activate(self, key: str, seq: int, new_seq: int, now: float, expires_at: float | None) -> None:
        """Enqueue a scheduled message under a new sequence number."""
        self.db.execute(
            f"UPDATE messages SET seq = :new_seq, state = {_ACTIVE}, enqueued_at = :now, expires_at = :expires_at "
            "WHERE entity = :entity AND seq = :seq",
            {"new_seq": new_seq, "now": now, "expires_at": expires_at, "entity": key, "seq": seq})

    def expired(self, now: float) -> list[EntityMessageRow]:
        """Unlocked active messages of main sub-queues whose time to live ran out by `now`."""
        cursor = self.db.execute(
            f"SELECT entity, {_MESSAGE_COLUMNS} FROM messages WHERE expires_at <= :now AND subq = {_MAIN} "
            f"AND state = {_ACTIVE} AND {_UNLOCKED}", {"now": now})
        return [EntityMessageRow(row[0], MessageRow._make(row[1:])) for row in cursor]

    def lock_lapsed_between(self, since: float, now: float) -> bool:
        """Whether any message lock expired in (since, now]."""
        return self.db.execute("SELECT 1 FROM messages WHERE locked_until > :since AND locked_until <= :now LIMIT 1",
                               {"since": since, "now": now}).fetchone() is not None

    # ------------------------------------------------------------------ sessions

    def session_lock(self, key: str, session_id: str) -> SessionLock | None:
        """Who holds a session (None if the session was never locked or given state)."""
        found = _rows(SessionLock, self.db.execute(
            "SELECT lock_token, locked_until FROM sessions WHERE entity = :entity AND session_id = :session_id",
            {"entity": key, "session_id": session_id}))
        return found[0] if found else None

    def locked_sessions(self, key: str, now: float) -> set[str]:
        """The sessions of an entity locked beyond `now`."""
        return {sid for (sid,) in self.db.execute(
            "SELECT session_id FROM sessions WHERE entity = :entity AND locked_until > :now",
            {"entity": key, "now": now})}

    def sessions_with_available(self, key: str, now: float) -> Iterable[str]:
        """Session ids of an entity's unlocked active messages, in sequence order (lazily)."""
        return (str(sid) for (sid,) in self.db.execute(
            f"SELECT session_id FROM messages WHERE entity = :entity AND subq = {_MAIN} AND state = {_ACTIVE} "
            f"AND session_id IS NOT NULL AND {_UNLOCKED} ORDER BY seq", {"entity": key, "now": now}))

    def lock_session(self, key: str, session_id: str, token: bytes, until: float) -> None:
        """Lock a session (creating its row if needed)."""
        self.db.execute(
            "INSERT INTO sessions (entity, session_id, lock_token, locked_until) "
            "VALUES (:entity, :session_id, :token, :until) ON CONFLICT (entity, session_id) "
            "DO UPDATE SET lock_token = excluded.lock_token, locked_until = excluded.locked_until",
            {"entity": key, "session_id": session_id, "token": token, "until": until})

    def set_session_lock_expiry(self, key: str, session_id: str, until: float | None) -> None:
        """Move a session's lock expiry; None releases the lock."""
        token = "lock_token" if until is not None else "NULL"
        self.db.execute(f"UPDATE sessions SET lock_token = {token}, locked_until = :until "
                        "WHERE entity = :entity AND session_id = :session_id",
                        {"until": until, "entity": key, "session_id": session_id})

    def set_session_message_locks(self, key: str, session_id: str, until: float | None) -> None:
        """Move the locks of a session's locked messages to `until`; None unlocks them."""
        token = "lock_token" if until is not None else "NULL"
        self.db.execute(f"UPDATE messages SET lock_token = {token}, locked_until = :until WHERE entity = :entity "
                        f"AND subq = {_MAIN} AND session_id = :session_id AND lock_token IS NOT NULL",
                        {"until": until, "entity": key, "session_id": session_id})

    def session_state(self, key: str, session_id: str) -> bytes | None:
        """A session's state blob."""
        row = self.db.execute("SELECT state FROM sessions WHERE entity = :entity AND session_id = :session_id",
                              {"entity": key, "session_id": session_id}).fetchone()
        return None if row is None else row[0]

    def set_session_state(self, key: str, session_id: str, state: bytes | None) -> None:
        """Replace a session's state blob."""
        self.db.execute("UPDATE sessions SET state = :state WHERE entity = :entity AND session_id = :session_id",
                        {"state": state, "entity": key, "session_id": session_id})
