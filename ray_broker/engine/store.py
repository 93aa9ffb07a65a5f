"""SQLite storage for one partition: schema, durability modes and transactions.

The store knows tables and pragmas, not broker rules. A file store is opened only under its
exclusive `StoreLock`, so one process at a time writes it. Durability modes:
`normal` (WAL, synchronous=NORMAL: survives a process crash), `fsync` (WAL, synchronous=FULL:
survives power loss) and `memory` (no disk).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Iterator

from ..errors import InvalidArgumentError
from .store_lock import StoreLock

DURABILITY_MODES = ("normal", "fsync", "memory")

SCHEMA = """
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


class Store:
    """One partition's SQLite database.

    Args:
        path: the database file (ignored with durability "memory").
        durability: "normal", "fsync" or "memory".
        owner: who opens it, recorded in the store's lock for a refused opener to read; an opener
            with the same owner waits up to `takeover_wait_s` for the lock (see `StoreLock`).
        partition: the partition the store belongs to, named in errors.

    Raises `StoreLockedError` when another process holds the store, before touching it.
    """

    def __init__(self, path: str | None, durability: str = "normal", *, owner: str | None = None,
                 takeover_wait_s: float = 0.0, partition: int | None = None) -> None:
        if durability not in DURABILITY_MODES:
            raise InvalidArgumentError(f"durability must be one of {', '.join(DURABILITY_MODES)}, got {durability!r}")
        self.durability = durability
        self.path = None if durability == "memory" else path
        self.lock: StoreLock | None = None
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
        if self.path is not None:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=" + ("FULL" if self.durability == "fsync" else "NORMAL"))
        db.execute("PRAGMA cache_size=-16000")
        db.execute("PRAGMA temp_store=MEMORY")
        db.executescript(SCHEMA)
        return db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Run a block in one write transaction: committed on success, rolled back on error."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def integrity_check(self) -> str:
        """SQLite's own integrity check: 'ok' when the database is sound."""
        return str(self.db.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        """Close the database and let go of its lock (idempotent)."""
        with contextlib.suppress(sqlite3.ProgrammingError):
            self.db.close()
        if self.lock is not None:
            self.lock.release()
