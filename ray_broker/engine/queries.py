"""The partition's SQL: one documented method per storage verb, rows returned as typed tuples.

Messages are keyed by a row id that packs the entity's number and the message's sequence
counter (`row_id`), so a message is found, locked and deleted through the table's own
b-tree, and a batch of them through one statement. Their bodies live in a table of their own,
so that locking or settling a message rewrites a small row, never its body. A row may hold a
run of consecutive messages (`span` of them, sharing one body): see `messages`.

Statements use named parameters, except those over a batch (multi-row inserts and `IN (...)`
lists, whose length varies), whose parameters are positional in the order their docstrings give;
one statement per batch replaces a hundred `executemany` steps, each of which opens the table and
its indexes again. Sub-queue and state values come from `SubQueueNumber` and
`MessageState` and are written into the SQL text as literals, so that the partial indexes that
name them apply and each statement's text stays constant (sqlite3 caches prepared statements by
their text). Lists of ids are bound into `IN (...)` lists padded to a power of two, which keeps
the number of distinct texts small.

Row types are `NamedTuple`s: immutable and typed like frozen dataclasses, but built by C code
(`tuple.__new__`) where a frozen dataclass costs 3 us a row, a fifth of the engine's whole budget
for a batch of a hundred messages. Every query that returns rows goes through the one converter,
`_rows`.
"""
from __future__ import annotations

import sqlite3
from functools import partial
from typing import Any, Iterable, Iterator, NamedTuple, Sequence, TypeVar

from ..protocol import COUNTER_BITS, COUNTER_MASK, NAMED_PRODUCER_PREFIX, MessageState, SubQueueNumber

_ACTIVE, _DEFERRED, _SCHEDULED = int(MessageState.ACTIVE), int(MessageState.DEFERRED), int(MessageState.SCHEDULED)
_TRANSFER = int(MessageState.TRANSFER)
_MAIN, _DEAD_LETTER = int(SubQueueNumber.MAIN), int(SubQueueNumber.DEAD_LETTER)
_TRANSFER_DEAD_LETTER = int(SubQueueNumber.TRANSFER_DEAD_LETTER)
_IN_LIST_MAX = 512


def row_id(entity_id: int, seq: int) -> int:
    """The row id of message `seq` of the entity numbered `entity_id` (its counter in the low bits)."""
    return (entity_id << COUNTER_BITS) | (seq & COUNTER_MASK)


def lock_token(prefix: bytes, row_id: int) -> bytes:
    """The token of the lock on message `row_id` drawn with `prefix` (8 random bytes per lock
    operation): the prefix, then the low 32 bits of the row id as 8 hex digits. 16 bytes, unique
    per message and lock, and computed by SQLite in the one statement that locks a batch."""
    return prefix + b"%08x" % (row_id & 0xFFFFFFFF)


_LOCK_TOKEN = "CAST(? || printf('%08x', id & 4294967295) AS BLOB)"
"""`lock_token` in SQL, for the row being updated (the prefix bound first)."""


def row_id_range(entity_id: int) -> tuple[int, int]:
    """The first and last row id an entity's messages can have."""
    return entity_id << COUNTER_BITS, (entity_id << COUNTER_BITS) | COUNTER_MASK


class MessageRow(NamedTuple):
    """A stored message: everything a receiver or a peek needs, and what screening reads."""

    id: int
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
    visible_at: float | None
    span: int
    """How many messages the row holds: 1, or more for a run (see the module docstring)."""
    body: int
    """The id of the `bodies` row that holds the payloads."""


class Transfer(NamedTuple):
    """A batch the forwarder took from an entity, until its destination has stored it."""

    id: int
    """Also the batch number of the forwarder's idempotent send, so a repeat is recognized."""
    eid: int
    subq: int
    destination: str
    rows: bytes
    """The message row ids (msgpack list), in order."""


class LockState(NamedTuple):
    """The columns a settlement checks and changes."""

    id: int
    seq: int
    subq: int
    state: int
    lock_token: bytes | None
    locked_until: float | None
    delivery_count: int
    size: int
    span: int
    body: int


