"""The broker engine for one partition: the facade over the operation modules.

A partition hosts fragment k of each partitioned entity and the whole of each non-partitioned
entity whose home it is (a subscription lives with its topic). The engine is plain Python driven through an injectable clock; every
method commits to the store before it returns, so whatever it acknowledges survives a crash.
Times are epoch seconds; lock tokens are 16 random bytes.

The operations live in `catalog`, `enqueueing`, `delivery`, `settling`, `sessions`,
`scheduling`, `topics`, `transactions` and `outbox`, each over the shared `PartitionState`; this class is
their facade, and `operations` maps each partition request (`ray_broker.wire`) onto it.
"""
from __future__ import annotations

import sqlite3
from typing import Any, ContextManager, Iterable, Mapping, Sequence

from ..clock import Clock, SystemClock
from ..protocol import (
    ACTIVE,
    DEAD_LETTER,
    DEFERRED,
    MAIN,
    PEEK_LOCK,
    RECEIVE_AND_DELETE,
    SCHEDULED,
    TRANSFER_DEAD_LETTER,
)
from ..wire import SessionRef, Send, Settlement, TransactionOperation
from . import catalog, delivery, enqueueing, outbox, purging, scheduling, sessions, settling, topics, transactions
from .state import PartitionState
from .store import Store

__all__ = ["PartitionEngine", "ACTIVE", "DEFERRED", "SCHEDULED", "MAIN", "DEAD_LETTER", "TRANSFER_DEAD_LETTER",
           "PEEK_LOCK", "RECEIVE_AND_DELETE"]


