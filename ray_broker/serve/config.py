"""`BrokerAdapterConfig`: where the broker is and how its task queues behave (Ray-free)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ..errors import InvalidArgumentError

Duration = timedelta | float | int
"""A duration as a timedelta or in seconds."""

MIN_LOCK_S = 5.0
MAX_LOCK_S = 300.0


def seconds(value: Duration, name: str) -> float:
    """`value` in seconds; `InvalidArgumentError` naming `name` unless it is a positive duration."""
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise InvalidArgumentError(f"BrokerAdapterConfig.{name} must be a timedelta or a number of seconds, "
                                   f"not {type(value).__name__}")
    s = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not s > 0:
        raise InvalidArgumentError(f"BrokerAdapterConfig.{name} must be positive, got {s} s")
    return s


@dataclass(frozen=True)
class BrokerAdapterConfig:
    """The `adapter_config` of a `TaskProcessorConfig` whose adapter is `BrokerTaskProcessorAdapter`.

    The adapter creates what is missing when it starts: the task queue (`queue_name`), the failed
    and unprocessable task queues when they are named, and the results queue. Queues that exist
    are used as they are (only the task queue's dead-letter forwarding is pointed at the failed
    task queue).

    Args:
        namespace: the broker namespace's name (started with `rb.start(...)` or `ray-broker start`;
            its `replicas=` and `partitions=` set how many copies and partitions every queue has).
        address: the Ray address to join when the process has no Ray yet (`rb.connect`'s).
        auth_token: the namespace's auth token, when it has one.
        enable_partitioning: create the queues partitioned (spread over the namespace's partitions).
        lock_duration: the task queue's peek-lock duration (5 s to 5 min); a running task's lock is
            renewed before it lapses, so this only bounds how soon a task of a dead replica runs again.
        max_task_duration: how long a handler may run while its lock is renewed; after that the
            lock lapses and the task is delivered again.
        result_retention: how long statuses and results are kept after they are written.
        results_queue_name: the queue keeping statuses and results (default `"<queue_name>.results"`).
        duplicate_detection_window: how long a task id is remembered, so that an enqueue retried
            with the same task id is stored once (20 s to 7 days).
        receive_wait: longest wait of one receive, in seconds: how soon a stopping consumer notices.

    Example:
        config = TaskProcessorConfig(queue_name="inference", adapter=BrokerTaskProcessorAdapter,
                                     adapter_config=BrokerAdapterConfig(namespace="shop"),
                                     max_retries=3, failed_task_queue_name="inference-failed")
    """

    namespace: str
    address: str | None = None
    auth_token: str | None = None
    enable_partitioning: bool = True
    lock_duration: Duration = timedelta(seconds=30)
    max_task_duration: Duration = timedelta(hours=1)
    result_retention: Duration = timedelta(days=1)
    results_queue_name: str | None = None
    duplicate_detection_window: Duration = timedelta(minutes=10)
    receive_wait: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace:
            raise InvalidArgumentError("BrokerAdapterConfig.namespace must name the broker namespace "
                                       f"(a non-empty string), got {self.namespace!r}")
        lock = seconds(self.lock_duration, "lock_duration")
        if not MIN_LOCK_S <= lock <= MAX_LOCK_S:
            raise InvalidArgumentError(f"BrokerAdapterConfig.lock_duration must be between {MIN_LOCK_S:g} s and "
                                       f"{MAX_LOCK_S:g} s, got {lock:g} s")
        window = seconds(self.duplicate_detection_window, "duplicate_detection_window")
        if not 20 <= window <= 7 * 86400:
            raise InvalidArgumentError("BrokerAdapterConfig.duplicate_detection_window must be between 20 s and "
                                       f"7 days, got {window:g} s")
        for name in ("max_task_duration", "result_retention", "receive_wait"):
            seconds(getattr(self, name), name)
        if self.results_queue_name is not None and not isinstance(self.results_queue_name, str):
            raise InvalidArgumentError("BrokerAdapterConfig.results_queue_name must be a queue name (str) or None")

    def results_queue(self, queue_name: str) -> str:
        """The name of the queue keeping the statuses and results of `queue_name`'s tasks."""
        return self.results_queue_name or f"{queue_name}.results"
