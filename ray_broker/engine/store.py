"""SQLite storage for one partition: the connection, durability, schema versions and units of work.

The store knows tables, pragmas and transactions, not broker rules. A file store is opened only
under its exclusive `StoreLock`, so one process at a time writes it. Durability modes:
`normal` (WAL, synchronous=NORMAL: survives a process crash), `fsync` (WAL, synchronous=FULL:
survives power loss) and `memory` (no disk).

The schema carries a version (`PRAGMA user_version`); opening a store brings it up to
`SCHEMA_VERSION` by running the missing `MIGRATIONS` in order, each in its own transaction, so a
store written by an earlier release opens with its messages.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Iterator, Protocol

from ..errors import InvalidArgumentError, InvalidOperationError
from ..routing import COUNTER_BITS
from .store_lock import StoreLock

DURABILITY_MODES = ("normal", "fsync", "memory")

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS entities (
    key TEXT PRIMARY KEY,
    definition BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    entity TEXT PRIMARY KEY,
    next_seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    entity TEXT NOT NULL,
    seq INTEGER NOT NULL,
    subq INTEGER NOT NULL,
    state INTEGER NOT NULL,
    session_id TEXT,
    message_id TEXT,
    visible_at REAL,
    enqueued_at REAL NOT NULL,
    ttl REAL,
    expires_at REAL,
    lock_token BLOB,
    locked_until REAL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    size INTEGER NOT NULL,
    dl_reason TEXT,
    dl_description TEXT,
    dl_source TEXT,
    enqueued_seq INTEGER,
    payload BLOB NOT NULL,
    PRIMARY KEY (entity, seq)
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (entity, subq, state, locked_until, seq);
CREATE INDEX IF NOT EXISTS messages_session ON messages (entity, subq, session_id, state, seq)
    WHERE session_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_scheduled ON messages (visible_at) WHERE state = 2;
CREATE INDEX IF NOT EXISTS messages_expiring ON messages (expires_at)
    WHERE expires_at IS NOT NULL AND subq = 0 AND state = 0;
CREATE INDEX IF NOT EXISTS messages_locked ON messages (locked_until) WHERE locked_until IS NOT NULL;
CREATE TABLE IF NOT EXISTS sessions (
    entity TEXT NOT NULL,
    session_id TEXT NOT NULL,
    state BLOB,
    lock_token BLOB,
    locked_until REAL,
    PRIMARY KEY (entity, session_id)
);
CREATE TABLE IF NOT EXISTS dedup (
    entity TEXT NOT NULL,
    key TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (entity, key)
);
CREATE INDEX IF NOT EXISTS dedup_expiry ON dedup (expires_at);
"""

_MESSAGE_ROWS_V2 = """
CREATE TABLE entities_v2 (
    key TEXT PRIMARY KEY,
    id INTEGER NOT NULL UNIQUE,
    definition BLOB NOT NULL
);
INSERT INTO entities_v2 (key, id, definition)
    SELECT key, row_number() OVER (ORDER BY key), definition FROM entities;
DROP TABLE entities;
ALTER TABLE entities_v2 RENAME TO entities;
CREATE TABLE messages_v2 (
    id INTEGER PRIMARY KEY,
    eid INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    subq INTEGER NOT NULL,
    state INTEGER NOT NULL,
    session_id TEXT,
    visible_at REAL,
    enqueued_at REAL NOT NULL,
    ttl REAL,
    expires_at REAL,
    lock_token BLOB,
    locked_until REAL,
    delivery_count INTEGER NOT NULL DEFAULT 0,
    size INTEGER NOT NULL,
    dl_reason TEXT,
    dl_description TEXT,
    dl_source TEXT,
    enqueued_seq INTEGER
);
CREATE TABLE bodies (
    id INTEGER PRIMARY KEY,
    payload BLOB NOT NULL
);
INSERT INTO messages_v2 (id, eid, seq, subq, state, session_id, visible_at, enqueued_at, ttl, expires_at,
                         lock_token, locked_until, delivery_count, size, dl_reason, dl_description, dl_source,
                         enqueued_seq)
    SELECT (e.id << 48) | (m.seq & 281474976710655), e.id, m.seq, m.subq, m.state, m.session_id, m.visible_at,
           m.enqueued_at, m.ttl, m.expires_at, m.lock_token, m.locked_until, m.delivery_count, m.size,
           m.dl_reason, m.dl_description, m.dl_source, m.enqueued_seq
    FROM messages m JOIN entities e ON e.key = m.entity;
INSERT INTO bodies (id, payload)
    SELECT (e.id << 48) | (m.seq & 281474976710655), m.payload FROM messages m JOIN entities e ON e.key = m.entity;
DROP TABLE messages;
ALTER TABLE messages_v2 RENAME TO messages;
CREATE INDEX messages_free ON messages (eid, subq) WHERE state = 0 AND locked_until IS NULL;
CREATE INDEX messages_locked ON messages (eid, subq, locked_until) WHERE locked_until IS NOT NULL;
CREATE INDEX messages_session ON messages (eid, subq, session_id, state) WHERE session_id IS NOT NULL;
CREATE INDEX messages_scheduled ON messages (visible_at) WHERE state = 2;
CREATE INDEX messages_expiring ON messages (expires_at) WHERE expires_at IS NOT NULL AND subq = 0 AND state = 0;
"""

