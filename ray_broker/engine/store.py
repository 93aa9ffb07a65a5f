"""SQLite storage for one partition: the connection, durability, schema versions and units of work.

The store knows tables, pragmas and transactions, not broker rules. A file store is opened only
under its exclusive `StoreLock`, so one process at a time writes it. Durability modes:
`normal` (WAL, synchronous=NORMAL: survives a process crash), `fsync` (WAL, synchronous=FULL:
survives power loss) and `memory` (no disk).

The schema carries a version (`PRAGMA user_version`); opening a store brings it up to
`SCHEMA_VERSION` by running the missing `MIGRATIONS` in order, each in its own transaction, so a
store written by an earlier release opens with its messages.

A replicated store (`replicated=True`, a partition's leader) records the writes of each committed
unit of work as a `Change` for its followers (see `changes`), and counts it in its replication
position, written in the same transaction as the writes. Any store can be copied whole
(`snapshot`) and replaced by such a copy (`restore`); followers apply changes with `replication`.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Iterator, Protocol, cast

from ..errors import InvalidArgumentError, InvalidOperationError, StaleEpochError
from ..protocol import COUNTER_BITS
from .changes import Change, Recorder
from .queries import EpochStart, Queries, ReplicaPosition
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

_REPLICATION_V7 = """
CREATE TABLE replication (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    position INTEGER NOT NULL
);
INSERT INTO replication (id, epoch, position) VALUES (1, 0, 0);
CREATE TABLE epochs (
    epoch INTEGER PRIMARY KEY,
    first_position INTEGER NOT NULL
);
"""

_SESSION_STATE_TIMES_V8 = """
ALTER TABLE sessions ADD COLUMN state_updated_at REAL;
"""

MIGRATIONS: tuple[str, ...] = (
    _SCHEMA_V1,  # 0 -> 1: the first release's tables (stores it wrote have them already, unversioned)
    _MESSAGE_ROWS_V2,  # 1 -> 2: entities numbered; messages keyed by (entity number, counter); bodies apart
    _PRODUCERS_V3,  # 2 -> 3: the recent batches of idempotent producers
    _RUNS_V4,  # 3 -> 4: runs (one row and one body for consecutive messages of a batch)
    _SHARED_BODIES_V5,  # 4 -> 5: rows that share another entity's body (a topic's, from its subscriptions)
    _TRANSACTIONS_AND_TRANSFERS_V6,  # 5 -> 6: committed transactions; the forwarder's outbox
    _REPLICATION_V7,  # 6 -> 7: the replication position (epoch, last change) and the epochs' first positions
    _SESSION_STATE_TIMES_V8,  # 7 -> 8: when each session's state was last set (list_*_sessions(state_updated_after))
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


@dataclass
class CommitTimes:
    """A running count of a store's commits and the seconds they took."""

    count: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        """Count one commit that took `seconds`."""
        self.count += 1
        self.seconds += seconds


