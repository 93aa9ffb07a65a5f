"""Transactions: sends and settlements applied together on one partition, or not at all."""
from __future__ import annotations

from types import TracebackType

from .flow import run
from .transacting import TransactionBase


class Transaction(TransactionBase):
    """A transaction of a namespace (`ns.transaction()`): leaving `with` commits it, an exception
    rolls it back.

    Sends (`send_messages(..., transaction=txn)`) and settlements (`complete_message`,
    `abandon_message`, `defer_message`, `dead_letter_message`, `renew_message_lock`, each with
    `transaction=txn`) join it; receiving does not. Every operation must resolve to one partition
    key (session id, else partition key, else message id) and land on one partition; at most 100
    operations; it must commit within 2 minutes of its first operation.

    Example:
        with ns.transaction() as txn:
            sender.send_messages(rb.Message("out", partition_key="k"), transaction=txn)
            receiver.complete_message(received, transaction=txn)
    """

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def commit(self) -> None:
        """Apply every operation on its partition, all or nothing (raises what stopped it)."""
        run(self._link, self._commit())

    def rollback(self) -> None:
        """Drop every operation; the messages it would have settled can be settled again."""
        self._rollback()