_PRODUCERS_V3 = """
CREATE TABLE producers (
    entity TEXT NOT NULL,
    producer TEXT NOT NULL,
    last_used REAL NOT NULL,
    batches BLOB NOT NULL,
    PRIMARY KEY (entity, producer)
);
CREATE INDEX producers_idle ON producers (last_used);
"""

_RUNS_V4 = """
ALTER TABLE messages ADD COLUMN span INTEGER NOT NULL DEFAULT 1;
ALTER TABLE messages ADD COLUMN body INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET body = id;
CREATE INDEX messages_runs ON messages (eid) WHERE span > 1;
CREATE TABLE bodies_v4 (
    id INTEGER PRIMARY KEY,
    span INTEGER NOT NULL DEFAULT 1,
    lengths BLOB,
    payload BLOB NOT NULL
);
INSERT INTO bodies_v4 (id, payload) SELECT id, payload FROM bodies;
DROP TABLE bodies;
ALTER TABLE bodies_v4 RENAME TO bodies;
"""

_SHARED_BODIES_V5 = f"""
CREATE INDEX messages_shared ON messages (body) WHERE (body >> {COUNTER_BITS}) <> eid;
"""

_TRANSACTIONS_AND_TRANSFERS_V6 = """
CREATE TABLE transactions (
    id TEXT PRIMARY KEY,
    committed_at REAL NOT NULL,
    results BLOB NOT NULL
);
CREATE INDEX transactions_age ON transactions (committed_at);
CREATE TABLE transfers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    eid INTEGER NOT NULL,
    subq INTEGER NOT NULL,
    destination TEXT NOT NULL,
    rows BLOB NOT NULL
);
"""

MIGRATIONS: tuple[str, ...] = (
    _SCHEMA_V1,  # 0 -> 1: the first release's tables (stores it wrote have them already, unversioned)
    _MESSAGE_ROWS_V2,  # 1 -> 2: entities numbered; messages keyed by (entity number, counter); bodies apart
    _PRODUCERS_V3,  # 2 -> 3: the recent batches of idempotent producers
    _RUNS_V4,  # 3 -> 4: runs (one row and one body for consecutive messages of a batch)
    _SHARED_BODIES_V5,  # 4 -> 5: rows that share another entity's body (a topic's, from its subscriptions)
    _TRANSACTIONS_AND_TRANSFERS_V6,  # 5 -> 6: committed transactions; the forwarder's outbox
)
"""`MIGRATIONS[v]` is the SQL script that brings a store at version v to version v + 1."""

SCHEMA_VERSION = len(MIGRATIONS)


class Participant(Protocol):
    """An in-memory cache kept in step with the store's transactions (see `Store.join`)."""

    def savepoint(self) -> int:
        """A mark of the cache's pending changes, to roll back to."""
        ...

    def rollback(self, mark: int) -> None:
        """Drop the pending changes made since `mark`."""
        ...

    def commit(self) -> None:
        """Make the pending changes the cache's committed state."""
        ...


