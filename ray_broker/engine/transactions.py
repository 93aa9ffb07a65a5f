"""Transactions on one partition: the rules a commit is checked against, and its record.

A transaction's operations (sends and settlements, all pinned to this partition by the client)
arrive together at commit and run in one store transaction (see `PartitionEngine.commit_transaction`):
all of them take effect or none does. The commit is recorded under the transaction's id in the
same store transaction, so a retried commit (after a lost reply or a restart) answers with the
first results instead of applying the operations twice.
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import codec
from ..errors import InvalidArgumentError, InvalidOperationError, TransactionTimeoutError
from ..protocol import MAX_TRANSACTION_OPERATIONS
from ..wire import Send, Settle, TransactionOperation
from .state import PartitionState


def operation_count(operations: Sequence[TransactionOperation]) -> int:
    """How many operations a commit holds: each message sent and each settlement counts once."""
    return sum(len(op.envelopes) if isinstance(op, Send) else len(op.settlements) for op in operations)


def recorded(state: PartitionState, transaction_id: str) -> list[Any] | None:
    """The results of the transaction if it was committed here already."""
    stored = state.queries.transaction_results(transaction_id)
    return None if stored is None else list(codec.unpackb(stored))


def check(state: PartitionState, transaction_id: Any, deadline: Any, operations: Any) -> None:
    """Refuse a commit that is malformed, too large or past its deadline (epoch seconds)."""
    if not isinstance(transaction_id, str) or not transaction_id:
        raise state.error(InvalidArgumentError, f"a transaction id must be a non-empty str, got {transaction_id!r}")
    if not isinstance(operations, (list, tuple)) or not all(isinstance(op, (Send, Settle)) for op in operations):
        raise state.error(InvalidArgumentError, "a transaction's operations must be Send and Settle requests")
    count = operation_count(operations)
    if count > MAX_TRANSACTION_OPERATIONS:
        raise state.error(InvalidOperationError, f"the transaction holds {count} operations; at most "
                          f"{MAX_TRANSACTION_OPERATIONS} are allowed: split the work over several transactions")
    if state.clock.now() > float(deadline):
        raise state.error(TransactionTimeoutError, "the transaction timed out before it committed and was rolled "
                          "back; redo its operations in a new transaction")


def record(state: PartitionState, transaction_id: str, results: list[Any]) -> None:
    """Record a commit and its results (inside its store transaction)."""
    state.queries.record_transaction(transaction_id, state.clock.now(), codec.packb(results))
