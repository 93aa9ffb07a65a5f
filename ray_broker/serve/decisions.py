"""What a consumer does with each delivery and each outcome, as pure functions (Ray-free).

Attempts are deliveries: a task's first run is delivery 1, and a run cut short by a lost replica
counts as an attempt too, as an abandoned one does. With `max_retries` = n a task runs at most
n + 1 times.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Container

from .codec import TaskCall, TaskDecodingError, decode_task
from .status import TaskRecord, TaskStatus

ERROR_TEXT_LIMIT = 1024
"""Longest error text kept in a record or a dead-letter description."""

UNKNOWN_TASK = "UnknownTask"
UNDECODABLE_TASK = "UndecodableTask"
MAX_RETRIES_EXCEEDED = "MaxRetriesExceeded"
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
RESULT_NOT_ENCODABLE = "ResultNotEncodable"


@dataclass(frozen=True)
class Unprocessable:
    """The delivery is no task this replica can run: park it, never run it."""

    reason: str
    description: str


@dataclass(frozen=True)
class Fail:
    """Stop trying: record FAILURE and dead-letter the task with this reason and description."""

    reason: str
    description: str


@dataclass(frozen=True)
class Retry:
    """Record RETRY and abandon the task, so it is delivered again."""

    error: str


def attempts_allowed(max_retries: int | None) -> int:
    """How many times a task may run."""
    return max(0, max_retries or 0) + 1


def describe_error(error: BaseException) -> str:
    """`"Type: message"`, cut to `ERROR_TEXT_LIMIT` characters."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= ERROR_TEXT_LIMIT else text[:ERROR_TEXT_LIMIT - 3] + "..."


def on_delivery(body: bytes, handlers: Container[str], delivery_count: int,
                max_retries: int | None) -> TaskCall | Unprocessable | Fail:
    """The task to run for a delivery, or why not: an undecodable body or an unknown task name is
    unprocessable; a task delivered more often than it may run (its runs were lost with their
    replicas) has failed."""
    try:
        call = decode_task(body)
    except TaskDecodingError as e:
        return Unprocessable(UNDECODABLE_TASK, f"the message body is not a task: {e}")
    if call.name not in handlers:
        return Unprocessable(UNKNOWN_TASK, f"no handler is registered for task {call.name!r}")
    allowed = attempts_allowed(max_retries)
    if delivery_count > allowed:
        return Fail(MAX_DELIVERY_COUNT_EXCEEDED,
                    f"task {call.name!r} was delivered {delivery_count} times and may run {allowed}: "
                    "its runs ended without an outcome (replicas lost while running it)")
    return call


def revoke(current: TaskRecord | None, now: float) -> TaskRecord | None:
    """The REVOKED record a cancel writes, or None when it is too late: the task is running or
    finished. A task not yet started (or waiting for its next attempt) is revoked and never runs."""
    if current is None or current.status in (TaskStatus.PENDING, TaskStatus.RETRY):
        return TaskRecord(TaskStatus.REVOKED, now, current.attempt if current else 0)
    return None


def after_failure(name: str, attempt: int, max_retries: int | None, error: BaseException) -> Retry | Fail:
    """Retry a failed attempt while attempts remain, else fail the task."""
    text = describe_error(error)
    allowed = attempts_allowed(max_retries)
    if attempt < allowed:
        return Retry(text)
    return Fail(MAX_RETRIES_EXCEEDED, f"task {name!r} failed {attempt} of {allowed} allowed runs; last error: {text}")


def result_not_encodable(name: str, error: BaseException) -> Fail:
    """A handler returned what cannot be stored: retrying would return it again, so fail at once."""
    return Fail(RESULT_NOT_ENCODABLE, f"task {name!r} returned a result that cannot be stored: {describe_error(error)}")