class Store:
    """One partition's SQLite database.

    Args:
        path: the database file (ignored with durability "memory").
        durability: "normal", "fsync" or "memory".
        owner: who opens it, recorded in the store's lock for a refused opener to read; an opener
            with the same owner waits up to `takeover_wait_s` for the lock (see `StoreLock`).
        partition: the partition the store belongs to, named in errors.

    Raises `StoreLockedError` when another process holds the store, before touching it.

    Example:
        >>> store = Store(None, "memory")
        >>> with store.transaction() as db:
        ...     _ = db.execute("INSERT INTO counters (entity, next_seq) VALUES ('q', 1)")
        >>> store.close()
    """

    def __init__(self, path: str | None, durability: str = "normal", *, owner: str | None = None,
                 takeover_wait_s: float = 0.0, partition: int | None = None) -> None:
        if durability not in DURABILITY_MODES:
            raise InvalidArgumentError(f"durability must be one of {', '.join(DURABILITY_MODES)}, got {durability!r}")
        self.durability = durability
        self.path = None if durability == "memory" else path
        self.lock: StoreLock | None = None
        self._depth = 0
        self._participants: list[Participant] = []
        if self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.lock = StoreLock(self.path, owner or f"process {os.getpid()}", takeover_wait_s, partition)
            self.lock.acquire()
        try:
            self.db = self._open()
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path or ":memory:", isolation_level=None, check_same_thread=False)
        try:
            if self.path is not None:
                mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise InvalidOperationError(
                        f"the store {self.path!r} cannot use write-ahead logging (journal mode {mode!r}); "
                        "put the data dir on a local or shared file system that supports it")
                db.execute("PRAGMA synchronous=" + ("FULL" if self.durability == "fsync" else "NORMAL"))
            db.execute("PRAGMA cache_size=-16000")
            db.execute("PRAGMA temp_store=MEMORY")
            _migrate(db, self.path or ":memory:")
        except BaseException:
            db.close()
            raise
        return db

    @property
    def version(self) -> int:
        """The schema version of the open store."""
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def join(self, participant: Participant) -> None:
        """Keep `participant` in step with this store's transactions: its pending changes are
        committed when the outermost transaction commits and dropped when theirs rolls back."""
        self._participants.append(participant)

    @property
    def in_transaction(self) -> bool:
        """Whether a unit of work is open."""
        return self._depth > 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run a block as one unit of work: committed on success, rolled back on error.

        The outermost block is one `BEGIN IMMEDIATE ... COMMIT`; a block opened inside it is a
        `SAVEPOINT`, whose failure undoes only its own writes (and its participants' changes), so
        that many operations can share one store transaction.
        """
        depth = self._depth
        marks = [p.savepoint() for p in self._participants]
        self.db.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT unit{depth}")
        self._depth = depth + 1
        try:
            yield self.db
            if depth > 0:
                self.db.execute(f"RELEASE unit{depth}")
            else:
                self.db.execute("COMMIT")
        except BaseException:
            self._depth = depth
            self._undo(depth, marks)
            raise
        self._depth = depth
        if depth == 0:
            for participant in self._participants:
                participant.commit()

    def _undo(self, depth: int, marks: list[int]) -> None:
        if depth > 0:
            self.db.execute(f"ROLLBACK TO unit{depth}")
            self.db.execute(f"RELEASE unit{depth}")
        elif self.db.in_transaction:
            self.db.execute("ROLLBACK")
        for participant, mark in zip(self._participants, marks):
            participant.rollback(mark)

    def integrity_check(self) -> str:
        """SQLite's own integrity check: 'ok' when the database is sound."""
        return str(self.db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        """Close the database and let go of its lock (idempotent)."""
        with contextlib.suppress(sqlite3.ProgrammingError):
            self.db.close()
        if self.lock is not None:
            self.lock.release()


def _migrate(db: sqlite3.Connection, where: str) -> None:
    """Bring the schema up to `SCHEMA_VERSION`, one transaction per version step."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise InvalidOperationError(
            f"the store {where!r} has schema version {version}, newer than this release's {SCHEMA_VERSION}; "
            "open it with the release that wrote it or a later one")
    for step in range(version, SCHEMA_VERSION):
        try:
            db.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[step]}\nPRAGMA user_version = {step + 1};\nCOMMIT;")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