class Body(NamedTuple):
    """The payloads of one message, or of the messages of one run: `payload` is their
    concatenation and `lengths` (msgpack, None for one message) their lengths in order."""

    id: int
    span: int
    lengths: bytes | None
    payload: bytes


class DueMessage(NamedTuple):
    """A scheduled message whose time has come."""

    entity_id: int
    id: int
    ttl: float | None


class SessionLock(NamedTuple):
    """Who holds a session, and until when."""

    lock_token: bytes | None
    locked_until: float | None


class StoredEntity(NamedTuple):
    """An entity as stored: its key, its number in message ids, its definition (msgpack)."""

    key: str
    id: int
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


class ReplicaPosition(NamedTuple):
    """Where a store stands among the changes of its replicated partition."""

    epoch: int
    """The epoch the store leads or follows (0 before any)."""
    position: int
    """The position of the last change the store holds (0 for none)."""


class EpochStart(NamedTuple):
    """The first position of an epoch on a store (the position its first change takes)."""

    epoch: int
    first_position: int


R = TypeVar("R", bound=tuple)  # type: ignore[type-arg]



def _rows(row_type: type[R], cursor: Iterable[Sequence[Any]]) -> list[R]:
    """The one converter: database rows -> row tuples of `row_type` (built in C: each query names
    exactly the row type's fields, in order)."""
    return list(map(partial(tuple.__new__, row_type), cursor))


def _chunks(ids: Sequence[int]) -> Iterator[tuple[str, list[int | None]]]:
    """`ids` as `IN` lists of at most `_IN_LIST_MAX`: (the marks, the values padded with NULLs to a
    power of two)."""
    for start in range(0, len(ids), _IN_LIST_MAX):
        chunk: list[int | None] = list(ids[start:start + _IN_LIST_MAX])
        size = 1 << (len(chunk) - 1).bit_length()
        chunk.extend([None] * (size - len(chunk)))
        yield ",".join("?" * size), chunk


