"""What a transaction is without I/O: its operations, the partition key and partition they are
pinned to, its limits, and its commit as a flow.

A transaction gathers sends and settlements here, in the caller, checking each at the call that
makes it; nothing reaches the broker before the commit, which carries them all to the one
partition they are pinned to, to be applied in one store transaction (all or nothing). Leaving
it without a commit (rollback, an exception, or 2 minutes after its first operation) drops them.
The sync `Transaction` and the async one (`ray_broker.aio`) run these flows; imports no Ray.
"""
from __future__ import annotations

import uuid
from typing import Any, Mapping, Sequence

from ..clock import Clock, SystemClock
from ..errors import InvalidArgumentError, InvalidOperationError, TransactionTimeoutError
from ..message import ReceivedMessage
from ..protocol import MAX_TRANSACTION_OPERATIONS, TRANSACTION_TIMEOUT_S
from ..router_requests import CommitTransactionRequest, DefinitionRequest
from ..routing import planner
from ..sku import Sku
from ..wire import Send, SessionRef, Settle, Settlement, TransactionOperation
from .core import apply_settlement
from .flow import Flow, Link, route

COMMIT_TIMEOUT_S = 60.0
"""How long a commit waits for its partition (retried while the partition restarts)."""
DEFINITION_TIMEOUT_S = 30.0
_KEY_FIELDS = (("session_id", "session"), ("partition_key", "partition key"), ("message_id", "message id"))


