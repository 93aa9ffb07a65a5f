"""The result store: every task's statuses and result, kept by the broker itself.

Records go to a session-enabled queue (`BrokerAdapterConfig.results_queue`), one session per task
id, each record a message that lives for the retention time. Reading a status locks the task's
session, peeks its records and folds them (`status.fold`); a change that depends on the current
status (starting a task, revoking it) happens under that same lock, so a cancel and a start of
one task are never interleaved. Any process attached to the namespace reads the same records.
"""
from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any, Callable

from ..errors import OperationTimeoutError, SessionCannotBeLockedError
from ..message import Message
from .codec import CONTENT_TYPE
from .status import TaskRecord, fold

PEEK_PAGE = 256
Decide = Callable[[TaskRecord | None], TaskRecord | None]


class ResultStore:
    """Reads and writes task records in `queue` of the async namespace handle `ns`, on one event loop.

    Args:
        ns: a `ray_broker.aio.Namespace`.
        queue: the results queue (session-enabled).
        retention_s: how long each record is kept.
        lock_wait_s: how long to wait for a task's session while another reader holds it.
    """

    def __init__(self, ns: Any, queue: str, retention_s: float, *, lock_wait_s: float = 15.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._ns, self._queue, self._clock = ns, queue, clock
        self._ttl = timedelta(seconds=retention_s)
        self._lock_wait_s = lock_wait_s
        self._sender = ns.get_queue_sender(queue)

    def now(self) -> float:
        """The store's clock, for records' `at`."""
        return self._clock()

    async def write(self, task_id: str, record: TaskRecord) -> None:
        """Append a record; raises `TaskEncodingError` or `MessageSizeExceededError` for a result
        that cannot be stored (nothing is written then)."""
        await self._sender.send_messages(Message(record.encode(), session_id=task_id, time_to_live=self._ttl,
                                                 content_type=CONTENT_TYPE, subject=record.status.value))

    async def read(self, task_id: str) -> TaskRecord | None:
        """The task's current record, None when the store has none."""
        current, _ = await self.update(task_id, lambda current: None)
        return current

    async def update(self, task_id: str, decide: Decide) -> tuple[TaskRecord | None, TaskRecord | None]:
        """Under the task's session lock: read the current record, write `decide(current)` unless
        it is None; returns both."""
        receiver = await self._lock(task_id)
        try:
            current = fold(await self._records(receiver))
            new = decide(current)
            if new is not None:
                await self.write(task_id, new)
            return current, new
        finally:
            await receiver.close()

    async def _lock(self, task_id: str) -> Any:
        deadline = time.monotonic() + self._lock_wait_s
        pause = 0.005
        while True:
            receiver = self._ns.get_queue_receiver(self._queue, session_id=task_id, max_wait_time=1)
            try:
                return await receiver.__aenter__()
            except SessionCannotBeLockedError:
                await receiver.close()
                if time.monotonic() > deadline:
                    raise OperationTimeoutError(
                        f"the record of task {task_id!r} stayed locked by another reader for {self._lock_wait_s:g} s; "
                        "try again", entity=self._queue) from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.2)

    @staticmethod
    async def _records(receiver: Any) -> list[TaskRecord]:
        records: list[TaskRecord] = []
        start = 0
        while True:
            page = await receiver.peek_messages(PEEK_PAGE, sequence_number=start)
            for message in page:
                try:
                    records.append(TaskRecord.decode(bytes(message.body)))
                except Exception:  # noqa: BLE001 - a foreign message in the results queue is no record
                    continue
            if len(page) < PEEK_PAGE:
                return records
            start = page[-1].sequence_number + 1

    async def close(self) -> None:
        """Close the store's sender."""
        await self._sender.close()
