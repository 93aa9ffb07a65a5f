"""The result store: every task's statuses and result, kept by the broker itself.

Records go to a session-enabled queue (`BrokerAdapterConfig.results_queue`), one session per task
id (so a task's records live on one partition, in the order they were stored), each record a
message that lives for the retention time. Reading a status browses the task's records in one
call, without taking its session's lock, and folds them (`status.fold`). A record that depends on
the status (STARTED before a run, REVOKED by a cancel) is written and the records read back in
one call (`send_and_peek_session`): it counts only if the records stored before it allow it
(`status.counts`), so a start and a cancel that race are decided by the order the partition
stored them in, and every reader in every process folds them to the same answer. A task's
message (its id the task id, which places it) and its records share a partition when both
queues are partitioned, so a consumer stores a SUCCESS and completes the task in one transaction.
"""
from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any, Callable

from ..message import Message, ReceivedMessage
from .codec import CONTENT_TYPE
from .status import TaskRecord, claimed, fold

MAX_RECORDS = 10_000
"""The most records a read browses (a task has a few: one per status it went through)."""


class ResultStore:
    """Reads and writes task records in `queue` of the async namespace handle `ns`, on one event loop.

    Args:
        ns: a `ray_broker.aio.Namespace`.
        queue: the results queue (session-enabled).
        retention_s: how long each record is kept.
        clock: epoch seconds, for records' `at`.
    """

    def __init__(self, ns: Any, queue: str, retention_s: float, *, clock: Callable[[], float] = time.time) -> None:
        self._ns, self._queue, self._clock = ns, queue, clock
        self._ttl = timedelta(seconds=retention_s)
        self._sender = ns.get_queue_sender(queue)

    def now(self) -> float:
        """The store's clock, for records' `at`."""
        return self._clock()

    async def write(self, task_id: str, record: TaskRecord, transaction: Any = None) -> None:
        """Append a record (in `transaction` when given); raises `TaskEncodingError` or
        `MessageSizeExceededError` for a result that cannot be stored (nothing is written then)."""
        await self._sender.send_messages(self._message(task_id, record, uuid.uuid4().hex), transaction=transaction)

    def _message(self, task_id: str, record: TaskRecord, record_id: str) -> Message:
        return Message(record.encode(), message_id=record_id, session_id=task_id, time_to_live=self._ttl,
                       content_type=CONTENT_TYPE, subject=record.status.value)

    async def read(self, task_id: str) -> TaskRecord | None:
        """The task's current record, None when the store has none."""
        return fold(record for _, record in await self._records(task_id))

    async def claim(self, task_id: str, record: TaskRecord) -> tuple[TaskRecord | None, bool]:
        """Write `record` (a STARTED or a REVOKED) and read the task's records as they stand right
        after it, in one call to the task's partition: the task's status now, and whether `record`
        counts (`status.claimed`). A record the read does not find (its retention passed at once)
        does not count."""
        record_id = uuid.uuid4().hex
        records = self._decoded(await self._sender.send_and_peek_session(self._message(task_id, record, record_id)))
        mine = next((i for i, (message_id, _) in enumerate(records) if message_id == record_id), None)
        ordered = [r for _, r in records]
        return fold(ordered), mine is not None and claimed(ordered, mine)

    async def _records(self, task_id: str) -> list[tuple[str | None, TaskRecord]]:
        """The task's records in the order they were stored, each with its message id."""
        return self._decoded(await self._ns.peek_messages(self._queue, MAX_RECORDS, session_id=task_id))

    @staticmethod
    def _decoded(messages: list[ReceivedMessage]) -> list[tuple[str | None, TaskRecord]]:
        records: list[tuple[str | None, TaskRecord]] = []
        for message in messages:
            try:
                records.append((message.message_id, TaskRecord.decode(bytes(message.body))))
            except Exception:  # noqa: BLE001 - a foreign message in the results queue is no record
                continue
        return records

    async def close(self) -> None:
        """Close the store's sender."""
        await self._sender.close()