def transaction_key(fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """The key that pins a message to a partition in a transaction, `(key, what it is)`: its
    session id, else its partition key, else its message id; None when it has none."""
    for field, what in _KEY_FIELDS:
        value = fields.get(field)
        if value is not None:
            return str(value), what
    return None


def check_transaction(value: Any) -> TransactionBase:
    """`value` if it is a transaction (what `ns.transaction()` returns), else `InvalidArgumentError`."""
    if not isinstance(value, TransactionBase):
        raise InvalidArgumentError(f"transaction must come from ns.transaction(), got {type(value).__name__}")
    return value


class TransactionBase:
    """A transaction's state and flows; its subclasses add `commit`, `rollback` and `with`.

    Args:
        link: the namespace link the commit goes through.
        sku: the namespace's tier.
        partition_count: the namespace's partition count (to pin operations to a partition).
        clock: epoch seconds (injectable for tests).
    """

    def __init__(self, link: Link, sku: Sku, partition_count: int, clock: Clock | None = None) -> None:
        self._link = link
        self._sku = sku
        self._partition_count = partition_count
        self._clock = clock or SystemClock()
        self.transaction_id = uuid.uuid4().hex
        self._key: tuple[str, str] | None = None
        self._partition: tuple[int, str] | None = None
        self._deadline: float | None = None
        self._operations: list[TransactionOperation] = []
        self._operation_count = 0
        self._settlements: list[tuple[ReceivedMessage, str]] = []
        self._definitions: dict[str, dict[str, Any]] = {}
        self._outcome: str | None = None

    @property
    def partition_key(self) -> str | None:
        """The key every operation resolves to (None before the first operation)."""
        return None if self._key is None else self._key[0]

    @property
    def operation_count(self) -> int:
        """How many operations (messages sent, settlements) the transaction holds."""
        return self._operation_count

    # ------------------------------------------------------------------ checks

    def _check_usable(self, link: Link) -> None:
        """Raise unless operations can still join: open, within its time, of this namespace."""
        if link is not self._link:
            raise InvalidOperationError("this transaction belongs to another namespace handle; use the transaction "
                                        "of the handle whose senders and receivers it holds")
        if self._outcome is not None:
            raise InvalidOperationError(f"the transaction was {self._outcome}; start a new one with ns.transaction()")
        if self._deadline is not None and self._clock.now() > self._deadline:
            self._drop("rolled back")
            raise TransactionTimeoutError(
                f"the transaction was not committed within {TRANSACTION_TIMEOUT_S:g} s of its first operation and "
                "was rolled back; redo its operations in a new transaction")

    def _pin(self, keys: Sequence[tuple[str, str] | None], partition: int, entity: str, what: str) -> None:
        """Pin the transaction to the keys and partition of an operation, or raise naming both sides."""
        pinned = self._key
        for key in keys:
            if key is None:
                raise InvalidOperationError(
                    f"{what} has no partition key: in a transaction every message needs a session_id, partition_key "
                    "or message_id, and all must resolve to the same key")
            if pinned is None:
                pinned = key
            elif key[0] != pinned[0]:
                if key[1] == pinned[1] == "session":
                    raise InvalidOperationError(
                        f"the transaction is pinned to session {pinned[0]!r}; {what} is of session {key[0]!r}: a "
                        "transaction holds one session")
                raise InvalidOperationError(
                    f"the transaction is pinned to partition key {pinned[0]!r} ({pinned[1]}); {what} has key "
                    f"{key[0]!r} ({key[1]}): every operation of a transaction must resolve to the same key")
        if self._partition is not None and self._partition[0] != partition:
            raise InvalidOperationError(
                f"{what} lands on partition {partition} ({entity!r}), but the transaction's operations land on "
                f"partition {self._partition[0]} ({self._partition[1]!r}): a transaction spans one partition")
        if self._operation_count + len(keys) > MAX_TRANSACTION_OPERATIONS:
            raise InvalidOperationError(
                f"the transaction would hold {self._operation_count + len(keys)} operations; at most "
                f"{MAX_TRANSACTION_OPERATIONS} are allowed: commit and start another")
        self._key = pinned
        if self._partition is None:
            self._partition = (partition, entity)
            self._deadline = self._clock.now() + TRANSACTION_TIMEOUT_S
        self._operation_count += len(keys)

    def _definition(self, entity: str) -> Flow[dict[str, Any]]:
        definition = self._definitions.get(entity.lower())
        if definition is None:
            definition = yield route(DefinitionRequest(entity), timeout=DEFINITION_TIMEOUT_S)
            self._definitions[entity.lower()] = definition
        return definition

    # ------------------------------------------------------------------ operations

    def _stage_send(self, link: Link, entity: str, envelopes: list[dict[str, Any]]) -> Flow[None]:
        """Add a send of `envelopes` (checked as the entity requires) to the transaction."""
        self._check_usable(link)
        definition = yield from self._definition(entity)
        planner.check_send(definition, envelopes, self._sku.max_message_bytes, self._sku.name)
        keys = [transaction_key(env) for env in envelopes]
        first = keys[0]
        partition = -1 if first is None else planner.key_partition(definition, first[0], self._partition_count)
        self._pin(keys, partition, definition["name"], f"a message sent to {definition['name']!r}")
        self._operations.append(Send(definition["name"], envelopes))

    def _stage_settlement(self, link: Link, entity: str, subq: int, session: SessionRef | None,
                          message: ReceivedMessage, op: Settlement) -> Flow[None]:
        """Add the settlement `op` of `message` (checked by its receiver) to the transaction; the
        message counts as settled until the transaction rolls back."""
        self._check_usable(link)
        definition = yield from self._definition(entity)
        partition = planner.partition_of_sequence(definition, message.sequence_number, self._partition_count)
        key = transaction_key({field: getattr(message, field) for field, _ in _KEY_FIELDS})
        self._pin([key], partition, definition["name"],
                  f"message {message.sequence_number} of {definition['name']!r}")
        self._operations.append(Settle(definition["name"], subq, [op], session))
        self._settlements.append((message, op.action))
        if op.action != "renew":
            message._settled = True

    # ------------------------------------------------------------------ outcome

    def _commit(self) -> Flow[None]:
        """Apply every operation on the pinned partition, all or nothing."""
        self._check_usable(self._link)
        if not self._operations:
            self._outcome = "committed"
            return
        assert self._partition is not None and self._deadline is not None
        try:
            results = yield route(CommitTransactionRequest(self._partition[0], self.transaction_id, self._deadline,
                                                           self._operations, COMMIT_TIMEOUT_S), timeout=COMMIT_TIMEOUT_S)
        except BaseException:
            self._drop("rolled back")
            raise
        self._outcome = "committed"
        settled = iter(self._settlements)
        for op, result in zip(self._operations, results):
            if isinstance(op, Settle):
                message, action = next(settled)
                apply_settlement(message, action, result[0])

    def _rollback(self) -> None:
        """Drop every operation (idempotent; a committed transaction stays committed)."""
        if self._outcome is None:
            self._drop("rolled back")

    def _drop(self, outcome: str) -> None:
        for message, action in self._settlements:
            if action != "renew":
                message._settled = False
        self._operations.clear()
        self._settlements.clear()
        self._outcome = outcome
