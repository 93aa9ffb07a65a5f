"""The shared primitives of one partition, used by every operation module.

`PartitionState` holds the store, its queries, the clock and the cached figures (entity
definitions, bytes stored and sequence counters per entity, recently settled lock tokens). The
caches are `Participant`s of the store: what an operation changes in them is pending until its
store transaction commits, and dropped if it rolls back. Over those it offers the rules more than
one operation needs: entity fragments, status and session-lock checks, due activation of
scheduled messages, availability, expiry and dead-lettering.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, Iterator, Mapping, TypeVar

from .. import codec
from ..clock import Clock
from ..entities import RECEIVE_BLOCKING
from ..errors import (
    InvalidOperationError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    ServiceBusError,
    SessionLockLostError,
)
from ..protocol import MAIN
from ..routing import COUNTER_BITS, home_partition
from .queries import MessageRow, Queries
from .store import Store

RECENTLY_SETTLED_LIMIT = 100_000
"""How many settled lock tokens a partition remembers, so that a retried settlement succeeds."""

K = TypeVar("K")
V = TypeVar("V")
E = TypeVar("E", bound=ServiceBusError)

_UNSET = object()
_DELETED = object()


class StagedMap(Generic[K, V]):
    """A cached mapping whose changes follow the store's transactions.

    Reads see the changes of the open transaction; a commit makes them the committed state, and a
    rollback (of the transaction or of a savepoint inside it) drops those made since it began.
    Changes are allowed only inside a store transaction.
    """

    def __init__(self, store: Store, initial: Mapping[K, V]) -> None:
        self._store = store
        self._committed: dict[K, V] = dict(initial)
        self._pending: dict[K, Any] = {}
        self._journal: list[tuple[K, Any]] = []
        store.join(self)

    def get(self, key: K, default: V) -> V:
        """The value for `key`, pending changes included, or `default`."""
        value = self._pending.get(key, _UNSET)
        if value is _UNSET:
            return self._committed.get(key, default)
        return default if value is _DELETED else value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        value = self._pending.get(key, _UNSET)  # type: ignore[call-overload]
        return key in self._committed if value is _UNSET else value is not _DELETED

    def items(self) -> Iterator[tuple[K, V]]:
        """Every (key, value), pending changes included."""
        merged: dict[K, Any] = {**self._committed, **self._pending}
        return ((k, v) for k, v in merged.items() if v is not _DELETED)

    def set(self, key: K, value: V) -> None:
        """Change the value for `key` (pending until the transaction commits)."""
        self._stage(key, value)

    def add(self, key: K, delta: int) -> None:
        """Add `delta` to a numeric value (absent counts as 0)."""
        self._stage(key, self.get(key, 0) + delta)  # type: ignore[arg-type, operator]

    def pop(self, key: K) -> None:
        """Remove `key` (pending until the transaction commits)."""
        self._stage(key, _DELETED)

    def _stage(self, key: K, value: Any) -> None:
        if not self._store.in_transaction:
            raise RuntimeError("cached partition figures change only inside a store transaction")
        self._journal.append((key, self._pending.get(key, _UNSET)))
        self._pending[key] = value

    def savepoint(self) -> int:
        """A mark of the pending changes, to roll back to."""
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Drop the changes made since `mark`."""
        while len(self._journal) > mark:
            key, previous = self._journal.pop()
            if previous is _UNSET:
                del self._pending[key]
            else:
                self._pending[key] = previous

    def commit(self) -> None:
        """Make the pending changes the committed state."""
        for key, value in self._pending.items():
            if value is _DELETED:
                self._committed.pop(key, None)
            else:
                self._committed[key] = value
        self._pending.clear()
        self._journal.clear()


class SettledTokens:
    """The lock tokens settled lately (the most recent `RECENTLY_SETTLED_LIMIT`) and how.

    In memory only: a retry of a settlement whose reply was lost finds its token here and
    succeeds. Tokens settled in a transaction count from its commit.
    """

    def __init__(self, store: Store, limit: int = RECENTLY_SETTLED_LIMIT) -> None:
        self._limit = limit
        self._committed: OrderedDict[bytes, str] = OrderedDict()
        self._pending: list[tuple[bytes, str]] = []
        store.join(self)

    def action(self, token: bytes) -> str | None:
        """How the lock `token` was settled, if it was settled lately."""
        for pending, action in reversed(self._pending):
            if pending == token:
                return action
        return self._committed.get(token)

    def add(self, token: bytes, action: str) -> None:
        """Remember that the lock `token` was settled with `action`."""
        self._pending.append((token, action))

    def savepoint(self) -> int:
        """A mark of the pending tokens, to roll back to."""
        return len(self._pending)

    def rollback(self, mark: int) -> None:
        """Forget the tokens added since `mark`."""
        del self._pending[mark:]

    def commit(self) -> None:
        """Remember the pending tokens, dropping the oldest beyond the limit."""
        for token, action in self._pending:
            self._committed[token] = action
        self._pending.clear()
        while len(self._committed) > self._limit:
            self._committed.popitem(last=False)


