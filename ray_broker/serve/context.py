"""`current_task()`: which task the calling handler is running (Ray-free)."""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskContext:
    """The task a handler runs: its id (the message id, the key for making effects idempotent),
    its name, and the attempt (1 for the first run; a run lost with its replica counts too)."""

    id: str
    name: str
    attempt: int


_CURRENT: ContextVar[TaskContext | None] = ContextVar("ray_broker_serve_task", default=None)


def current_task() -> TaskContext | None:
    """The task the calling handler runs, None outside a handler.

    Example:
        @task_handler(name="charge")
        def charge(self, order: dict) -> str:
            task = current_task()
            return payments.charge(order, idempotency_key=task.id)
    """
    return _CURRENT.get()


def enter(task: TaskContext) -> None:
    """Make `task` the current one in this context (the consumer does, once per run)."""
    _CURRENT.set(task)
