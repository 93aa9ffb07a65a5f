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
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

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
from ..filters import compile_rules
from ..protocol import COUNTER_BITS, DEAD_LETTER, MAIN, home_partition
from ..wire import SessionRef
from . import fanout
from .queries import DueMessage, MessageRow, Queries, row_id
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

    def extend(self, settled: Iterable[tuple[bytes, str]]) -> None:
        """Remember that each lock token was settled with its action."""
        self._pending.extend(settled)

    def savepoint(self) -> int:
        """A mark of the pending tokens, to roll back to."""
        return len(self._pending)

    def rollback(self, mark: int) -> None:
        """Forget the tokens added since `mark`."""
        del self._pending[mark:]

    def commit(self) -> None:
        """Remember the pending tokens, dropping the oldest beyond the limit."""
        self._committed.update(self._pending)
        self._pending.clear()
        while len(self._committed) > self._limit:
            self._committed.popitem(last=False)


EXPIRED, DEAD_LETTERED = "expired", "dead_lettered"
"""The events `PartitionState.on_event` is told of."""


def _ignore_event(kind: str, key: str, count: int) -> None:
    """The event listener of a partition nobody listens to."""


@dataclass(frozen=True)
class Fragment:
    """What a partition knows of one entity it hosts."""

    key: str
    """The lower-cased entity name: the key of its rows."""
    entity_id: int
    """The entity's number in this store (the high bits of its messages' row ids)."""
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

    @property
    def kind(self) -> str:
        """"queue", "topic" or "subscription"."""
        return str(self.definition["kind"])

    def row_id(self, seq: int) -> int:
        """The row id message `seq` of this fragment has (if it is one of this fragment's)."""
        return row_id(self.entity_id, seq)


