"""The consumer a Serve replica runs: receive with peek-lock, run handlers, settle by outcome.

It runs on the adapter's event loop. Sync handlers run on a thread pool of `concurrency` threads,
async ones on the loop; at most `concurrency` tasks are held at a time. Every held task's lock is
renewed while its handler runs. Decisions come from `decisions.py`; this module only does them.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import InvalidArgumentError, InvalidOperationError, MessageSizeExceededError, ServiceBusError
from ..message import Message, ReceivedMessage
from .codec import TaskCall, TaskEncodingError
from .context import TaskContext, enter
from .decisions import Fail, Retry, Unprocessable, after_failure, on_delivery, result_not_encodable
from .results import ResultStore
from .status import TaskRecord, TaskStatus

log = logging.getLogger("ray.serve")
RECEIVE_ERROR_PAUSE_S = 0.5


@dataclass
class ConsumerCounts:
    """What one consumer has done since it started."""

    received: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    unprocessable: int = 0
    skipped: int = 0
    released: int = 0
    running: set[str] = field(default_factory=set)


class Consumer:
    """Receives `queue`'s tasks and runs them with `handlers` (task name -> callable).

    Args:
        ns: a `ray_broker.aio.Namespace` of the adapter's loop.
        store: the result store.
        queue: the task queue.
        handlers: the registered handlers by task name.
        concurrency: tasks held and run at a time.
        max_retries: runs after the first that a failing task gets.
        unprocessable_queue: where unprocessable tasks go (None: the task queue's dead letters).
        receive_wait: the longest wait of one receive (how soon `stop` takes effect).
        max_task_s: how long a running task's lock is renewed.
    """

    def __init__(self, ns: Any, store: ResultStore, queue: str, handlers: Mapping[str, Callable[..., Any]], *,
                 concurrency: int, max_retries: int | None, unprocessable_queue: str | None, receive_wait: float,
                 max_task_s: float) -> None:
        import ray_broker.aio as rba

        self._ns, self._store, self._queue = ns, store, queue
        self._handlers = dict(handlers)
        self._concurrency, self._max_retries = concurrency, max_retries
        self._unprocessable = unprocessable_queue
        self._wait = receive_wait
        self._renewer = rba.AutoLockRenewer(max_lock_renewal_duration=max_task_s)
        self._receiver = ns.get_queue_receiver(queue, max_wait_time=receive_wait, auto_lock_renewer=self._renewer)
        self._parker = ns.get_queue_sender(unprocessable_queue) if unprocessable_queue else None
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"task-{queue}")
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: dict[int, ReceivedMessage] = {}
        self._main: asyncio.Task[None] | None = None
        self.counts = ConsumerCounts()

    @property
    def alive(self) -> bool:
        """Whether the consumer is receiving."""
        return not self._stopping

    async def run(self) -> None:
        """Receive and run tasks until `stop`; what arrives after `stop` is released at once."""
        self._main = asyncio.current_task()
        while not self._stopping:
            free = self._concurrency - len(self._tasks)
            if free <= 0:
                await asyncio.wait(set(self._tasks), timeout=self._wait, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                messages = await self._receiver.receive_messages(max_message_count=free, max_wait_time=self._wait)
            except Exception as e:  # noqa: BLE001 - a broker hiccup must not end the consumer
                log.warning("receiving from %r failed (%s: %s); retrying", self._queue, type(e).__name__, e)
                await asyncio.sleep(RECEIVE_ERROR_PAUSE_S)
                continue
            for message in messages:
                self.counts.received += 1
                if self._stopping:
                    await self._settle("release", message)
                    self.counts.released += 1
                    continue
                task = asyncio.get_running_loop().create_task(self._handle(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def stop(self, timeout: float) -> None:
        """Stop receiving, hand back (uncounted) what was fetched and not started, wait up to
        `timeout` s for running tasks, abandon those still running, and close."""
        self._stopping = True
        if self._main is not None and self._main is not asyncio.current_task():
            await asyncio.wait({self._main}, timeout=self._wait + RECEIVE_ERROR_PAUSE_S + 1)   # its last receive
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        for message in list(self._held.values()):   # still running: let another replica run it now
            await self._settle("abandon", message)
        await self._renewer.close()
        await self._receiver.close()   # abandons nothing it handed out; releases what it held back
        if self._parker is not None:
            await self._parker.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _handle(self, message: ReceivedMessage) -> None:
        self._held[id(message)] = message
        try:
            await self._process(message)
        except Exception:  # noqa: BLE001 - one task's trouble must not end the consumer
            log.exception("task %r of %r: handling failed; its lock lapses and it runs again", message.message_id,
                          self._queue)
        finally:
            self._held.pop(id(message), None)

    async def _process(self, message: ReceivedMessage) -> None:
        task_id = message.message_id or ""
        decision = on_delivery(bytes(message.body), self._handlers, message.delivery_count, self._max_retries)
        if isinstance(decision, Unprocessable):
            self.counts.unprocessable += 1
            await self._park(message, decision)
            return
        if isinstance(decision, Fail):
            await self._fail(message, decision)
            return
        attempt = message.delivery_count
        _, runs = await self._store.claim(task_id, TaskRecord(TaskStatus.STARTED, self._store.now(), attempt))
        if not runs:   # revoked, or finished by an earlier delivery
            self.counts.skipped += 1
            await self._settle("complete", message)
            return
        self.counts.running.add(task_id)
        try:
            result = await self._call(decision, TaskContext(task_id, decision.name, attempt))
        except Exception as e:  # noqa: BLE001 - the handler's error decides the task's fate
            outcome = after_failure(decision.name, attempt, self._max_retries, e)
            if isinstance(outcome, Retry):
                self.counts.retried += 1
                await self._store.write(task_id, TaskRecord(TaskStatus.RETRY, self._store.now(), attempt,
                                                            error=outcome.error))
                await self._settle("abandon", message)
            else:
                await self._fail(message, outcome)
            return
        finally:
            self.counts.running.discard(task_id)
        try:
            await self._succeed(message, TaskRecord(TaskStatus.SUCCESS, self._store.now(), attempt, result=result))
        except (TaskEncodingError, MessageSizeExceededError) as e:
            await self._fail(message, result_not_encodable(decision.name, e))
            return
        self.counts.succeeded += 1

    async def _succeed(self, message: ReceivedMessage, record: TaskRecord) -> None:
        """Store the SUCCESS and complete the task: in one transaction (one call, all or nothing)
        when the task's message and its records share a partition, else one after the other."""
        task_id = message.message_id or ""
        try:
            async with self._ns.transaction() as txn:
                await self._store.write(task_id, record, transaction=txn)
                await self._receiver.complete_message(message, transaction=txn)
            return
        except (InvalidArgumentError, MessageSizeExceededError):   # the result cannot be stored
            raise
        except InvalidOperationError:   # refused before anything was sent: the two live apart
            pass
        except ServiceBusError as e:   # the lock lapsed: neither was kept, and the task runs again
            log.warning("task %r of %r: completing failed (%s: %s); it will be delivered again", task_id,
                        self._queue, type(e).__name__, e)
            return
        await self._store.write(task_id, record)
        await self._settle("complete", message)

    async def _call(self, call: TaskCall, task: TaskContext) -> Any:
        handler = self._handlers[call.name]
        enter(task)   # this asyncio task's own context; a sync handler runs in a copy of it
        if asyncio.iscoroutinefunction(handler):
            return await handler(*call.args, **call.kwargs)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(contextvars.copy_context().run, handler, *call.args, **call.kwargs))

    async def _fail(self, message: ReceivedMessage, outcome: Fail) -> None:
        self.counts.failed += 1
        await self._store.write(message.message_id or "", TaskRecord(
            TaskStatus.FAILURE, self._store.now(), message.delivery_count, error=outcome.description))
        await self._settle("dead_letter", message, outcome.reason, outcome.description)

    async def _park(self, message: ReceivedMessage, outcome: Unprocessable) -> None:
        if message.message_id:
            await self._store.write(message.message_id, TaskRecord(
                TaskStatus.FAILURE, self._store.now(), message.delivery_count, error=outcome.description))
        if self._parker is None:
            await self._settle("dead_letter", message, outcome.reason, outcome.description)
            return
        await self._parker.send_messages(Message(
            bytes(message.body), message_id=message.message_id, subject=message.subject,
            content_type=message.content_type,
            application_properties={**(message.application_properties or {}), "DeadLetterReason": outcome.reason,
                                    "DeadLetterErrorDescription": outcome.description,
                                    "DeadLetterSource": self._queue}))
        await self._settle("complete", message)

    async def _settle(self, action: str, message: ReceivedMessage, *reason: str) -> None:
        try:
            await getattr(self._receiver, f"{action}_message")(message, *reason)
        except ServiceBusError as e:   # the lock lapsed (a handler ran past max_task_duration)
            log.warning("task %r of %r: %s failed (%s: %s); it will be delivered again", message.message_id,
                        self._queue, action, type(e).__name__, e)