class Store:
    """One partition's SQLite database.

    Args:
        path: the database file (ignored with durability "memory").
        durability: "normal", "fsync" or "memory".
        owner: who opens it, recorded in the store's lock for a refused opener to read; an opener
            with the same owner waits up to `takeover_wait_s` for the lock (see `StoreLock`).
        node: the Ray node the opener runs on, recorded in the lock too.
        partition: the partition the store belongs to, named in errors.
        replicated: record the writes of every committed unit of work as a `Change` (for
            `take_changes`); `db` is then a `Recorder` standing in for the connection, and every
            write through it must happen inside a unit of work.

    Raises `StoreLockedError` when another process holds the store, before touching it.

    Example:
        >>> store = Store(None, "memory", replicated=True)
        >>> with store.transaction() as db:
        ...     _ = db.execute("INSERT INTO counters (entity, next_seq) VALUES ('q', 1)")
        >>> [(c.position, [s.sql for s in c.statements]) for c in store.take_changes()]
        [(1, ["INSERT INTO counters (entity, next_seq) VALUES ('q', 1)"])]
        >>> store.close()
    """

    def __init__(self, path: str | None, durability: str = "normal", *, owner: str | None = None,
                 takeover_wait_s: float = 0.0, partition: int | None = None, replicated: bool = False,
                 node: str | None = None) -> None:
        if durability not in DURABILITY_MODES:
            raise InvalidArgumentError(f"durability must be one of {', '.join(DURABILITY_MODES)}, got {durability!r}")
        self.durability = durability
        self.path = None if durability == "memory" else path
        self.lock: StoreLock | None = None
        self._depth = 0
        self._participants: list[Participant] = []
        self._recorder: Recorder | None = None
        self._changes: list[Change] = []
        self.commits = CommitTimes()
        """How many outermost commits ran, and the seconds they took (replication's latency split)."""
        if self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.lock = StoreLock(self.path, owner or f"process {os.getpid()}", takeover_wait_s, partition, node)
            self.lock.acquire()
        try:
            connection = self._open()
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise
        self.connection = connection
        """The connection itself: what runs on it directly is never recorded."""
        self.db = connection
        """What the partition's queries run on: the connection, or its `Recorder` when replicated."""
        self._replication = Queries(self.connection)
        if replicated:
            self._recorder = Recorder(self.connection)
            self.join(self._recorder)
            self.db = cast(sqlite3.Connection, self._recorder)

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
        return int(self.connection.execute("PRAGMA user_version").fetchone()[0])

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
        that many operations can share one store transaction. A replicated store's outermost commit
        also counts the unit's writes as its next change (see `take_changes`).
        """
        depth = self._depth
        marks = [p.savepoint() for p in self._participants]
        db = self.connection
        db.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT unit{depth}")
        self._depth = depth + 1
        change = None
        try:
            yield self.db
            if depth > 0:
                db.execute(f"RELEASE unit{depth}")
            else:
                if self._recorder is not None:
                    change = self._seal(self._recorder)
                began = time.perf_counter()
                db.execute("COMMIT")
                self.commits.add(time.perf_counter() - began)
        except BaseException:
            self._depth = depth
            self._undo(depth, marks)
            raise
        self._depth = depth
        if depth == 0:
            for participant in self._participants:
                participant.commit()
            if change is not None:
                self._changes.append(change)

    def _seal(self, recorder: Recorder) -> Change | None:
        """The change the committing unit of work makes, its position counted in the same
        transaction (None when it wrote nothing)."""
        statements = recorder.take()
        if not statements:
            return None
        epoch, position = self._replication.advance_position()
        return Change(epoch, position, statements)

    def _undo(self, depth: int, marks: list[int]) -> None:
        db = self.connection
        if depth > 0:
            db.execute(f"ROLLBACK TO unit{depth}")
            db.execute(f"RELEASE unit{depth}")
        elif db.in_transaction:
            db.execute("ROLLBACK")
        for participant, mark in zip(self._participants, marks):
            participant.rollback(mark)

    def take_changes(self) -> list[Change]:
        """The changes committed since the last call, in order (a replicated store's: none otherwise).

        A leader takes them after each commit (a group commit's included), before it answers the
        callers whose work they hold, and ships them to its followers."""
        taken, self._changes = self._changes, []
        return taken

    @property
    def replication_position(self) -> ReplicaPosition:
        """The epoch the store leads or follows and the position of its last change ((0, 0) for a
        store that has none)."""
        return self._replication.replica_position()

    def epoch_history(self) -> list[EpochStart]:
        """Each epoch the store led or followed with the position its first change took, in order."""
        return self._replication.epoch_history()

    def snapshot(self) -> bytes:
        """A consistent copy of the whole store (its replication position and epochs included),
        for `restore` on another store; taken outside a unit of work, so that it holds only
        committed data.

        The copy is the database image in rollback-journal form: the header of a file store's
        image names write-ahead logging, which a database opened from memory cannot use."""
        self._check_outside_unit("take a snapshot")
        image = self.connection.serialize()
        if image[18:20] != b"\x02\x02":
            return image
        patched = bytearray(image)
        patched[18:20] = b"\x01\x01"
        return bytes(patched)

    def restore(self, data: bytes) -> None:
        """Replace the whole store with `data`, a copy `snapshot` took (of a leader, for a
        follower too far behind or diverged): in one step, keeping this store's file, journal mode
        and settings; its replication position and epochs come with the copy.

        An engine over this store keeps caches of the old contents: build it after a restore.

        Raises `InvalidArgumentError` for data that is no snapshot of this release's schema and
        `StaleEpochError` for a copy from an older epoch than this store's.
        """
        self._check_outside_unit("restore a snapshot")
        if not isinstance(data, (bytes, bytearray)) or not data:
            raise InvalidArgumentError(f"a store snapshot is non-empty bytes, got {type(data).__name__} of "
                                       f"{len(data) if isinstance(data, (bytes, bytearray)) else 0} bytes; take one "
                                       "with Store.snapshot")
        copy = sqlite3.connect(":memory:", isolation_level=None)
        try:
            try:
                copy.deserialize(data)
                version = int(copy.execute("PRAGMA user_version").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                raise InvalidArgumentError(f"the data is not a store snapshot ({exc}); take one with "
                                           "Store.snapshot") from None
            if version != SCHEMA_VERSION:
                raise InvalidArgumentError(f"the snapshot has schema version {version}, not this release's "
                                           f"{SCHEMA_VERSION}; take it with Store.snapshot of this release")
            copied = Queries(copy).replica_position()
            own = self.replication_position
            if copied.epoch < own.epoch:
                raise StaleEpochError(f"the snapshot is of epoch {copied.epoch}, older than this store's epoch "
                                      f"{own.epoch}: its sender no longer leads; take the copy from the leader of "
                                      f"epoch {own.epoch} or later", epoch=own.epoch, position=own.position)
            copy.backup(self.connection)
        finally:
            copy.close()

    def _check_outside_unit(self, what: str) -> None:
        if self._depth:
            raise InvalidOperationError(f"cannot {what} inside a unit of work; do it between units of work")

    def digest(self) -> str:
        """A SHA-256 over every row of every table of the partition's data (the replication
        position and epoch history, each replica's own, left out), in order: two replicas that
        hold the same changes have the same digest (a check of replication, for operators and tests)."""
        hasher = hashlib.sha256()
        tables = [row[0] for row in self.connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('replication', 'epochs') "
            "ORDER BY name")]
        for table in tables:
            hasher.update(table.encode())
            for row in sorted(repr(row) for row in self.connection.execute(f'SELECT * FROM "{table}"')):
                hasher.update(row.encode())
        return hasher.hexdigest()

    def integrity_check(self) -> str:
        """SQLite's own integrity check: 'ok' when the database is sound."""
        return str(self.connection.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        """Close the database and let go of its lock (idempotent)."""
        with contextlib.suppress(sqlite3.ProgrammingError):
            self.connection.close()
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