class PartitionState:
    """The store, caches and shared rules of partition `index` of `partition_count`."""

    def __init__(self, index: int, partition_count: int, store: Store, clock: Clock) -> None:
        self.index = index
        self.partition_count = partition_count
        self.store = store
        self.queries = Queries(store.db)
        self.clock = clock
        q = self.queries
        stored = q.entities()
        definitions = {e.key: codec.unpackb(e.definition) for e in stored}
        self.definitions: StagedMap[str, dict[str, Any]] = StagedMap(store, definitions)
        self.entity_ids: StagedMap[str, int] = StagedMap(store, {e.key: e.id for e in stored})
        sizes = dict(q.stored_sizes())
        sizes.update({e.key: q.body_bytes(e.id) for e in stored if definitions[e.key]["kind"] == "topic"})
        self.sizes: StagedMap[str, int] = StagedMap(store, sizes)
        """Bytes stored per entity: a queue's or subscription's messages; a topic's bodies (each
        message once, however many subscriptions hold it)."""
        self.counters: StagedMap[str, int] = StagedMap(store, dict(q.counters()))
        self.settled = SettledTokens(store)
        self._subscribers: dict[str, list[fanout.Subscriber]] = {}
        self._forwarding: list[tuple[Fragment, int, str]] | None = None
        self.on_event: Callable[[str, str, int], None] = _ignore_event
        """Told `(EXPIRED or DEAD_LETTERED, entity key, message count)` as messages expire or are
        dead-lettered here (metrics listen); the store transaction may still roll back."""
        self.last_housekeeping = clock.now()
        """When the previous housekeeping round ran (or the partition opened)."""
        self.opened_at = clock.now()
        """When this partition opened (the last use of an entity not used here since)."""
        self.accessed: dict[str, float] = {}
        """When each entity (by key) last had a send, receive, settlement or session operation
        here since the partition opened: `auto_delete_on_idle` counts from the latest use on any
        partition. Kept in memory; a reopened partition counts every entity as used at its opening."""

    # ------------------------------------------------------------------ entities

    def error(self, kind: type[E], message: str, entity: str | None = None) -> E:
        """An error of `kind` raised at this partition."""
        return kind(message, entity=entity, partition=self.index)

    def not_found(self, name: str) -> MessagingEntityNotFoundError:
        """The error for an entity this partition does not hold."""
        return self.error(MessagingEntityNotFoundError,
                          f"entity {name!r} does not exist (names are case-insensitive)", name)

    def _home(self, definition: Mapping[str, Any]) -> int:
        """The partition holding the whole of a non-partitioned entity (a subscription's: its topic's)."""
        return home_partition(definition.get("topic") or definition["name"], self.partition_count)

    def fragment(self, name: str) -> Fragment:
        """The fragment of entity `name` hosted here; raises if it is absent or lives elsewhere."""
        key = name.lower()
        definition = self.definitions.get(key, None)  # type: ignore[arg-type]
        if definition is None:
            raise self.not_found(name)
        frag = self._fragment(key, definition)
        if not frag.options.get("enable_partitioning"):
            index = self._home(definition)
            if index != self.index:
                raise self.error(InvalidOperationError, f"entity {name!r} is not partitioned and lives on partition "
                                 f"{index}, not {self.index}", name)
        return frag

    def _fragment(self, key: str, definition: dict[str, Any]) -> Fragment:
        seq_base = (self.index << COUNTER_BITS) if definition["options"].get("enable_partitioning") else 0
        return Fragment(key, self.entity_ids.get(key, 0), definition, seq_base)

    def fragments_by_id(self) -> dict[int, Fragment]:
        """Every entity whose definition is here, by number (for work across entities)."""
        return {self.entity_ids.get(key, 0): self._fragment(key, definition)
                for key, definition in self.definitions.items()}

    def take_counters(self, frag: Fragment, count: int) -> int:
        """Take the next `count` sequence counters of an entity and store its counter; the first."""
        first = self.counters.get(frag.key, 1)
        self.counters.set(frag.key, first + count)
        self.queries.save_counter(frag.key, first + count)
        return first

    def check_receivable(self, frag: Fragment, subq: int = MAIN) -> None:
        """Raise unless the entity is received from (not a topic, nor a forwarding entity's main
        queue) and its status allows receiving."""
        if frag.kind == "topic":
            raise self.error(InvalidOperationError, f"{frag.name!r} is a topic: receive from one of its subscriptions "
                             "(get_subscription_receiver)", frag.name)
        if subq == MAIN and frag.options.get("forward_to"):
            raise self.error(InvalidOperationError, f"{frag.name!r} forwards its messages to "
                             f"{frag.options['forward_to']!r}: receive from there", frag.name)
        if frag.options["status"] in RECEIVE_BLOCKING:
            raise self.error(MessagingEntityDisabledError,
                             f"entity {frag.name!r} has status {frag.options['status']} and cannot be received from; "
                             "set its status to Active", frag.name)

    # ------------------------------------------------------------------ topics

    def put_definition(self, definition: dict[str, Any]) -> dict[str, Any]:
        """Store (or replace) an entity's definition, numbering a new entity."""
        key = str(definition["name"]).lower()
        entity_id = self.entity_ids.get(key, 0) or self._free_entity_id()
        try:
            with self.store.transaction():
                self.queries.put_entity(key, entity_id, codec.packb(definition))
                self.definitions.set(key, definition)
                self.entity_ids.set(key, entity_id)
        finally:
            self.definitions_changed()
        return definition

    def _free_entity_id(self) -> int:
        """The lowest entity number not in use (a deleted entity's number is free again: its
        messages went with it)."""
        used = {entity_id for _, entity_id in self.entity_ids.items()}
        return next(n for n in range(1, len(used) + 2) if n not in used)

    def definitions_changed(self) -> None:
        """Forget what was derived from the definitions (the subscribers of each topic, the
        forwarding entities)."""
        self._subscribers.clear()
        self._forwarding = None

    def forwarding(self) -> list[tuple[Fragment, int, str]]:
        """`(fragment, sub-queue, destination)` for each sub-queue hosted here that auto-forwards:
        the main queue of an entity with `forward_to`, the dead-letter queue of one with
        `forward_dead_lettered_messages_to`."""
        if self._forwarding is None:
            found = []
            for key, definition in sorted(self.definitions.items()):
                options = definition["options"]
                if not (options.get("enable_partitioning") or self._home(definition) == self.index):
                    continue
                for subq, option in ((MAIN, "forward_to"), (DEAD_LETTER, "forward_dead_lettered_messages_to")):
                    if options.get(option):
                        found.append((self._fragment(key, definition), int(subq), str(options[option])))
            self._forwarding = found
        return self._forwarding

    def subscribers(self, topic: Fragment) -> list[fanout.Subscriber]:
        """The subscriptions of a topic with their compiled rules, in name order."""
        found = self._subscribers.get(topic.key)
        if found is None:
            found = self._subscribers[topic.key] = [
                fanout.Subscriber(key, self.entity_ids.get(key, 0), definition["options"],
                                  compile_rules(definition.get("rules", ())))
                for key, definition in sorted(self.definitions.items())
                if definition["kind"] == "subscription" and definition["topic"].lower() == topic.key]
        return found

    def publish(self, topic: Fragment, incoming: list[tuple[int, Mapping[str, Any]]], now: float) -> None:
        """Deliver messages of a topic, `(counter, envelope)` each, to its subscriptions (inside a
        transaction); see `fanout`."""
        if not incoming:
            return
        plan = fanout.fan_out(topic.entity_id, topic.seq_base, topic.options["default_message_time_to_live"],
                              self.subscribers(topic), incoming, now, lambda: self.take_counters(topic, 1))
        self.queries.insert_messages(plan.rows, plan.bodies)
        keys = {sub.entity_id: sub.key for sub in self.subscribers(topic)}
        for row_id, reason, description in plan.dead_letters:
            self.dead_letter(keys[row_id >> COUNTER_BITS], row_id, 1, reason, description)
        for key, size in plan.sizes.items():
            self.sizes.add(key, size)
        self.sizes.add(topic.key, plan.body_bytes)

    def remove(self, frag: Fragment, ids: list[int], bodies: list[int], size: int) -> None:
        """Delete message rows of `frag` holding `size` bytes, and the bodies no row refers to any
        more (a subscription's shared bodies count in its topic's size)."""
        freed = self.queries.delete_messages(ids, bodies)
        self.sizes.add(frag.key, -size)
        topic = frag.definition.get("topic")
        if topic is not None and freed:
            self.sizes.add(str(topic).lower(), -freed)

    # ------------------------------------------------------------------ sessions

    def check_session(self, frag: Fragment, subq: int,
                      session: SessionRef | None) -> tuple[str, float] | tuple[None, None]:
        """Validate the receiver's session against the entity; return the session id to filter on
        and its lock expiry (both None for a receiver without a session)."""
        needs_session = bool(frag.options["requires_session"]) and subq == MAIN
        if session is None:
            if needs_session:
                raise self.error(InvalidOperationError,
                                 f"entity {frag.name!r} requires sessions: open a session receiver "
                                 "(session_id=... or NEXT_AVAILABLE_SESSION)", frag.name)
            return None, None
        if not needs_session:
            raise self.error(InvalidOperationError, f"entity {frag.name!r} does not require sessions; open a receiver "
                             "without session_id", frag.name)
        return session.session_id, self.held_session(frag, session.session_id, session.lock_token, self.clock.now())

    def held_session(self, frag: Fragment, session_id: str, token: bytes, now: float) -> float:
        """The expiry of a session lock held with `token`; `SessionLockLostError` if it is not held."""
        lock = self.queries.session_lock(frag.key, session_id)
        if lock is None or lock.lock_token != token or lock.locked_until is None or lock.locked_until <= now:
            raise self.error(SessionLockLostError, f"the lock on session {session_id!r} of {frag.name!r} expired or "
                             "was released; accept the session again", frag.name)
        return float(lock.locked_until)

    def next_free_session(self, frag: Fragment, now: float) -> str | None:
        """The session of the first available message whose session nobody holds."""
        locked = self.queries.locked_sessions(frag.key, now)
        for session_id in self.queries.sessions_with_available(frag.entity_id, now):
            if session_id not in locked:
                return session_id
        return None

    # ------------------------------------------------------------------ time-based rules (inside a transaction)

    def activate_due(self, now: float, frag: Fragment | None = None) -> int:
        """Enqueue scheduled messages whose time has come (of one entity, or all), each with a new
        sequence number."""
        due = self.queries.due(now, None if frag is None else frag.entity_id)
        if not due:
            return 0
        fragments = {frag.entity_id: frag} if frag is not None else self.fragments_by_id()
        for msg in due:
            owner = fragments[msg.entity_id]
            counter = self.take_counters(owner, 1)
            if owner.kind == "topic":
                self._publish_due(owner, msg, counter, now)
                continue
            new_seq = owner.seq_base | counter
            self.queries.activate(msg.id, owner.row_id(new_seq), new_seq, now,
                                  None if msg.ttl is None else now + msg.ttl)
        return len(due)

    def _publish_due(self, topic: Fragment, due: DueMessage, counter: int, now: float) -> None:
        """A topic's scheduled message came due: deliver it to the subscriptions under a new
        sequence number (its row and body leave the topic; the fan-out stores the body again if
        any subscription takes it). A scheduled message is never part of a run."""
        row = self.queries.message_by_id(due.id)
        (body,) = self.queries.bodies([row.body])
        self.remove(topic, [row.id], [row.body], row.size)
        envelope: dict[str, Any] = {"payload": body.payload, "size": row.size, "session_id": row.session_id}
        if due.ttl is not None:
            envelope["ttl"] = due.ttl
        self.publish(topic, [(counter, envelope)], now)

    def available_rows(self, frag: Fragment, subq: int, now: float, limit: int, session_id: str | None,
                       after: int = 0) -> list[MessageRow]:
        """Unlocked active messages with a row id above `after`, in order.

        Never-locked rows and rows whose lock has expired come from two ranges of the ready index;
        neither query walks past messages that are still locked.
        """
        free = self.queries.available(frag.entity_id, subq, after, limit, session_id)
        lapsed = self.queries.available(frag.entity_id, subq, after, limit, session_id, lapsed_before=now)
        return sorted(free + lapsed)[:limit] if lapsed else free

    def exists_available(self, frag: Fragment, subq: int, now: float, session_id: str | None) -> bool:
        """Whether a receive could take a message now."""
        return bool(self.available_rows(frag, subq, now, 1, session_id))

    def screen(self, frag: Fragment, rows: list[MessageRow], now: float) -> list[MessageRow]:
        """Expire and dead-letter what may no longer be delivered (a run as a whole: its messages
        share their expiry and delivery count); return the rest."""
        max_delivery_count = frag.options["max_delivery_count"]
        usable = []
        for row in rows:
            if row.subq == MAIN and row.expires_at is not None and row.expires_at <= now:
                self.expire(frag, row)
            elif row.subq == MAIN and row.delivery_count >= max_delivery_count:
                self.dead_letter(frag.key, row.id, row.span, "MaxDeliveryCountExceeded",
                                 f"Message could not be consumed after {row.delivery_count} delivery attempts.")
            else:
                usable.append(row)
        return usable

    def expire(self, frag: Fragment, row: MessageRow) -> None:
        """The time to live of a row's messages ran out: dead-letter them or delete them, as the
        entity says."""
        self.on_event(EXPIRED, frag.key, row.span)
        if frag.options["dead_lettering_on_message_expiration"]:
            self.dead_letter(frag.key, row.id, row.span, "TTLExpiredException",
                             "The message expired and was dead lettered.")
        else:
            self.remove(frag, [row.id], [row.body], row.size)

    def dead_letter(self, key: str, row_id: int, span: int, reason: str | None, description: str | None) -> None:
        """Move a row of `span` messages of entity `key` to its dead-letter sub-queue."""
        self.queries.dead_letter(row_id, reason, description)
        self.on_event(DEAD_LETTERED, key, span)

