"""Async transactions: `rb.Transaction`'s calls, awaited, with `async with`."""
from __future__ import annotations

from types import TracebackType

from ..client.flow import run_async
from ..client.transacting import TransactionBase


class Transaction(TransactionBase):
    """A transaction of an async namespace (`ns.transaction()`): leaving `async with` commits it,
    an exception rolls it back. The same rules as `rb.Transaction`.

    Example:
        async with ns.transaction() as txn:
            await sender.send_messages(rb.Message("out", partition_key="k"), transaction=txn)
            await receiver.complete_message(received, transaction=txn)
    """

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()

    async def commit(self) -> None:
        """Apply every operation on its partition, all or nothing (raises what stopped it)."""
        await run_async(self._link, self._commit())

    async def rollback(self) -> None:
        """Drop every operation; the messages it would have settled can be settled again."""
        self._rollback()