class PartitionEngine:
    """Broker logic for partition `index` of `partition_count`, over `store`.

    Example:
        >>> from ray_broker import Message
        >>> from ray_broker.clock import ManualClock
        >>> from ray_broker.entities import normalize_queue_options
        >>> engine = PartitionEngine(0, 1, Store(None, "memory"), ManualClock())
        >>> _ = engine.create_entity({"name": "q", "kind": "queue", "options": normalize_queue_options({})})
        >>> engine.send("q", [Message("hello").to_envelope()])
        [1]
        >>> [m["sequence_number"] for m in engine.receive("q", MAIN, 10)["messages"]]
        [1]
    """

    def __init__(self, index: int, partition_count: int, store: Store, clock: Clock | None = None) -> None:
        self.state = PartitionState(index, partition_count, store, clock or SystemClock())

    @property
    def index(self) -> int:
        """This partition's index."""
        return self.state.index

    @property
    def partition_count(self) -> int:
        """How many partitions the namespace has."""
        return self.state.partition_count

    @property
    def store(self) -> Store:
        """The partition's store."""
        return self.state.store

    @property
    def db(self) -> sqlite3.Connection:
        """The store's connection."""
        return self.state.store.db

    @property
    def clock(self) -> Clock:
        """The clock the engine reads."""
        return self.state.clock

    def unit_of_work(self) -> ContextManager[sqlite3.Connection]:
        """Run several operations in one store transaction: one commit for all of them.

        Each operation inside still runs in a savepoint of its own, so one that raises undoes only
        its own writes; an exception that leaves the block undoes them all.
        """
        return self.state.store.transaction()

    # ------------------------------------------------------------------ management

    def create_entity(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        """Store a new entity definition; repeating the same creation (same incarnation) is a no-op."""
        return catalog.create_entity(self.state, definition)

    def update_entity(self, definition: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an existing entity's definition."""
        return catalog.update_entity(self.state, definition)

    def delete_entity(self, name: str) -> bool:
        """Remove an entity and everything it holds here; False if it was not here."""
        return catalog.delete_entity(self.state, name)

    def get_entity(self, name: str) -> dict[str, Any]:
        """The definition of an entity, or `MessagingEntityNotFoundError`."""
        return catalog.get_entity(self.state, name)

    def list_entities(self) -> list[dict[str, Any]]:
        """Every entity definition this partition holds, in name order."""
        return catalog.list_entities(self.state)

    def runtime(self, entity: str) -> dict[str, Any]:
        """This partition's message counts and size for an entity."""
        return catalog.runtime(self.state, entity)

    def integrity_check(self) -> dict[str, Any]:
        """Check the store and the engine's invariants: SQLite integrity, sizes, gap-free counters."""
        return catalog.integrity_check(self.state)

    def add_rule(self, subscription: str, rule: Mapping[str, Any]) -> dict[str, Any]:
        """Add a rule (`filters.rule_to_wire` form) to a subscription; see `topics.add_rule`."""
        return topics.add_rule(self.state, subscription, rule)

    def update_rule(self, subscription: str, rule: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the filter and action of a subscription's rule of that name; see `topics.replace_rule`."""
        return topics.replace_rule(self.state, subscription, rule)

    def remove_rule(self, subscription: str, name: str) -> dict[str, Any]:
        """Remove a subscription's rule by name; see `topics.remove_rule`."""
        return topics.remove_rule(self.state, subscription, name)

    # ------------------------------------------------------------------ messages

    def _used(self, entity: str) -> None:
        """Note that `entity`, if it is here, is used now (see `PartitionState.accessed`)."""
        key = entity.lower()
        if key in self.state.definitions:
            self.state.accessed[key] = self.state.clock.now()

    def send(self, entity: str, envelopes: Sequence[Mapping[str, Any]],
             producer: tuple[str, int] | None = None) -> list[int | None]:
        """Enqueue messages (or schedule those with a future scheduled time).

        Each envelope holds `payload` (encoded message), `size`, and optionally `message_id`,
        `session_id`, `partition_key`, `ttl` (seconds) and `scheduled` (epoch seconds).
        Returns each message's sequence number, or None for a dropped duplicate.

        `producer`, `(producer_id, batch_number)`, makes the send idempotent: a retry of a batch
        this partition already stored returns the first reply and stores nothing (see
        `enqueueing.send`).
        """
        self._used(entity)
        return enqueueing.send(self.state, entity, envelopes, producer)

    def cancel_scheduled(self, entity: str, sequence_numbers: Iterable[int]) -> None:
        """Delete scheduled messages; all must still be scheduled, or nothing is cancelled."""
        self._used(entity)
        scheduling.cancel_scheduled(self.state, entity, sequence_numbers)

    def receive(self, entity: str, subq: int, max_count: int, mode: str = PEEK_LOCK,
                session: SessionRef | None = None, session_seen: int | None = None) -> dict[str, Any]:
        """Take up to `max_count` available messages in sequence order: `{"messages", "more", "backlog"}`.

        See `delivery.receive`.
        """
        self._used(entity)
        return delivery.receive(self.state, entity, subq, max_count, mode, session, session_seen)

    def has_available(self, entity: str, subq: int, session_id: str | None = None, free_session: bool = False) -> bool:
        """Whether a receive could get a message now (for a session, or any unlocked session)."""
        return delivery.has_available(self.state, entity, subq, session_id, free_session)

    def settle(self, entity: str, subq: int, ops: Sequence[Settlement],
               session: SessionRef | None = None) -> list[Any]:
        """Apply settlements (under the held session lock `session`, for a session's messages).

        Returns one result per op: None on success, the new lock expiry for `renew`, or the
        `ServiceBusError` that op met (the others still apply).
        """
        self._used(entity)
        return settling.settle(self.state, entity, subq, ops, session)

    def receive_deferred(self, entity: str, subq: int, sequence_numbers: Iterable[int], mode: str = PEEK_LOCK,
                         session: SessionRef | None = None) -> list[dict[str, Any]]:
        """Receive deferred messages by sequence number (locked, or removed in receive-and-delete)."""
        self._used(entity)
        return delivery.receive_deferred(self.state, entity, subq, sequence_numbers, mode, session)

    def peek(self, entity: str, subq: int, from_sequence: int, max_count: int,
             session_id: str | None = None, to_sequence: int | None = None) -> list[dict[str, Any]]:
        """Browse messages from `from_sequence` (before `to_sequence` when given) in sequence order
        without locking them."""
        return delivery.peek(self.state, entity, subq, from_sequence, max_count, session_id, to_sequence)

    def purge(self, entity: str, subq: int, max_count: int, before: float | None = None) -> purging.PurgeBatch:
        """Remove up to `max_count` messages of a sub-queue (enqueued before `before` when given),
        locked ones too: `{"removed", "more"}`.

        See `purging.purge`.
        """
        self._used(entity)
        return purging.purge(self.state, entity, subq, max_count, before)

    # ------------------------------------------------------------------ transactions and forwarding

    def commit_transaction(self, transaction_id: str, deadline: float,
                           operations: Sequence[TransactionOperation]) -> list[Any]:
        """Apply a transaction's operations in one store transaction: all or nothing.

        Each operation is a `Send` or a `Settle` (applied as `send` and `settle` apply them); the
        results come back in order. A settlement that fails fails the whole commit, as does a
        deadline (epoch seconds) already past. A repeated commit of the same `transaction_id`
        answers with the first results.
        """
        state = self.state
        with self.unit_of_work():
            done = transactions.recorded(state, transaction_id)
            if done is not None:
                return done
            transactions.check(state, transaction_id, deadline, operations)
            results: list[Any] = []
            for op in operations:
                self._used(op.entity)
                if isinstance(op, Send):
                    results.append(enqueueing.send(state, op.entity, op.envelopes))
                    continue
                outcome = settling.settle(state, op.entity, op.subq, op.settlements, op.session)
                failed = next((r for r in outcome if isinstance(r, BaseException)), None)
                if failed is not None:
                    raise failed
                results.append(outcome)
            transactions.record(state, transaction_id, results)
        return results

    def forwards(self) -> bool:
        """Whether any entity hosted here auto-forwards."""
        return bool(self.state.forwarding())

    def take_transfer(self, limit: int) -> dict[str, Any] | None:
        """The next batch to forward (`id`, `source`, `destination`, `envelopes`), or None; see `outbox.take`."""
        transfer = outbox.take(self.state, limit)
        return None if transfer is None else vars(transfer).copy()

    def transfer_done(self, transfer_id: int) -> None:
        """The destination stored batch `transfer_id`: remove its messages here."""
        outbox.done(self.state, transfer_id)

    def transfer_failed(self, transfer_id: int, reason: str, description: str) -> None:
        """Batch `transfer_id` can never reach its destination: move it to the transfer dead-letter queue."""
        outbox.dead_letter(self.state, transfer_id, reason, description)

    # ------------------------------------------------------------------ sessions

    def accept_session(self, entity: str, session_id: str | None) -> dict[str, Any] | None:
        """Lock a session (a named one, or the next one with available messages and no holder).

        Returns `{"session_id", "lock_token", "locked_until"}`, or None when `session_id` is None
        and no session is free here.
        """
        self._used(entity)
        return sessions.accept_session(self.state, entity, session_id)

    def renew_session(self, entity: str, session_id: str, token: bytes) -> float:
        """Extend a held session lock (and its messages' locks) by the entity's lock duration."""
        self._used(entity)
        return sessions.renew_session(self.state, entity, session_id, token)

    def release_session(self, entity: str, session_id: str, token: bytes) -> None:
        """Give a session back; the messages it received but did not settle become available again."""
        sessions.release_session(self.state, entity, session_id, token)

    def list_sessions(self, entity: str, updated_after: float | None = None) -> list[str]:
        """The sessions of an entity here with active messages or a stored state, in id order; with
        `updated_after` (epoch seconds), those whose state was set after it instead."""
        return sessions.list_sessions(self.state, entity, updated_after)

    def get_session_state(self, entity: str, session_id: str, token: bytes) -> bytes | None:
        """The session's state blob (None if never set)."""
        return sessions.get_session_state(self.state, entity, session_id, token)

    def set_session_state(self, entity: str, session_id: str, token: bytes, state: bytes | None) -> None:
        """Replace the session's state blob (None clears it)."""
        self._used(entity)
        sessions.set_session_state(self.state, entity, session_id, token, state)

    # ------------------------------------------------------------------ time

    def housekeeping(self) -> bool:
        """Activate due scheduled messages, expire messages, prune duplicate-detection ids, forget
        idempotent producers idle for over an hour.

        Returns True when messages may have become available (to wake waiting receivers).
        """
        return scheduling.housekeeping(self.state)
