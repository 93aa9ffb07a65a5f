"""`BrokerTaskProcessorAdapter`: Ray Serve's `TaskProcessorAdapter` on a ray_broker namespace."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ray.serve._private.constants import DEFAULT_CONSUMER_CONCURRENCY
from ray.serve.schema import TaskProcessorAdapter, TaskProcessorConfig, TaskResult

from ..errors import InvalidArgumentError
from .config import BrokerAdapterConfig, seconds
from .consumer import Consumer
from .decisions import revoke
from .enqueue import task_message
from .ids import StickyTaskIds
from .loop import LoopThread
from .queues import ensure_queues
from .results import ResultStore
from .status import TaskRecord, TaskStatus

log = logging.getLogger("ray.serve")
STOP_GRACE_S = 5.0


def task_result(task_id: str, record: TaskRecord | None) -> TaskResult:
    """Serve's `TaskResult` for a record: `result` is the handler's return value for SUCCESS and the
    error text (`"Type: message"`) for RETRY and FAILURE."""
    if record is None:
        return TaskResult(id=task_id, status=TaskStatus.PENDING.value, result=None)
    value = record.result if record.status is TaskStatus.SUCCESS else record.error
    return TaskResult(id=task_id, status=record.status.value, created_at=record.at, result=value)


class BrokerTaskProcessorAdapter(TaskProcessorAdapter):
    """Ray Serve asynchronous inference on a ray_broker namespace: no second broker to run.

    Tasks are messages of `queue_name` (message id = task id, msgpack body; no pickle crosses the
    broker); each Serve replica's consumer receives them with peek-lock, `consumer_concurrency` at
    a time, renews their locks while handlers run, completes them on return, abandons them on an
    exception until `max_retries`, then dead-letters them (forwarded to `failed_task_queue_name`).
    Statuses and results (Celery's words) are kept by the broker for `result_retention`. Every
    method has an async twin (`enqueue_task_async`, ...). Delivery is at-least-once.

    Example:
        config = TaskProcessorConfig(queue_name="inference", adapter=BrokerTaskProcessorAdapter,
                                     adapter_config=BrokerAdapterConfig(namespace="shop"),
                                     max_retries=3, failed_task_queue_name="inference-failed")
        adapter = instantiate_adapter_from_config(config)         # a producer, e.g. an ingress
        task = adapter.enqueue_task_sync("embed", args=["some text"])
        adapter.get_task_status_sync(task.id).status             # "PENDING" ... "SUCCESS"
    """

    def __init__(self, config: TaskProcessorConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(config.adapter_config, BrokerAdapterConfig):
            raise InvalidArgumentError("TaskProcessorConfig.adapter_config must be a ray_broker.serve.BrokerAdapterConfig "
                                       f"for BrokerTaskProcessorAdapter, got {type(config.adapter_config).__name__}")
        if config.max_retries is not None and config.max_retries < 0:
            raise InvalidArgumentError(f"TaskProcessorConfig.max_retries must be >= 0, got {config.max_retries}")
        self._config = config
        self._broker: BrokerAdapterConfig = config.adapter_config
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._concurrency = DEFAULT_CONSUMER_CONCURRENCY
        self._loop: LoopThread | None = None
        self._consumer: Consumer | None = None
        self._sync: Any = None
        self._sync_lock = threading.Lock()

    # ------------------------------------------------------------------ setup

    def initialize(self, consumer_concurrency: int = DEFAULT_CONSUMER_CONCURRENCY) -> None:
        """Attach to the namespace and create the queues that are missing."""
        if isinstance(consumer_concurrency, bool) or not isinstance(consumer_concurrency, int) \
                or consumer_concurrency < 1:
            raise InvalidArgumentError(f"consumer_concurrency must be an int >= 1, got {consumer_concurrency!r}")
        self._concurrency = consumer_concurrency
        if self._loop is None:
            loop = LoopThread(f"ray_broker.serve:{self._config.queue_name}")
            loop.run(self._open())
            self._loop = loop

    async def _open(self) -> None:
        import ray_broker.aio as rba

        b, c = self._broker, self._config
        self._ns = await rba.connect(b.namespace, address=b.address, auth_token=b.auth_token)
        await ensure_queues(self._ns, c.queue_name, b, max_retries=c.max_retries,
                            failed=c.failed_task_queue_name, unprocessable=c.unprocessable_task_queue_name)
        self._store = ResultStore(self._ns, b.results_queue(c.queue_name), seconds(b.result_retention,
                                                                                  "result_retention"))
        self._sender = self._ns.get_queue_sender(c.queue_name)
        self._ids = StickyTaskIds(self._ns.partition_count)

    def _ready(self) -> LoopThread:
        if self._loop is None:
            self.initialize(self._concurrency)
        assert self._loop is not None
        return self._loop

    def register_task_handle(self, func: Callable[..., Any], name: Optional[str] = None) -> None:
        """Register `func` (sync or async) as the handler of tasks named `name` (default its name)."""
        if not callable(func):
            raise InvalidArgumentError(f"a task handler must be callable, got {type(func).__name__}")
        name = name or getattr(func, "__name__", None)
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("a task handler needs a name: pass name=")
        self._handlers[name] = func

    # ------------------------------------------------------------------ producer side

    def enqueue_task_sync(self, task_name: str, args: Optional[Any] = None, kwargs: Optional[Any] = None,
                          **options: Any) -> TaskResult:
        """Send one task; options: `task_id` (an enqueue repeated with one id is stored once),
        `countdown` (s) or `eta` (aware datetime). Bad arguments raise before anything is sent."""
        message = task_message(task_name, args, kwargs, options, new_id=self._new_id)
        self._sync_sender().send_messages(message)
        return TaskResult(id=message.message_id, status=TaskStatus.PENDING.value, created_at=time.time(), result=None)

    def _new_id(self) -> str:
        """A task id for an enqueue that names none (`ids.StickyTaskIds`)."""
        self._ready()
        return self._ids()

    def _sync_sender(self) -> Any:
        """A sender of the sync client for the task queue: a sync enqueue is sent on the caller's
        thread (one partition call there), not handed to the adapter's loop and back."""
        self._ready().check_outside()
        with self._sync_lock:
            if self._sync is None:
                import ray_broker as rb

                self._sync = rb.Namespace(self._ns.config).get_queue_sender(self._config.queue_name)
            return self._sync

    async def enqueue_task_async(self, task_name: str, args: Optional[Any] = None, kwargs: Optional[Any] = None,
                                 **options: Any) -> TaskResult:
        """`enqueue_task_sync`, awaited."""
        message = task_message(task_name, args, kwargs, options, new_id=self._new_id)
        await self._ready().run_async(self._sender.send_messages(message))
        return TaskResult(id=message.message_id, status=TaskStatus.PENDING.value, created_at=time.time(), result=None)

    def get_task_status_sync(self, task_id: str) -> TaskResult:
        """The task's status (PENDING, STARTED, RETRY, SUCCESS, FAILURE, REVOKED) and its result or error."""
        return task_result(task_id, self._ready().run(self._store.read(task_id)))

    async def get_task_status_async(self, task_id: str) -> TaskResult:
        """`get_task_status_sync`, awaited."""
        return task_result(task_id, await self._ready().run_async(self._store.read(task_id)))

    def cancel_task_sync(self, task_id: str) -> TaskResult:
        """Revoke a task that has not started (or waits for its next attempt): it never runs. A
        running or finished task is left alone. Returns the status after the cancel."""
        return self._ready().run(self._cancel(task_id))

    async def cancel_task_async(self, task_id: str) -> TaskResult:
        """`cancel_task_sync`, awaited."""
        return await self._ready().run_async(self._cancel(task_id))

    async def _cancel(self, task_id: str) -> TaskResult:
        current = await self._store.read(task_id)
        revoked = revoke(current, self._store.now())
        if revoked is None:   # running or finished: too late
            return task_result(task_id, current)
        now, _ = await self._store.claim(task_id, revoked)
        return task_result(task_id, now)

    # ------------------------------------------------------------------ consumer side

    def start_consumer(self, **kwargs: Any) -> None:
        """Start receiving and running tasks in this process (a Serve replica); idempotent."""
        loop = self._ready()
        if self._consumer is not None and self._consumer.alive:
            return
        if not self._handlers:
            log.warning("task consumer of %r starts with no task handlers: every task goes to the unprocessable queue",
                        self._config.queue_name)
        b, c = self._broker, self._config
        self._consumer = Consumer(self._ns, self._store, c.queue_name, self._handlers, concurrency=self._concurrency,
                                  max_retries=c.max_retries, unprocessable_queue=c.unprocessable_task_queue_name,
                                  receive_wait=b.receive_wait,
                                  max_task_s=seconds(b.max_task_duration, "max_task_duration"))
        loop.spawn(self._consumer.run())

    def stop_consumer(self, timeout: float = 10.0) -> None:
        """Stop receiving: fetched tasks not started go back at once (uncounted); running ones get
        `timeout` s to finish, then are abandoned so that another replica runs them."""
        if self._consumer is None or self._loop is None:
            return
        consumer, self._consumer = self._consumer, None
        self._loop.run(consumer.stop(timeout), timeout + self._broker.receive_wait + STOP_GRACE_S)

    # ------------------------------------------------------------------ observability

    def get_metrics_sync(self) -> Dict[str, Any]:
        """`queue_length` (active messages of the task queue) and the other counts of its runtime
        properties, the failed queue's length, and this process's consumer counts."""
        return self._ready().run(self._metrics())

    async def get_metrics_async(self) -> Dict[str, Any]:
        """`get_metrics_sync`, awaited."""
        return await self._ready().run_async(self._metrics())

    async def _metrics(self) -> Dict[str, Any]:
        c = self._config
        props = await self._ns.get_queue_runtime_properties(c.queue_name)
        metrics: Dict[str, Any] = {
            "queue_name": c.queue_name, "queue_length": props.active_message_count,
            "scheduled": props.scheduled_message_count, "dead_letter": props.dead_letter_message_count,
            "availability": props.availability, "consumer_concurrency": self._concurrency}
        for key, name in (("failed_queue_length", c.failed_task_queue_name),
                          ("unprocessable_queue_length", c.unprocessable_task_queue_name)):
            if name:
                metrics[key] = (await self._ns.get_queue_runtime_properties(name)).active_message_count
        if self._consumer is not None:
            counts = self._consumer.counts
            metrics.update(received=counts.received, succeeded=counts.succeeded, retried=counts.retried,
                           failed=counts.failed, unprocessable=counts.unprocessable, skipped=counts.skipped,
                           running=len(counts.running))
        return metrics

    def health_check_sync(self) -> List[Dict]:
        """One entry per partition of the task queue (`healthy` when it answered) and one for this
        process's consumer (`healthy` while it receives)."""
        return self._ready().run(self._health())

    async def health_check_async(self) -> List[Dict]:
        """`health_check_sync`, awaited."""
        return await self._ready().run_async(self._health())

    async def _health(self) -> List[Dict]:
        props = await self._ns.get_queue_runtime_properties(self._config.queue_name)
        health: List[Dict] = [{"queue": self._config.queue_name, "partition": p.index, "healthy": p.available}
                              for p in props.partitions]
        if self._consumer is not None:
            health.append({"consumer": self._config.queue_name, "healthy": self._consumer.alive,
                           "running": len(self._consumer.counts.running)})
        return health