_MESSAGE_COLUMNS = ", ".join(f"m.{c}" for c in MessageRow._fields)
_SELECT_MESSAGE = f"SELECT {_MESSAGE_COLUMNS} FROM messages m"
_LOCK_COLUMNS = ", ".join(LockState._fields)
_AVAILABLE = f"m.eid = :eid AND m.subq = :subq AND m.state = {_ACTIVE} AND m.id > :after"
_SUB_QUEUES = ", ".join(str(int(n)) for n in SubQueueNumber)
_AVAILABLE_IN_SESSION = _AVAILABLE + " AND m.session_id = :session_id"
_UNLOCKED = "(locked_until IS NULL OR locked_until <= :now)"
_INSERT_MESSAGES = ("INSERT INTO messages (id, eid, seq, subq, state, session_id, visible_at, enqueued_at, ttl, "
                    "expires_at, size, span, body) VALUES ", f"(?, ?, ?, {_MAIN}, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_BODIES = ("INSERT INTO bodies (id, span, lengths, payload) VALUES ", "(?, ?, ?, ?)")
_COPIED_COLUMNS = ("eid, subq, state, session_id, visible_at, enqueued_at, ttl, expires_at, locked_until, "
                   "delivery_count, dl_reason, dl_description, dl_source, enqueued_seq, body")
_SHARED = f"(m.body >> {COUNTER_BITS}) <> m.eid"
"""The rows that refer to another entity's body (a subscription's to its topic's): the partial
index `messages_shared` holds just those."""
_UNREFERENCED = ("NOT EXISTS (SELECT 1 FROM messages m WHERE m.id >= bodies.id AND m.id < bodies.id + bodies.span) "
                 f"AND NOT EXISTS (SELECT 1 FROM messages m INDEXED BY messages_shared WHERE {_SHARED} "
                 "AND m.body = bodies.id)")
"""A body no row refers to: neither its own entity's rows (whose ids it spans) nor rows sharing it."""
_INSERT_CHUNK = 64
_insert_texts: dict[tuple[str, int], str] = {}


def _insert_text(statement: tuple[str, str], rows: int) -> str:
    """The text of a multi-row insert of `rows` rows (built once per size)."""
    text = _insert_texts.get((statement[0], rows))
    if text is None:
        text = _insert_texts[(statement[0], rows)] = statement[0] + ", ".join([statement[1]] * rows)
    return text


class Queries:
    """The storage verbs of one partition over its connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    # ------------------------------------------------------------------ entities and counters

    def entities(self) -> list[StoredEntity]:
        """Every stored entity."""
        return _rows(StoredEntity, self.db.execute("SELECT key, id, definition FROM entities"))

    def put_entity(self, key: str, entity_id: int, definition: bytes) -> None:
        """Store (or replace) an entity's number and definition."""
        self.db.execute("INSERT OR REPLACE INTO entities (key, id, definition) VALUES (:key, :id, :definition)",
                        {"key": key, "id": entity_id, "definition": definition})

    def delete_entity(self, key: str, entity_id: int) -> None:
        """Remove an entity and everything stored for it."""
        first, last = row_id_range(entity_id)
        self.db.execute("DELETE FROM bodies WHERE id BETWEEN :first AND :last", {"first": first, "last": last})
        self.db.execute("DELETE FROM messages WHERE eid = :eid", {"eid": entity_id})
        self.db.execute("DELETE FROM transfers WHERE eid = :eid", {"eid": entity_id})
        for table, column in (("sessions", "entity"), ("dedup", "entity"), ("producers", "entity"),
                              ("counters", "entity"), ("entities", "key")):
            self.db.execute(f"DELETE FROM {table} WHERE {column} = :key", {"key": key})

    def stored_sizes(self) -> list[EntityFigure]:
        """The bytes of messages stored per entity."""
        return _rows(EntityFigure, self.db.execute(
            "SELECT e.key, COALESCE(SUM(m.size), 0) FROM messages m JOIN entities e ON e.id = m.eid GROUP BY m.eid"))

    def counters(self) -> list[EntityFigure]:
        """The next sequence counter per entity."""
        return _rows(EntityFigure, self.db.execute("SELECT entity, next_seq FROM counters"))

    def save_counter(self, key: str, next_seq: int) -> None:
        """Record an entity's next sequence counter."""
        self.db.execute("INSERT OR REPLACE INTO counters (entity, next_seq) VALUES (:entity, :next_seq)",
                        {"entity": key, "next_seq": next_seq})

    def highest_sequences(self) -> list[EntityFigure]:
        """The highest stored sequence number per entity."""
        return _rows(EntityFigure, self.db.execute(
            "SELECT e.key, MAX(m.seq + m.span - 1) FROM messages m JOIN entities e ON e.id = m.eid GROUP BY m.eid"))

    def message_counts(self, entity_id: int) -> list[MessageCount]:
        """How many messages of an entity are in each sub-queue and state."""
        first, last = row_id_range(entity_id)
        return _rows(MessageCount, self.db.execute(
            "SELECT subq, state, SUM(span) FROM messages WHERE id BETWEEN :first AND :last GROUP BY subq, state",
            {"first": first, "last": last}))

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

    # ------------------------------------------------------------------ idempotent producers

    def producer_batches(self, key: str, producer: str) -> bytes | None:
        """The recent batches a producer sent to an entity (msgpack), if it sent any lately."""
        row = self.db.execute("SELECT batches FROM producers WHERE entity = :entity AND producer = :producer",
                              {"entity": key, "producer": producer}).fetchone()
        return None if row is None else bytes(row[0])

    def save_producer_batches(self, key: str, producer: str, batches: bytes, now: float) -> None:
        """Record a producer's recent batches to an entity, used at `now`."""
        self.db.execute("INSERT OR REPLACE INTO producers (entity, producer, last_used, batches) "
                        "VALUES (:entity, :producer, :now, :batches)",
                        {"entity": key, "producer": producer, "now": now, "batches": batches})

    def forget_producers(self, idle_since: float, named_idle_since: float) -> None:
        """Forget producers not used since `idle_since`, and named ones not used since `named_idle_since`."""
        self.db.execute("DELETE FROM producers WHERE last_used < :since AND (last_used < :named_since "
                        "OR substr(producer, 1, :prefix_length) <> :prefix)",
                        {"since": idle_since, "named_since": named_idle_since,
                         "prefix_length": len(NAMED_PRODUCER_PREFIX), "prefix": NAMED_PRODUCER_PREFIX})

    # ------------------------------------------------------------------ replication

    def replica_position(self) -> ReplicaPosition:
        """The store's epoch and the position of its last change."""
        (found,) = _rows(ReplicaPosition, self.db.execute("SELECT epoch, position FROM replication"))
        return found

    def advance_position(self) -> ReplicaPosition:
        """Count one more change in the store's epoch; the epoch and the change's position."""
        (found,) = _rows(ReplicaPosition, self.db.execute(
            "UPDATE replication SET position = position + 1 RETURNING epoch, position"))
        return found

    def set_position(self, epoch: int, position: int) -> None:
        """Record the store's epoch and the position of its last change."""
        self.db.execute("UPDATE replication SET epoch = :epoch, position = :position",
                        {"epoch": epoch, "position": position})

    def epoch_history(self) -> list[EpochStart]:
        """The epochs the store led or followed, each with its first position, in epoch order."""
        return _rows(EpochStart, self.db.execute("SELECT epoch, first_position FROM epochs ORDER BY epoch"))

    def add_epoch(self, epoch: int, first_position: int) -> None:
        """Record that epoch `epoch` begins at `first_position` on this store."""
        self.db.execute("INSERT INTO epochs (epoch, first_position) VALUES (:epoch, :first)",
                        {"epoch": epoch, "first": first_position})

    # ------------------------------------------------------------------ transactions

    def transaction_results(self, transaction_id: str) -> bytes | None:
        """The results (msgpack) of a transaction committed here, if it was."""
        row = self.db.execute("SELECT results FROM transactions WHERE id = :id", {"id": transaction_id}).fetchone()
        return None if row is None else bytes(row[0])

    def record_transaction(self, transaction_id: str, now: float, results: bytes) -> None:
        """Record a transaction committed at `now` with its results."""
        self.db.execute("INSERT INTO transactions (id, committed_at, results) VALUES (:id, :now, :results)",
                        {"id": transaction_id, "now": now, "results": results})

    def forget_transactions(self, committed_before: float) -> None:
        """Forget transactions committed before `committed_before`."""
        self.db.execute("DELETE FROM transactions WHERE committed_at < :before", {"before": committed_before})

    # ------------------------------------------------------------------ the forwarder's outbox

    def pending_transfer(self) -> Transfer | None:
        """The oldest transfer the forwarder took and has not finished."""
        found = _rows(Transfer, self.db.execute(
            "SELECT id, eid, subq, destination, rows FROM transfers ORDER BY id LIMIT 1"))
        return found[0] if found else None

    def add_transfer(self, entity_id: int, subq: int, destination: str, ids: Sequence[int], rows: bytes) -> int:
        """Record a transfer of message rows `ids` (its `rows`, msgpack) and mark them taken; its id."""
        self.db.executemany(f"UPDATE messages SET state = {_TRANSFER} WHERE id = ?",
                            [(i,) for i in ids])
        cursor = self.db.execute(
            "INSERT INTO transfers (eid, subq, destination, rows) VALUES (:eid, :subq, :destination, :rows)",
            {"eid": entity_id, "subq": subq, "destination": destination, "rows": rows})
        return int(cursor.lastrowid or 0)

    def delete_transfer(self, transfer_id: int) -> None:
        """Forget a finished transfer."""
        self.db.execute("DELETE FROM transfers WHERE id = :id", {"id": transfer_id})

    def transfer_dead_letter(self, ids: Sequence[int], reason: str, description: str) -> None:
        """Move message rows to their entity's transfer dead-letter sub-queue, active."""
        self.db.executemany(
            f"UPDATE messages SET subq = {_TRANSFER_DEAD_LETTER}, state = {_ACTIVE}, "
            "lock_token = NULL, locked_until = NULL, dl_reason = ?, dl_description = ? WHERE id = ?",
            [(reason, description, i) for i in ids])

    # ------------------------------------------------------------------ writing messages

    def insert_messages(self, rows: Sequence[tuple[Any, ...]], bodies: Sequence[tuple[Any, ...]]) -> None:
        """Store new messages (and runs) in the main sub-queue: each row is (id, eid, seq, state,
        session_id, visible_at, enqueued_at, ttl, expires_at, size, span, body), each body (id,
        span, lengths, payload)."""
        self._insert(_INSERT_MESSAGES, rows)
        self._insert(_INSERT_BODIES, bodies)

    def _insert(self, statement: tuple[str, str], rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert rows with multi-row statements of 64, 32, ..., 1 rows: one statement does the
        work of many `executemany` steps, and the texts stay few."""
        start = 0
        while start < len(rows):
            size = min(_INSERT_CHUNK, 1 << ((len(rows) - start).bit_length() - 1))
            self.db.execute(_insert_text(statement, size), [v for row in rows[start:start + size] for v in row])
            start += size

    def delete_messages(self, ids: Sequence[int], bodies: Iterable[int]) -> int:
        """Remove message rows by id, and those of the given bodies no row refers to any more;
        the bytes of payload freed."""
        for marks, chunk in _chunks(ids):
            self.db.execute(f"DELETE FROM messages WHERE id IN ({marks})", chunk)
        freed = 0
        for marks, chunk in _chunks(sorted(set(bodies))):
            freed += sum(n for (n,) in self.db.execute(
                f"DELETE FROM bodies WHERE id IN ({marks}) AND {_UNREFERENCED} RETURNING length(payload)", chunk))
        return freed

    def delete_unreferenced_bodies(self, entity_id: int) -> int:
        """Remove the bodies of an entity that no row refers to any more; the bytes freed."""
        first, last = row_id_range(entity_id)
        return sum(n for (n,) in self.db.execute(
            f"DELETE FROM bodies WHERE id BETWEEN :first AND :last AND {_UNREFERENCED} RETURNING length(payload)",
            {"first": first, "last": last}))

    def body_bytes(self, entity_id: int) -> int:
        """The bytes of payload stored in an entity's bodies."""
        first, last = row_id_range(entity_id)
        return int(self.db.execute("SELECT COALESCE(SUM(length(payload)), 0) FROM bodies WHERE id BETWEEN :first "
                                   "AND :last", {"first": first, "last": last}).fetchone()[0])

    def cut(self, row_id: int, pieces: Sequence[MessageRow]) -> None:
        """Cut the run in row `row_id` into `pieces` (the first keeps the row, each other becomes a
        row of its own with its id, seq, span, size and lock token; the rest is copied)."""
        first = pieces[0]
        self.db.execute("UPDATE messages SET span = :span, size = :size WHERE id = :id",
                        {"span": first.span, "size": first.size, "id": row_id})
        self.db.executemany(
            f"INSERT INTO messages (id, seq, span, size, lock_token, {_COPIED_COLUMNS}) "
            f"SELECT ?, ?, ?, ?, ?, {_COPIED_COLUMNS} FROM messages WHERE id = ?",
            [(p.id, p.seq, p.span, p.size, p.lock_token, row_id) for p in pieces[1:]])

    def lock_messages(self, ids: Sequence[int], prefix: bytes, until: float) -> None:
        """Lock messages until `until` under the tokens `lock_token(prefix, id)`, counting a
        delivery of each: one statement for the batch."""
        for marks, chunk in _chunks(ids):
            self.db.execute(f"UPDATE messages SET lock_token = {_LOCK_TOKEN}, locked_until = ?, "
                            f"delivery_count = delivery_count + 1 WHERE id IN ({marks})", [prefix, until, *chunk])

    def unlock(self, row_id: int, delivery_count: int) -> None:
        """Drop a message's lock and set its delivery count."""
        self.db.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL, delivery_count = :count "
                        "WHERE id = :id", {"count": delivery_count, "id": row_id})

    def defer(self, row_id: int) -> None:
        """Unlock a message and set it aside as deferred."""
        self.db.execute(f"UPDATE messages SET state = {_DEFERRED}, lock_token = NULL, locked_until = NULL "
                        "WHERE id = :id", {"id": row_id})

    def extend_lock(self, row_id: int, until: float) -> None:
        """Move a message's lock expiry."""
        self.db.execute("UPDATE messages SET locked_until = :until WHERE id = :id", {"until": until, "id": row_id})

    def dead_letter(self, row_id: int, reason: str | None, description: str | None) -> None:
        """Move a message to its entity's dead-letter sub-queue, unlocked and active."""
        self.db.execute(
            f"UPDATE messages SET subq = {_DEAD_LETTER}, state = {_ACTIVE}, lock_token = NULL, locked_until = NULL, "
            "dl_reason = :reason, dl_description = :description WHERE id = :id",
            {"reason": reason, "description": description, "id": row_id})

    # ------------------------------------------------------------------ reading messages

    def available(self, entity_id: int, subq: int, after: int, limit: int, session_id: str | None, *,
                  lapsed_before: float | None = None) -> list[MessageRow]:
        """Active messages with a row id above `after`, in order: never locked ones, or with
        `lapsed_before` those whose lock expired by then (each from its own index range)."""
        scope = _AVAILABLE if session_id is None else _AVAILABLE_IN_SESSION
        args = {"eid": entity_id, "subq": subq, "after": after, "session_id": session_id, "limit": limit,
                "now": lapsed_before}
        if lapsed_before is None:
            sql = f"{_SELECT_MESSAGE} WHERE {scope} AND m.locked_until IS NULL ORDER BY m.id LIMIT :limit"
        else:
            sql = f"{_SELECT_MESSAGE} WHERE {scope} AND m.locked_until <= :now ORDER BY m.id LIMIT :limit"
        return _rows(MessageRow, self.db.execute(sql, args))

    def count_free(self, entity_id: int, subq: int, after: int, session_id: str | None, cap: int) -> int:
        """How many never-locked active rows with a row id above `after` there are, counting up to
        `cap` (a walk of the free index alone)."""
        scope = _AVAILABLE if session_id is None else _AVAILABLE_IN_SESSION
        args = {"eid": entity_id, "subq": subq, "after": after, "session_id": session_id, "cap": cap}
        sql = f"SELECT count(*) FROM (SELECT 1 FROM messages m WHERE {scope} AND m.locked_until IS NULL LIMIT :cap)"
        return int(self.db.execute(sql, args).fetchone()[0])

    def locked_in_session(self, entity_id: int, subq: int, session_id: str, now: float, after_seq: int,
                          limit: int) -> list[MessageRow]:
        """Active messages of a session above sequence `after_seq` still locked (under the session's lock)."""
        return _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE m.eid = :eid AND m.subq = :subq AND m.session_id = :session_id "
            f"AND m.state = {_ACTIVE} AND m.lock_token IS NOT NULL AND m.locked_until > :now AND m.seq > :after "
            "ORDER BY m.id LIMIT :limit",
            {"eid": entity_id, "subq": subq, "session_id": session_id, "now": now, "after": after_seq,
             "limit": limit}))

    def message(self, row_id: int, seq: int, subq: int) -> MessageRow | None:
        """One message of a sub-queue by row id and sequence number."""
        found = _rows(MessageRow, self.db.execute(f"{_SELECT_MESSAGE} WHERE m.id = :id AND m.seq = :seq "
                                                  "AND m.subq = :subq", {"id": row_id, "seq": seq, "subq": subq}))
        return found[0] if found else None

    def message_by_id(self, row_id: int) -> MessageRow:
        """The row with id `row_id` (which must exist)."""
        (found,) = _rows(MessageRow, self.db.execute(f"{_SELECT_MESSAGE} WHERE m.id = :id", {"id": row_id}))
        return found

    def browse(self, entity_id: int, subq: int, from_seq: int, to_seq: int, limit: int,
               session_id: str | None) -> list[MessageRow]:
        """Messages of a sub-queue with sequence numbers in [`from_seq`, `to_seq`), in order, whatever
        their state (a run's first and last rows may reach outside the range)."""
        first, last = row_id_range(entity_id)
        session = "" if session_id is None else " AND m.session_id = :session_id"
        return _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE m.id BETWEEN :first AND :last AND m.subq = :subq "
            f"AND m.seq + m.span > :from_seq AND m.seq < :to_seq{session} ORDER BY m.id LIMIT :limit",
            {"first": first, "last": last, "subq": subq, "from_seq": from_seq, "to_seq": to_seq,
             "session_id": session_id, "limit": limit}))

    def purgeable(self, entity_id: int, subq: int, limit: int, before: float | None = None) -> list[LockState]:
        """Up to `limit` rows of a sub-queue a purge removes, in order: every state but `TRANSFER`
        (those are on their way to a forwarding destination); with `before`, only rows enqueued
        before then (epoch seconds)."""
        first, last = row_id_range(entity_id)
        cutoff = "" if before is None else " AND enqueued_at < :before"
        return _rows(LockState, self.db.execute(
            f"SELECT {_LOCK_COLUMNS} FROM messages WHERE id BETWEEN :first AND :last AND subq = :subq "
            f"AND state <> {_TRANSFER}{cutoff} ORDER BY id LIMIT :limit",
            {"first": first, "last": last, "subq": subq, "limit": limit, "before": before}))

    def lock_states(self, ids: Sequence[int]) -> list[LockState]:
        """The lock columns of the rows with the given ids (those that exist)."""
        states: list[LockState] = []
        for marks, chunk in _chunks(ids):
            states += _rows(LockState, self.db.execute(f"SELECT {_LOCK_COLUMNS} FROM messages WHERE id IN ({marks})",
                                                       chunk))
        return states

    def runs_between(self, entity_id: int, first: int, last: int) -> list[LockState]:
        """The lock columns of an entity's runs whose first id is in [first, last], in order."""
        return _rows(LockState, self.db.execute(
            f"SELECT {_LOCK_COLUMNS} FROM messages INDEXED BY messages_runs WHERE eid = :eid AND span > 1 "
            "AND id BETWEEN :first AND :last ORDER BY id", {"eid": entity_id, "first": first, "last": last}))

    def bodies(self, ids: Sequence[int]) -> list[Body]:
        """The bodies with the given ids."""
        found: list[Body] = []
        for marks, chunk in _chunks(ids):
            found += _rows(Body, self.db.execute(f"SELECT id, span, lengths, payload FROM bodies WHERE id IN ({marks})",
                                                 chunk))
        return found

    def body_lengths(self, body_id: int) -> bytes | None:
        """The payload lengths of a run's body (msgpack), without its payloads."""
        row = self.db.execute("SELECT lengths FROM bodies WHERE id = :id", {"id": body_id}).fetchone()
        return None if row is None else row[0]

    def scheduled_size(self, row_id: int, seq: int) -> int | None:
        """The size of a message if it is still scheduled."""
        row = self.db.execute(f"SELECT size FROM messages WHERE id = :id AND seq = :seq AND state = {_SCHEDULED}",
                              {"id": row_id, "seq": seq}).fetchone()
        return None if row is None else int(row[0])

    # ------------------------------------------------------------------ time-based work

    def due(self, now: float, entity_id: int | None) -> list[DueMessage]:
        """Scheduled messages due by `now` (of one entity, or all), in schedule order."""
        scope = "" if entity_id is None else " AND eid = :eid"
        return _rows(DueMessage, self.db.execute(
            f"SELECT eid, id, ttl FROM messages INDEXED BY messages_scheduled WHERE state = {_SCHEDULED} "
            f"AND visible_at <= :now{scope} ORDER BY visible_at, id", {"now": now, "eid": entity_id}))

    def activate(self, row_id: int, new_id: int, new_seq: int, now: float, expires_at: float | None) -> None:
        """Enqueue a scheduled message under a new sequence number (and so a new row id, which its
        body follows; a scheduled message is never part of a run)."""
        self.db.execute(
            f"UPDATE messages SET id = :new_id, seq = :new_seq, body = :new_id, state = {_ACTIVE}, "
            "enqueued_at = :now, expires_at = :expires_at WHERE id = :id",
            {"new_id": new_id, "new_seq": new_seq, "now": now, "expires_at": expires_at, "id": row_id})
        self.db.execute("UPDATE bodies SET id = :new_id WHERE id = :id", {"new_id": new_id, "id": row_id})

    def expired(self, now: float) -> list[tuple[int, MessageRow]]:
        """Unlocked active messages of main sub-queues whose time to live ran out by `now`, with
        their entity's number."""
        rows = _rows(MessageRow, self.db.execute(
            f"{_SELECT_MESSAGE} WHERE m.expires_at <= :now AND m.subq = {_MAIN} AND m.state = {_ACTIVE} "
            f"AND (m.locked_until IS NULL OR m.locked_until <= :now)", {"now": now}))
        return [(row.id >> COUNTER_BITS, row) for row in rows]

    def lock_lapsed_between(self, since: float, now: float) -> bool:
        """Whether any message lock expired in (since, now] (one probe of the lock index per entity
        and sub-queue)."""
        return self.db.execute(
            f"SELECT 1 FROM entities e CROSS JOIN messages m ON m.eid = e.id AND m.subq IN ({_SUB_QUEUES}) "
            "AND m.locked_until > :since AND m.locked_until <= :now LIMIT 1",
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

    def sessions_with_available(self, entity_id: int, now: float) -> Iterable[str]:
        """Session ids of an entity's unlocked active messages, in sequence order (lazily)."""
        return (str(sid) for (sid,) in self.db.execute(
            f"SELECT session_id FROM messages WHERE eid = :eid AND subq = {_MAIN} AND state = {_ACTIVE} "
            f"AND session_id IS NOT NULL AND {_UNLOCKED} ORDER BY id", {"eid": entity_id, "now": now}))

    def listed_sessions(self, entity_id: int, key: str, updated_after: float | None = None) -> list[str]:
        """The sessions of an entity with active messages or a stored state, in id order; with
        `updated_after` (epoch seconds), those whose state was set later instead."""
        if updated_after is not None:
            return [str(sid) for (sid,) in self.db.execute(
                "SELECT session_id FROM sessions WHERE entity = :entity AND state_updated_at > :after "
                "ORDER BY session_id", {"entity": key, "after": updated_after})]
        return [str(sid) for (sid,) in self.db.execute(
            f"SELECT session_id FROM messages WHERE eid = :eid AND subq = {_MAIN} AND state = {_ACTIVE} "
            "AND session_id IS NOT NULL UNION SELECT session_id FROM sessions WHERE entity = :entity "
            "AND state IS NOT NULL ORDER BY session_id", {"eid": entity_id, "entity": key})]

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

    def set_session_message_locks(self, entity_id: int, session_id: str, until: float | None) -> None:
        """Move the locks of a session's locked messages to `until`; None unlocks them."""
        token = "lock_token" if until is not None else "NULL"
        self.db.execute(f"UPDATE messages SET lock_token = {token}, locked_until = :until WHERE eid = :eid "
                        f"AND subq = {_MAIN} AND session_id = :session_id AND lock_token IS NOT NULL",
                        {"until": until, "eid": entity_id, "session_id": session_id})

    def session_state(self, key: str, session_id: str) -> bytes | None:
        """A session's state blob."""
        row = self.db.execute("SELECT state FROM sessions WHERE entity = :entity AND session_id = :session_id",
                              {"entity": key, "session_id": session_id}).fetchone()
        return None if row is None else row[0]

    def set_session_state(self, key: str, session_id: str, state: bytes | None, now: float) -> None:
        """Replace a session's state blob, noting when (`now`)."""
        self.db.execute("UPDATE sessions SET state = :state, state_updated_at = :now "
                        "WHERE entity = :entity AND session_id = :session_id",
                        {"state": state, "now": now, "entity": key, "session_id": session_id})
