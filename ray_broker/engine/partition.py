"""The broker engine for one partition: every messaging rule, over one `Store`.

A partition hosts fragment k of each partitioned entity and the whole of each non-partitioned
entity whose home it is. The engine is plain Python driven through an injectable clock; every
method commits to the store before it returns, so whatever it acknowledges survives a crash.
Times are epoch seconds; lock tokens are 16 random bytes.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .. import codec
from ..clock import Clock, SystemClock
from ..entities import RECEIVE_BLOCKING, SEND_BLOCKING
from ..errors import (
    InvalidOperationError,
    MessageLockLostError,
    MessageNotFoundError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    QuotaExceededError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from ..protocol import (
    ACTIVE,
    DEAD_LETTER,
    DEFERRED,
    MAIN,
    PEEK_LOCK,
    RECEIVE_AND_DELETE,
    SCHEDULED,
    SETTLE_ACTIONS,
    TRANSFER_DEAD_LETTER,
)
from ..routing import COUNTER_BITS, home_partition
from .store import Store

RECENTLY_SETTLED_LIMIT = 100_000

_COLS = (
    "seq, subq, state, session_id, enqueued_at, expires_at, lock_token, locked_until, delivery_count, "
    "size, dl_reason, dl_description, dl_source, enqueued_seq, payload, visible_at, ttl"
)
_UNLOCKED = "(locked_until IS NULL OR locked_until <= ?)"


@dataclass
class _Row:
    seq: int
    subq: int
    state: int
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

    def record(self, *, with_lock: bool = True) -> dict[str, Any]:
        """The dict a receiver turns into a `ReceivedMessage`."""
        rec: dict[str, Any] = {
            "payload": self.payload,
            "sequence_number": self.seq,
            "enqueued_sequence_number": self.enqueued_seq or self.seq,
            "enqueued_time": self.enqueued_at,
            "expires_at": self.expires_at,
            "delivery_count": self.delivery_count,
            "state": self.state,
        }
        if self.visible_at is not None:
            rec["scheduled_enqueue_time"] = self.visible_at
        if self.dl_reason is not None or self.dl_description is not None:
            rec["dead_letter_reason"] = self.dl_reason
            rec["dead_letter_error_description"] = self.dl_description
        if self.dl_source is not None:
            rec["dead_letter_source"] = self.dl_source
        if with_lock and self.lock_token is not None:
            rec["lock_token"] = self.lock_token
            rec["locked_until"] = self.locked_until
        return rec


@dataclass
class _SettleBatch:
    """Work gathered while applying a batch of settlements, written once at the end."""

    deletes: list[int] = field(default_factory=list)
    freed: int = 0
    settled: list[tuple[bytes, str]] = field(default_factory=list)


@dataclass
class _Fragment:
    """What the engine knows of one entity hosted here."""

    key: str
    definition: dict[str, Any]
    seq_base: int

    @property
    def name(self) -> str:
        return str(self.definition["name"])

    @property
    def options(self) -> dict[str, Any]:
        return self.definition["options"]  # type: ignore[no-any-return]


class PartitionEngine:
    """Broker logic for one partition of a namespace."""

    def __init__(self, index: int, partition_count: int, store: Store, clock: Clock | None = None) -> None:
        self.index = index
        self.partition_count = partition_count
        self.store = store
        self.db = store.db
        self.clock = clock or SystemClock()
        self._definitions: dict[str, dict[str, Any]] = {}
        self._sizes: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._last_housekeeping = self.clock.now()
        self._recently_settled: OrderedDict[bytes, str] = OrderedDict()
        for key, blob in self.db.execute("SELECT key, definition FROM entities"):
            self._definitions[key] = codec.unpackb(blob)
        for key, size in self.db.execute("SELECT entity, COALESCE(SUM(size), 0) FROM messages GROUP BY entity"):
            self._sizes[key] = size
        for key, next_seq in self.db.execute("SELECT entity, next_seq FROM counters"):
            self._counters[key] = next_seq

    # ------------------------------------------------------------------ management

    def create_entity(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        """Store a new entity definition; repeating the same creation (same incarnation) is a no-op."""
        key = str(definition["name"]).lower()
        existing = self._definitions.get(key)
        if existing is not None:
            if existing.get("incarnation") == definition.get("incarnation"):
                return existing
            raise MessagingEntityAlreadyExistsError(
                f"{existing['kind']} {existing['name']!r} already exists; names are unique regardless of case",
                entity=existing["name"], partition=self.index,
            )
        return self._put_definition(key, dict(definition))

    def update_entity(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an existing entity's definition."""
        key = str(definition["name"]).lower()
        if key not in self._definitions:
            raise self._not_found(str(definition["name"]))
        return self._put_definition(key, dict(definition))

    def _put_definition(self, key: str, definition: dict[str, Any]) -> dict[str, Any]:
        with self.store.transaction() as db:
            db.execute("INSERT OR REPLACE INTO entities (key, definition) VALUES (?, ?)", (key, codec.packb(definition)))
        self._definitions[key] = definition
        return definition

    def delete_entity(self, name: str) -> bool:
        """Remove an entity and everything it holds here; False if it was not here."""
        key = name.lower()
        if key not in self._definitions:
            return False
        with self.store.transaction() as db:
            for table, column in (("messages", "entity"), ("sessions", "entity"), ("dedup", "entity"),
                                  ("counters", "entity"), ("entities", "key")):
                db.execute(f"DELETE FROM {table} WHERE {column} = ?", (key,))
        self._definitions.pop(key, None)
        self._sizes.pop(key, None)
        self._counters.pop(key, None)
        return True

    def get_entity(self, name: str) -> dict[str, Any]:
        """The definition of an entity, or `MessagingEntityNotFoundError`."""
        definition = self._definitions.get(name.lower())
        if definition is None:
            raise self._not_found(name)
        return definition

    def list_entities(self) -> list[dict[str, Any]]:
        """Every entity definition this partition holds, in name order."""
        return [self._definitions[k] for k in sorted(self._definitions)]

    def _not_found(self, name: str) -> MessagingEntityNotFoundError:
        return MessagingEntityNotFoundError(
            f"entity {name!r} does not exist; create it first (names are case-insensitive)",
            entity=name, partition=self.index,
        )

    def _fragment(self, name: str) -> _Fragment:
        key = name.lower()
        definition = self._definitions.get(key)
        if definition is None:
            raise self._not_found(name)
        partitioned = bool(definition["options"].get("enable_partitioning"))
        if not partitioned and home_partition(key, self.partition_count) != self.index:
            raise InvalidOperationError(
                f"entity {name!r} is not partitioned and lives on partition "
                f"{home_partition(key, self.partition_count)}, not {self.index}",
                entity=name, partition=self.index,
            )
        return _Fragment(key, definition, (self.index << COUNTER_BITS) if partitioned else 0)

    # ------------------------------------------------------------------ sending

    def send(self, entity: str, envelopes: Sequence[Mapping[str, Any]]) -> list[int | None]:
        """Enqueue messages (or schedule those with a future scheduled time).

        Each envelope holds `payload` (encoded message), `size`, and optionally `message_id`,
        `session_id`, `partition_key`, `ttl` (seconds) and `scheduled` (epoch seconds).
        Returns each message's sequence number, or None for a dropped duplicate.
        """
        frag = self._fragment(entity)
        opts = frag.options
        if opts["status"] in SEND_BLOCKING:
            raise MessagingEntityDisabledError(
                f"entity {frag.name!r} has status {opts['status']} and accepts no messages; "
                "set its status to Active to send", entity=frag.name, partition=self.index)
        if opts["requires_session"] and any(e.get("session_id") is None for e in envelopes):
            raise InvalidOperationError(
                f"entity {frag.name!r} requires sessions: set session_id on every message",
                entity=frag.name, partition=self.index)
        incoming = sum(int(e["size"]) for e in envelopes)
        limit = int(opts["max_size_in_megabytes"]) * 1024 * 1024
        if self._sizes.get(frag.key, 0) + incoming > limit:
            raise QuotaExceededError(
                f"entity {frag.name!r} is full on partition {self.index} ({limit} bytes); "
                "receive messages or raise max_size_in_megabytes", entity=frag.name, partition=self.index)
        now = self.clock.now()
        default_ttl = opts["default_message_time_to_live"]
        dedup_window = opts["duplicate_detection_history_time_window"] if opts["requires_duplicate_detection"] else None
        counter = self._counters.get(frag.key, 1)
        rows: list[tuple[Any, ...]] = []
        result: list[int | None] = []
        added = 0
        with self.store.transaction() as db:
            seen: set[str] = set()
            for env in envelopes:
                if dedup_window is not None and env.get("message_id") is not None:
                    key = self._dedup_key(env, opts)
                    hit = db.execute("SELECT expires_at FROM dedup WHERE entity = ? AND key = ?", (frag.key, key)).fetchone()
                    if key in seen or (hit is not None and hit[0] > now):
                        result.append(None)
                        continue
                    seen.add(key)
                    db.execute("INSERT OR REPLACE INTO dedup (entity, key, expires_at) VALUES (?, ?, ?)",
                               (frag.key, key, now + dedup_window))
                ttl = env.get("ttl")
                if default_ttl is not None:
                    ttl = default_ttl if ttl is None else min(ttl, default_ttl)
                scheduled = env.get("scheduled")
                seq = frag.seq_base | counter
                counter += 1
                if scheduled is not None and scheduled > now:
                    state, visible_at, expires_at = SCHEDULED, scheduled, None
                else:
                    state, visible_at, expires_at = ACTIVE, scheduled, (None if ttl is None else now + ttl)
                rows.append((frag.key, seq, MAIN, state, env.get("session_id"), env.get("message_id"),
                             visible_at, now, ttl, expires_at, int(env["size"]), env["payload"]))
                added += int(env["size"])
                result.append(seq)
            db.executemany(
                "INSERT INTO messages (entity, seq, subq, state, session_id, message_id, visible_at, enqueued_at, "
                "ttl, expires_at, size, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            db.execute("INSERT OR REPLACE INTO counters (entity, next_seq) VALUES (?, ?)", (frag.key, counter))
        self._counters[frag.key] = counter
        self._sizes[frag.key] = self._sizes.get(frag.key, 0) + added
        return result

    @staticmethod
    def _dedup_key(env: Mapping[str, Any], opts: Mapping[str, Any]) -> str:
        """MessageId, plus the partition key (the session id on a session message) when partitioned."""
        key = str(env["message_id"])
        partition_key = env.get("session_id") or env.get("partition_key")
        if opts.get("enable_partitioning") and partition_key is not None:
            key += "\x1f" + str(partition_key)
        return key

    def cancel_scheduled(self, entity: str, sequence_numbers: Iterable[int]) -> None:
        """Delete scheduled messages; all must still be scheduled, or nothing is cancelled."""
        frag = self._fragment(entity)
        seqs = list(dict.fromkeys(int(s) for s in sequence_numbers))
        with self.store.transaction() as db:
            found = {}
            for seq in seqs:
                row = db.execute("SELECT size FROM messages WHERE entity = ? AND seq = ? AND state = ?",
                                 (frag.key, seq, SCHEDULED)).fetchone()
                if row is not None:
                    found[seq] = row[0]
            missing = [s for s in seqs if s not in found]
            if missing:
                raise MessageNotFoundError(
                    f"no scheduled message with sequence number(s) {missing} in {frag.name!r}; it may have "
                    "been enqueued already or cancelled", entity=frag.name, partition=self.index)
            db.executemany("DELETE FROM messages WHERE entity = ? AND seq = ?", [(frag.key, s) for s in seqs])
        self._sizes[frag.key] -= sum(found.values())

    # ------------------------------------------------------------------ receiving

    def receive(self, entity: str, subq: int, max_count: int, mode: str = PEEK_LOCK,
                session: tuple[str, bytes] | None = None, session_seen: int | None = None) -> dict[str, Any]:
        """Take up to `max_count` available messages in sequence order.

        Returns `{"messages": [record, ...], "more": bool}`; `more` says whether further messages
        are available right now. In peek-lock mode each message is locked and its delivery count
        raised; in receive-and-delete mode it is removed.

        A session receiver passes `session_seen`, the highest sequence number it has received in
        the session: messages locked under its session lock above that number were lost on their
        way (a crash between lock and reply) and are handed out again first, keeping session order.
        """
        frag = self._fragment(entity)
        self._check_receivable(frag)
        session_id = self._check_session(frag, subq, session)
        now = self.clock.now()
        self._activate_due(now, frag.key)
        taken: list[_Row] = []
        with self.store.transaction() as db:
            after = 0
            while len(taken) < max_count:
                rows = self._available_rows(db, frag.key, subq, now, max_count - len(taken), session_id, after)
                if not rows:
                    break
                after = rows[-1].seq
                usable = self._screen(db, frag, rows, now)
                taken.extend(usable)
                if len(usable) == len(rows):
                    break
            unseen = (self._unseen_in_session(db, frag.key, subq, session_id, session_seen, now, max_count)
                      if session_id is not None and session_seen is not None and mode == PEEK_LOCK else [])
            if unseen:
                taken = sorted(unseen + taken, key=lambda r: r.seq)[:max_count]
                resent = {r.seq for r in unseen}
            if mode == RECEIVE_AND_DELETE:
                db.executemany("DELETE FROM messages WHERE entity = ? AND seq = ?", [(frag.key, r.seq) for r in taken])
                for row in taken:
                    row.delivery_count += 1
                    row.lock_token = None
            else:
                until = self._session_until(db, frag.key, session_id) if session_id else now + frag.options["lock_duration"]
                fresh = [r for r in taken if not unseen or r.seq not in resent]
                for row in fresh:
                    row.lock_token = os.urandom(16)
                    row.locked_until = until
                    row.delivery_count += 1
                db.executemany(
                    "UPDATE messages SET lock_token = ?, locked_until = ?, delivery_count = ? WHERE entity = ? AND seq = ?",
                    [(r.lock_token, r.locked_until, r.delivery_count, frag.key, r.seq) for r in fresh])
        if mode == RECEIVE_AND_DELETE and taken:
            self._sizes[frag.key] -= sum(r.size for r in taken)
        more = len(taken) >= max_count and self._exists_available(frag.key, subq, now, session_id)
        return {"messages": [r.record() for r in taken], "more": more}

    @staticmethod
    def _unseen_in_session(db: Any, key: str, subq: int, session_id: str, seen: int, now: float,
                           limit: int) -> list[_Row]:
        """Messages locked under the held session lock that its receiver has not received."""
        return [_Row(*r) for r in db.execute(
            f"SELECT {_COLS} FROM messages WHERE entity = ? AND subq = ? AND session_id = ? AND state = 0 "
            "AND lock_token IS NOT NULL AND locked_until > ? AND seq > ? ORDER BY seq LIMIT ?",
            (key, subq, session_id, now, int(seen), limit))]

    def _check_receivable(self, frag: _Fragment) -> None:
        if frag.options["status"] in RECEIVE_BLOCKING:
            raise MessagingEntityDisabledError(
                f"entity {frag.name!r} has status {frag.options['status']} and cannot be received from; "
                "set its status to Active", entity=frag.name, partition=self.index)

    def _check_session(self, frag: _Fragment, subq: int, session: tuple[str, bytes] | None) -> str | None:
        """Validate the receiver's session against the entity; return the session id to filter on."""
        needs_session = bool(frag.options["requires_session"]) and subq == MAIN
        if session is None:
            if needs_session:
                raise InvalidOperationError(
                    f"entity {frag.name!r} requires sessions: open a session receiver "
                    "(session_id=... or NEXT_AVAILABLE_SESSION)", entity=frag.name, partition=self.index)
            return None
        if not needs_session:
            raise InvalidOperationError(
                f"entity {frag.name!r} does not require sessions; open a receiver without session_id",
                entity=frag.name, partition=self.index)
        session_id, token = session
        self._held_session(frag, session_id, token, self.clock.now())
        return session_id

    def _held_session(self, frag: _Fragment, session_id: str, token: bytes, now: float) -> float:
        row = self.db.execute("SELECT lock_token, locked_until FROM sessions WHERE entity = ? AND session_id = ?",
                              (frag.key, session_id)).fetchone()
        if row is None or row[0] != token or row[1] is None or row[1] <= now:
            raise SessionLockLostError(
                f"the lock on session {session_id!r} of {frag.name!r} expired or was released; "
                "accept the session again", entity=frag.name, partition=self.index)
        return float(row[1])

    def _session_until(self, db: Any, key: str, session_id: str) -> float:
        return float(db.execute("SELECT locked_until FROM sessions WHERE entity = ? AND session_id = ?",
                                (key, session_id)).fetchone()[0])

    def _available_rows(self, db: Any, key: str, subq: int, now: float, limit: int,
                        session_id: str | None, after: int = 0) -> list[_Row]:
        """Unlocked active messages with a sequence number above `after`, in order.

        Never-locked rows come from the ready index in sequence order; rows whose lock has expired
        come from the lock-expiry index. Neither query walks past messages that are still locked.
        """
        scope = "entity = ? AND subq = ? AND state = 0 AND seq > ?"
        args: tuple[Any, ...] = (key, subq, after)
        if session_id is not None:
            scope += " AND session_id = ?"
            args = (key, subq, after, session_id)
        free = db.execute(f"SELECT {_COLS} FROM messages WHERE {scope} AND locked_until IS NULL ORDER BY seq LIMIT ?",
                          (*args, limit)).fetchall()
        lapsed = db.execute(f"SELECT {_COLS} FROM messages INDEXED BY messages_ready "
                            f"WHERE {scope} AND locked_until <= ? ORDER BY seq LIMIT ?", (*args, now, limit)).fetchall()
        rows = sorted(free + lapsed, key=lambda r: r[0])[:limit] if lapsed else free
        return [_Row(*r) for r in rows]

    def _screen(self, db: Any, frag: _Fragment, rows: list[_Row], now: float) -> list[_Row]:
        """Expire and dead-letter what may no longer be delivered; return the rest."""
        usable = []
        for row in rows:
            if row.subq == MAIN and row.expires_at is not None and row.expires_at <= now:
                self._expire(db, frag, row)
            elif row.subq == MAIN and row.delivery_count >= frag.options["max_delivery_count"]:
                self._move_to_dead_letter(db, frag.key, row.seq, "MaxDeliveryCountExceeded",
                                          f"Message could not be consumed after {row.delivery_count} delivery attempts.")
            else:
                usable.append(row)
        return usable

    def _expire(self, db: Any, frag: _Fragment, row: _Row) -> None:
        if frag.options["dead_lettering_on_message_expiration"]:
            self._move_to_dead_letter(db, frag.key, row.seq, "TTLExpiredException",
                                      "The message expired and was dead lettered.")
        else:
            db.execute("DELETE FROM messages WHERE entity = ? AND seq = ?", (frag.key, row.seq))
            self._sizes[frag.key] -= row.size

    @staticmethod
    def _move_to_dead_letter(db: Any, key: str, seq: int, reason: str | None, description: str | None) -> None:
        db.execute(
            "UPDATE messages SET subq = ?, state = 0, lock_token = NULL, locked_until = NULL, dl_reason = ?, "
            "dl_description = ? WHERE entity = ? AND seq = ?", (DEAD_LETTER, reason, description, key, seq))

    def _exists_available(self, key: str, subq: int, now: float, session_id: str | None) -> bool:
        return bool(self._available_rows(self.db, key, subq, now, 1, session_id))

    def has_available(self, entity: str, subq: int, session_id: str | None = None, free_session: bool = False) -> bool:
        """Whether a receive could get a message now (for a session, or any unlocked session)."""
        frag = self._fragment(entity)
        now = self.clock.now()
        self._activate_due(now, frag.key)
        if free_session:
            return self._next_free_session(frag.key, now) is not None
        return self._exists_available(frag.key, subq, now, session_id)

    # ------------------------------------------------------------------ settling

    def settle(self, entity: str, subq: int, ops: Sequence[Sequence[Any]],
               session: tuple[str, bytes] | None = None) -> list[Any]:
        """Apply settlements `(action, sequence_number, lock_token[, reason, description])`.

        Returns one result per op: None on success, the new lock expiry for `renew`, or the
        `ServiceBusError` that op met (the others still apply).
        """
        frag = self._fragment(entity)
        now = self.clock.now()
        results: list[Any] = []
        session_error: ServiceBusError | None = None
        if session is not None:
            try:
                self._held_session(frag, session[0], session[1], now)
            except SessionLockLostError as exc:
                session_error = exc
        locks = self._lock_states(frag.key, [int(op[1]) for op in ops])
        batch = _SettleBatch()
        with self.store.transaction() as db:
            for op in ops:
                try:
                    if session_error is not None:
                        raise session_error
                    results.append(self._settle_one(db, frag, subq, op, locks, now, session, batch))
                    if op[0] != "renew":
                        batch.settled.append((op[2], op[0]))
                except ServiceBusError as exc:
                    results.append(exc)
            db.executemany("DELETE FROM messages WHERE entity = ? AND seq = ?", [(frag.key, s) for s in batch.deletes])
        self._sizes[frag.key] = self._sizes.get(frag.key, 0) - batch.freed
        for token, action in batch.settled:
            self._remember_settled(token, action)
        return results

    def _remember_settled(self, token: bytes, action: str) -> None:
        """Remember a settlement by lock token, so that a retry of it (after a lost reply) succeeds."""
        self._recently_settled[token] = action
        if len(self._recently_settled) > RECENTLY_SETTLED_LIMIT:
            self._recently_settled.popitem(last=False)

    def _lock_states(self, key: str, seqs: list[int]) -> dict[int, list[Any]]:
        """The lock columns of the given messages, by sequence number (one query per 500)."""
        states: dict[int, list[Any]] = {}
        for i in range(0, len(seqs), 500):
            chunk = seqs[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(
                    f"SELECT seq, subq, state, lock_token, locked_until, delivery_count, size FROM messages "
                    f"WHERE entity = ? AND seq IN ({marks})", (key, *chunk)):
                states[row[0]] = list(row)
        return states

    def _settle_one(self, db: Any, frag: _Fragment, subq: int, op: Sequence[Any], locks: dict[int, list[Any]],
                    now: float, session: tuple[str, bytes] | None, batch: _SettleBatch) -> Any:
        action, seq, token = op[0], int(op[1]), op[2]
        if action not in SETTLE_ACTIONS:
            raise InvalidOperationError(f"unknown settlement {action!r}")
        lock = locks.pop(seq, None)
        if lock is None and token is not None and self._recently_settled.get(token) == action:
            return None
        if (lock is None or lock[1] != subq or lock[3] is None or lock[3] != token
                or (session is None and (lock[4] or 0) <= now)):
            raise MessageLockLostError(
                f"the lock on message {seq} of {frag.name!r} was lost (it expired, or the message was settled "
                "or received again); receive the message again", entity=frag.name, partition=self.index)
        _, row_subq, state, _, _, delivery_count, size = lock
        key = frag.key
        if action == "complete":
            batch.deletes.append(seq)
            batch.freed += size
        elif action in ("abandon", "release"):
            count = max(0, delivery_count - 1) if action == "release" else delivery_count
            db.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL, delivery_count = ? "
                       "WHERE entity = ? AND seq = ?", (count, key, seq))
            if (action == "abandon" and row_subq == MAIN and state == ACTIVE
                    and count >= frag.options["max_delivery_count"]):
                self._move_to_dead_letter(db, key, seq, "MaxDeliveryCountExceeded",
                                          f"Message could not be consumed after {count} delivery attempts.")
        elif action == "defer":
            db.execute("UPDATE messages SET state = ?, lock_token = NULL, locked_until = NULL WHERE entity = ? AND seq = ?",
                       (DEFERRED, key, seq))
        elif action == "dead_letter":
            if row_subq != MAIN:
                locks[seq] = lock
                raise InvalidOperationError(
                    f"message {seq} is already in a dead-letter queue of {frag.name!r}; complete it instead",
                    entity=frag.name, partition=self.index)
            reason = op[3] if len(op) > 3 else None
            description = op[4] if len(op) > 4 else None
            self._move_to_dead_letter(db, key, seq, reason, description)
        else:
            if session is not None:
                locks[seq] = lock
                raise InvalidOperationError(
                    "messages of a session are locked by the session lock; renew it with receiver.session.renew_lock()",
                    entity=frag.name, partition=self.index)
            until = now + frag.options["lock_duration"]
            db.execute("UPDATE messages SET locked_until = ? WHERE entity = ? AND seq = ?", (until, key, seq))
            lock[4] = until
            locks[seq] = lock
            return until
        return None

    def receive_deferred(self, entity: str, subq: int, sequence_numbers: Iterable[int], mode: str = PEEK_LOCK,
                         session: tuple[str, bytes] | None = None) -> list[dict[str, Any]]:
        """Receive deferred messages by sequence number (locked, or removed in receive-and-delete)."""
        frag = self._fragment(entity)
        self._check_receivable(frag)
        session_id = self._check_session(frag, subq, session)
        now = self.clock.now()
        records = []
        with self.store.transaction() as db:
            for seq in dict.fromkeys(int(s) for s in sequence_numbers):
                found = db.execute(f"SELECT {_COLS} FROM messages WHERE entity = ? AND seq = ? AND subq = ?",
                                   (frag.key, seq, subq)).fetchone()
                row = None if found is None else _Row(*found)
                if (row is None or row.state != DEFERRED or (session_id is not None and row.session_id != session_id)
                        or (row.locked_until is not None and row.locked_until > now)):
                    raise MessageNotFoundError(
                        f"no deferred message with sequence number {seq} is available in {frag.name!r}"
                        + (f" for session {session_id!r}" if session_id else ""),
                        entity=frag.name, partition=self.index)
                row.delivery_count += 1
                if mode == RECEIVE_AND_DELETE:
                    db.execute("DELETE FROM messages WHERE entity = ? AND seq = ?", (frag.key, seq))
                    self._sizes[frag.key] -= row.size
                    row.lock_token = None
                else:
                    row.lock_token = os.urandom(16)
                    row.locked_until = (self._session_until(db, frag.key, session_id) if session_id
                                        else now + frag.options["lock_duration"])
                    db.execute("UPDATE messages SET lock_token = ?, locked_until = ?, delivery_count = ? "
                               "WHERE entity = ? AND seq = ?",
                               (row.lock_token, row.locked_until, row.delivery_count, frag.key, seq))
                records.append(row.record())
        return records

    def peek(self, entity: str, subq: int, from_sequence: int, max_count: int,
             session_id: str | None = None) -> list[dict[str, Any]]:
        """Browse messages from `from_sequence` in sequence order without locking them."""
        frag = self._fragment(entity)
        self._activate_due(self.clock.now(), frag.key)
        sql = f"SELECT {_COLS} FROM messages WHERE entity = ? AND subq = ? AND seq >= ?"
        args: list[Any] = [frag.key, subq, int(from_sequence)]
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(session_id)
        sql += " ORDER BY seq LIMIT ?"
        args.append(int(max_count))
        return [_Row(*r).record(with_lock=False) for r in self.db.execute(sql, args)]

    # ------------------------------------------------------------------ sessions

    def accept_session(self, entity: str, session_id: str | None) -> dict[str, Any] | None:
        """Lock a session (a named one, or the next one with available messages and no holder).

        Returns `{"session_id", "lock_token", "locked_until"}`, or None when `session_id` is None
        and no session is free here.
        """
        frag = self._fragment(entity)
        if not frag.options["requires_session"]:
            raise InvalidOperationError(
                f"entity {frag.name!r} does not require sessions; open a receiver without session_id",
                entity=frag.name, partition=self.index)
        self._check_receivable(frag)
        now = self.clock.now()
        self._activate_due(now, frag.key)
        if session_id is None:
            session_id = self._next_free_session(frag.key, now)
            if session_id is None:
                return None
        held = self.db.execute("SELECT locked_until FROM sessions WHERE entity = ? AND session_id = ?",
                               (frag.key, session_id)).fetchone()
        if held is not None and held[0] is not None and held[0] > now:
            raise SessionCannotBeLockedError(
                f"session {session_id!r} of {frag.name!r} is locked by another receiver until it is closed or "
                "its lock expires; try again later or accept another session", entity=frag.name, partition=self.index)
        token, until = os.urandom(16), now + frag.options["lock_duration"]
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO sessions (entity, session_id, lock_token, locked_until) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (entity, session_id) DO UPDATE SET lock_token = excluded.lock_token, "
                "locked_until = excluded.locked_until", (frag.key, session_id, token, until))
            db.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL WHERE entity = ? AND subq = 0 "
                       "AND session_id = ? AND lock_token IS NOT NULL", (frag.key, session_id))
        return {"session_id": session_id, "lock_token": token, "locked_until": until}

    def _next_free_session(self, key: str, now: float) -> str | None:
        locked = {sid for (sid,) in self.db.execute(
            "SELECT session_id FROM sessions WHERE entity = ? AND locked_until > ?", (key, now))}
        cursor = self.db.execute(
            f"SELECT session_id FROM messages WHERE entity = ? AND subq = 0 AND state = 0 AND session_id IS NOT NULL "
            f"AND {_UNLOCKED} ORDER BY seq", (key, now))
        for (sid,) in cursor:
            if sid not in locked:
                return str(sid)
        return None

    def renew_session(self, entity: str, session_id: str, token: bytes) -> float:
        """Extend a held session lock (and its messages' locks) by the entity's lock duration."""
        frag = self._fragment(entity)
        now = self.clock.now()
        self._held_session(frag, session_id, token, now)
        until = now + frag.options["lock_duration"]
        with self.store.transaction() as db:
            db.execute("UPDATE sessions SET locked_until = ? WHERE entity = ? AND session_id = ?",
                       (until, frag.key, session_id))
            db.execute("UPDATE messages SET locked_until = ? WHERE entity = ? AND subq = 0 AND session_id = ? "
                       "AND lock_token IS NOT NULL", (until, frag.key, session_id))
        return until

    def release_session(self, entity: str, session_id: str, token: bytes) -> None:
        """Give a session back; the messages it received but did not settle become available again.

        Their deliveries were counted when they were received, so the next delivery of each has a
        higher count (messages a gateway cached but never handed out are released one by one
        beforehand, without counting)."""
        frag = self._fragment(entity)
        row = self.db.execute("SELECT lock_token FROM sessions WHERE entity = ? AND session_id = ?",
                              (frag.key, session_id)).fetchone()
        if row is None or row[0] != token:
            return
        with self.store.transaction() as db:
            db.execute("UPDATE sessions SET lock_token = NULL, locked_until = NULL WHERE entity = ? AND session_id = ?",
                       (frag.key, session_id))
            db.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL WHERE entity = ? AND subq = 0 "
                       "AND session_id = ? AND lock_token IS NOT NULL", (frag.key, session_id))

    def get_session_state(self, entity: str, session_id: str, token: bytes) -> bytes | None:
        """The session's state blob (None if never set)."""
        frag = self._fragment(entity)
        self._held_session(frag, session_id, token, self.clock.now())
        row = self.db.execute("SELECT state FROM sessions WHERE entity = ? AND session_id = ?",
                              (frag.key, session_id)).fetchone()
        return None if row is None else row[0]

    def set_session_state(self, entity: str, session_id: str, token: bytes, state: bytes | None) -> None:
        """Replace the session's state blob (None clears it)."""
        frag = self._fragment(entity)
        self._held_session(frag, session_id, token, self.clock.now())
        with self.store.transaction() as db:
            db.execute("UPDATE sessions SET state = ? WHERE entity = ? AND session_id = ?", (state, frag.key, session_id))

    # ------------------------------------------------------------------ time-based work and counts

    def _activate_due(self, now: float, key: str | None = None) -> int:
        """Enqueue scheduled messages whose time has come, each with a new sequence number."""
        sql = "SELECT entity, seq, ttl FROM messages INDEXED BY messages_scheduled WHERE state = 2 AND visible_at <= ?"
        args: tuple[Any, ...] = (now,)
        if key is not None:
            sql += " AND entity = ?"
            args = (now, key)
        due = self.db.execute(sql + " ORDER BY visible_at, seq", args).fetchall()
        if not due:
            return 0
        counters = dict(self._counters)
        with self.store.transaction() as db:
            for entity, seq, ttl in due:
                partitioned = self._definitions[entity]["options"].get("enable_partitioning")
                counter = counters.get(entity, 1)
                new_seq = ((self.index << COUNTER_BITS) if partitioned else 0) | counter
                counters[entity] = counter + 1
                db.execute("UPDATE messages SET seq = ?, state = 0, enqueued_at = ?, expires_at = ? "
                           "WHERE entity = ? AND seq = ?",
                           (new_seq, now, None if ttl is None else now + ttl, entity, seq))
            for entity in {d[0] for d in due}:
                db.execute("INSERT OR REPLACE INTO counters (entity, next_seq) VALUES (?, ?)", (entity, counters[entity]))
        self._counters = counters
        return len(due)

    def housekeeping(self) -> bool:
        """Activate due scheduled messages, expire messages, prune duplicate-detection ids.

        Returns True when messages may have become available (to wake waiting receivers).
        """
        now = self.clock.now()
        since, self._last_housekeeping = self._last_housekeeping, now
        changed = self._activate_due(now) > 0
        expired = self.db.execute(
            f"SELECT entity, {_COLS} FROM messages WHERE expires_at <= ? AND subq = 0 AND state = 0 AND {_UNLOCKED}",
            (now, now)).fetchall()
        lapsed = self.db.execute(
            "SELECT 1 FROM messages WHERE locked_until > ? AND locked_until <= ? LIMIT 1", (since, now)).fetchone()
        with self.store.transaction() as db:
            for entity, *cols in expired:
                definition = self._definitions.get(entity)
                if definition is not None:
                    self._expire(db, _Fragment(entity, definition, 0), _Row(*cols))
            db.execute("DELETE FROM dedup WHERE expires_at <= ?", (now,))
        return changed or bool(expired) or lapsed is not None

    def runtime(self, entity: str) -> dict[str, Any]:
        """This partition's message counts and size for an entity."""
        frag = self._fragment(entity)
        self._activate_due(self.clock.now(), frag.key)
        counts = {"active": 0, "dead_letter": 0, "scheduled": 0, "transfer": 0, "transfer_dead_letter": 0,
                  "size": self._sizes.get(frag.key, 0)}
        for subq, state, n in self.db.execute(
                "SELECT subq, state, COUNT(*) FROM messages WHERE entity = ? GROUP BY subq, state", (frag.key,)):
            if subq == DEAD_LETTER:
                counts["dead_letter"] += n
            elif subq == TRANSFER_DEAD_LETTER:
                counts["transfer_dead_letter"] += n
            elif state == SCHEDULED:
                counts["scheduled"] += n
            else:
                counts["active"] += n
        return counts

    def integrity_check(self) -> dict[str, Any]:
        """Check the store and the engine's invariants: SQLite integrity, sizes, gap-free counters."""
        problems = []
        verdict = self.store.integrity_check()
        if verdict != "ok":
            problems.append(f"sqlite: {verdict}")
        for key, size in self.db.execute("SELECT entity, COALESCE(SUM(size), 0) FROM messages GROUP BY entity"):
            if self._sizes.get(key, 0) != size:
                problems.append(f"{key}: size counter {self._sizes.get(key, 0)} != stored {size}")
        for key, top in self.db.execute("SELECT entity, MAX(seq) FROM messages GROUP BY entity"):
            counter = top & ((1 << COUNTER_BITS) - 1)
            if counter >= self._counters.get(key, 1):
                problems.append(f"{key}: sequence {counter} not below counter {self._counters.get(key, 1)}")
        return {"ok": not problems, "problems": problems}