@dataclass(frozen=True)
class Fragment:
    """What a partition knows of one entity it hosts."""

    key: str
    """The lower-cased entity name: the key of its rows."""
    definition: dict[str, Any]
    seq_base: int
    """The bits above the counter in this fragment's sequence numbers."""

    @property
    def name(self) -> str:
        """The entity's name as created."""
        return str(self.definition["name"])

    @property
    def options(self) -> dict[str, Any]:
        """The entity's normalized options."""
        return self.definition["options"]  # type: ignore[no-any-return]


class PartitionState:
    """The store, caches and shared rules of partition `index` of `partition_count`."""

    def __init__(self, index: int, partition_count: int, store: Store, clock: Clock) -> None:
        self.index = index
        self.partition_count = partition_count
        self.store = store
        self.queries = Queries(store.db)
        self.clock = clock
        q = self.queries
        self.definitions: StagedMap[str, dict[str, Any]] = StagedMap(
            store, {d.key: codec.unpackb(d.definition) for d in q.definitions()})
        self.sizes: StagedMap[str, int] = StagedMap(store, dict(q.stored_sizes()))
        self.counters: StagedMap[str, int] = StagedMap(store, dict(q.counters()))
        self.settled = SettledTokens(store)
        self.last_housekeeping = clock.now()
        """When the previous housekeeping round ran (or the partition opened)."""

    # ------------------------------------------------------------------ entities

    def error(self, kind: type[E], message: str, entity: str | None = None) -> E:
        """An error of `kind` raised at this partition."""
        return kind(message, entity=entity, partition=self.index)

    def not_found(self, name: str) -> MessagingEntityNotFoundError:
        """The error for an entity this partition does not hold."""
        return self.error(MessagingEntityNotFoundError,
                          f"entity {name!r} does not exist; create it first (names are case-insensitive)", name)

    def fragment(self, name: str) -> Fragment:
        """The fragment of entity `name` hosted here; raises if it is absent or lives elsewhere."""
        key = name.lower()
        definition = self.definitions.get(key, None)  # type: ignore[arg-type]
        if definition is None:
            raise self.not_found(name)
        return Fragment(key, definition, self.seq_base(key, definition))

    def seq_base(self, key: str, definition: Mapping[str, Any]) -> int:
        """The high bits of an entity's sequence numbers here; raises if a non-partitioned entity
        lives on another partition."""
        if definition["options"].get("enable_partitioning"):
            return self.index << COUNTER_BITS
        home = home_partition(key, self.partition_count)
        if home != self.index:
            raise self.error(InvalidOperationError, f"entity {definition['name']!r} is not partitioned and lives on "
                             f"partition {home}, not {self.index}", str(definition["name"]))
        return 0

    def next_sequence_number(self, key: str, seq_base: int) -> int:
        """Take the next sequence number of an entity (its counter is saved by `save_counter`)."""
        counter = self.counters.get(key, 1)
        self.counters.set(key, counter + 1)
        return seq_base | counter

    def save_counter(self, key: str) -> None:
        """Store an entity's sequence counter."""
        self.queries.save_counter(key, self.counters.get(key, 1))

    def check_receivable(self, frag: Fragment) -> None:
        """Raise unless the entity's status allows receiving."""
        if frag.options["status"] in RECEIVE_BLOCKING:
            raise self.error(MessagingEntityDisabledError,
                             f"entity {frag.name!r} has status {frag.options['status']} and cannot be received from; "
                             "set its status to Active", frag.name)

    # ------------------------------------------------------------------ sessions

    def check_session(self, frag: Fragment, subq: int, session: tuple[str, bytes] | None) -> str | None:
        """Validate the receiver's session against the entity; return the session id to filter on."""
        needs_session = bool(frag.options["requires_session"]) and subq == MAIN
        if session is None:
            if needs_session:
                raise self.error(InvalidOperationError,
                                 f"entity {frag.name!r} requires sessions: open a session receiver "
                                 "(session_id=... or NEXT_AVAILABLE_SESSION)", frag.name)
            return None
        if not needs_session:
            raise self.error(InvalidOperationError, f"entity {frag.name!r} does not require sessions; open a receiver "
                             "without session_id", frag.name)
        session_id, token = session
        self.held_session(frag, session_id, token, self.clock.now())
        return session_id

    def held_session(self, frag: Fragment, session_id: str, token: bytes, now: float) -> float:
        """The expiry of a session lock held with `token`; `SessionLockLostError` if it is not held."""
        lock = self.queries.session_lock(frag.key, session_id)
        if lock is None or lock.lock_token != token or lock.locked_until is None or lock.locked_until <= now:
            raise self.error(SessionLockLostError, f"the lock on session {session_id!r} of {frag.name!r} expired or "
                             "was released; accept the session again", frag.name)
        return float(lock.locked_until)

    def session_until(self, key: str, session_id: str) -> float:
        """The lock expiry of a session known to be locked."""
        lock = self.queries.session_lock(key, session_id)
        assert lock is not None and lock.locked_until is not None
        return float(lock.locked_until)

    def next_free_session(self, key: str, now: float) -> str | None:
        """The session of the first available message whose session nobody holds."""
        locked = self.queries.locked_sessions(key, now)
        for session_id in self.queries.sessions_with_available(key, now):
            if session_id not in locked:
                return session_id
        return None

    # ------------------------------------------------------------------ time-based rules

    def activate_due(self, now: float, key: str | None = None) -> int:
        """Enqueue scheduled messages whose time has come, each with a new sequence number."""
        due = self.queries.due(now, key)
        if not due:
            return 0
        with self.store.transaction():
            for msg in due:
                definition = self.definitions.get(msg.entity, None)  # type: ignore[arg-type]
                base = (self.index << COUNTER_BITS) if definition["options"].get("enable_partitioning") else 0
                new_seq = self.next_sequence_number(msg.entity, base)
                self.queries.activate(msg.entity, msg.seq, new_seq, now, None if msg.ttl is None else now + msg.ttl)
            for entity in {msg.entity for msg in due}:
                self.save_counter(entity)
        return len(due)

    def available_rows(self, key: str, subq: int, now: float, limit: int, session_id: str | None,
                       after: int = 0) -> list[MessageRow]:
        """Unlocked active messages with a sequence number above `after`, in order.

        Never-locked rows come from the ready index in sequence order; rows whose lock has expired
        come from the lock-expiry index. Neither query walks past messages that are still locked.
        """
        free = self.queries.available(key, subq, after, limit, session_id)
        lapsed = self.queries.available(key, subq, after, limit, session_id, lapsed_before=now)
        return sorted(free + lapsed, key=lambda r: r.seq)[:limit] if lapsed else free

    def exists_available(self, key: str, subq: int, now: float, session_id: str | None) -> bool:
        """Whether a receive could take a message now."""
        return bool(self.available_rows(key, subq, now, 1, session_id))

    def screen(self, frag: Fragment, rows: list[MessageRow], now: float) -> list[MessageRow]:
        """Expire and dead-letter what may no longer be delivered; return the rest."""
        usable = []
        for row in rows:
            if row.subq == MAIN and row.expires_at is not None and row.expires_at <= now:
                self.expire(frag, row)
            elif row.subq == MAIN and row.delivery_count >= frag.options["max_delivery_count"]:
                self.dead_letter(frag.key, row.seq, "MaxDeliveryCountExceeded",
                                 f"Message could not be consumed after {row.delivery_count} delivery attempts.")
            else:
                usable.append(row)
        return usable

    def expire(self, frag: Fragment, row: MessageRow) -> None:
        """A message's time to live ran out: dead-letter it or delete it, as the entity says."""
        if frag.options["dead_lettering_on_message_expiration"]:
            self.dead_letter(frag.key, row.seq, "TTLExpiredException", "The message expired and was dead lettered.")
        else:
            self.queries.delete_messages(frag.key, [row.seq])
            self.sizes.add(frag.key, -row.size)

    def dead_letter(self, key: str, seq: int, reason: str | None, description: str | None) -> None:
        """Move a message to the dead-letter sub-queue."""
        self.queries.dead_letter(key, seq, reason, description)


def message_record(row: MessageRow, *, with_lock: bool = True) -> dict[str, Any]:
    """The dict a receiver turns into a `ReceivedMessage`."""
    rec: dict[str, Any] = {
        "payload": row.payload,
        "sequence_number": row.seq,
        "enqueued_sequence_number": row.enqueued_seq or row.seq,
        "enqueued_time": row.enqueued_at,
        "expires_at": row.expires_at,
        "delivery_count": row.delivery_count,
        "state": row.state,
    }
    if row.visible_at is not None:
        rec["scheduled_enqueue_time"] = row.visible_at
    if row.dl_reason is not None or row.dl_description is not None:
        rec["dead_letter_reason"] = row.dl_reason
        rec["dead_letter_error_description"] = row.dl_description
    if row.dl_source is not None:
        rec["dead_letter_source"] = row.dl_source
    if with_lock and row.lock_token is not None:
        rec["lock_token"] = row.lock_token
        rec["locked_until"] = row.locked_until
    return rec
