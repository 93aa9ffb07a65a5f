"""Task statuses in Celery's words, and the records the result store keeps (Ray-free)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Sequence

from .codec import pack, unpack


class TaskStatus(str, Enum):
    """A task's status, named as Celery names them (a `str`, so `status == "SUCCESS"` holds)."""

    PENDING = "PENDING"
    """Unknown to the store: not started yet, or its record's retention has passed."""
    STARTED = "STARTED"
    RETRY = "RETRY"
    """An attempt failed; the task will run again."""
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    REVOKED = "REVOKED"

    @property
    def terminal(self) -> bool:
        """Whether the task will not run (again)."""
        return self in (TaskStatus.SUCCESS, TaskStatus.FAILURE, TaskStatus.REVOKED)


@dataclass(frozen=True)
class TaskRecord:
    """One status of a task as the result store keeps it.

    `result` is the handler's return value (SUCCESS); `error` is `"Type: message"` (RETRY,
    FAILURE); `attempt` is the delivery it belongs to (1 for the first run); `at` is when it was
    written (seconds since the epoch).
    """

    status: TaskStatus
    at: float
    attempt: int = 0
    result: Any = None
    error: str | None = None

    def encode(self) -> bytes:
        """The record as msgpack; `TaskEncodingError` when the result cannot be carried."""
        return pack({"s": self.status.value, "t": self.at, "a": self.attempt, "r": self.result, "e": self.error},
                    "the task's result")

    @staticmethod
    def decode(data: bytes) -> TaskRecord:
        """A record written by `encode`."""
        value = unpack(data)
        return TaskRecord(TaskStatus(value["s"]), value["t"], value["a"], value["r"], value["e"])


def counts(current: TaskRecord | None, record: TaskRecord) -> bool:
    """Whether `record`, written after records that fold to `current`, is the task's status from
    then on: a terminal status is never replaced by a non-terminal one (a duplicate delivery of
    a finished task), and a REVOKED written once the task started or finished changes nothing
    (a cancel that came too late). So a start and a cancel that race are decided by which record
    the store took first, and every reader folds them to the same answer."""
    if record.status is TaskStatus.REVOKED:
        return current is None or current.status in (TaskStatus.PENDING, TaskStatus.RETRY)
    return current is None or not current.status.terminal or record.status.terminal


def fold(records: Iterable[TaskRecord]) -> TaskRecord | None:
    """The task's status from its records in the order they were written (see `counts`)."""
    current: TaskRecord | None = None
    for record in records:
        if counts(current, record):
            current = record
    return current


def claimed(records: Sequence[TaskRecord], mine: int) -> bool:
    """Whether record `mine` (an index of `records`, in the order they were written) counts: a
    STARTED that may run the task, a REVOKED that stops it."""
    return counts(fold(records[:mine]), records[mine])
