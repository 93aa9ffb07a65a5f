"""Creating the queues a task processor uses, when they are missing."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..errors import MessagingEntityAlreadyExistsError, MessagingEntityNotFoundError
from .config import BrokerAdapterConfig, seconds
from .decisions import attempts_allowed

async def ensure_queue(ns: Any, name: str, **options: Any) -> Any:
    """The queue's properties, creating it with `options` when it does not exist."""
    try:
        return await ns.get_queue(name)
    except MessagingEntityNotFoundError:
        pass
    try:
        return await ns.create_queue(name, **options)
    except MessagingEntityAlreadyExistsError:  # another replica created it meanwhile
        return await ns.get_queue(name)


async def ensure_queues(ns: Any, queue_name: str, config: BrokerAdapterConfig, *, max_retries: int | None,
                        failed: str | None, unprocessable: str | None) -> None:
    """Create the task queue, the failed and unprocessable task queues (when named) and the results
    queue where missing. The task queue forwards its dead letters to the failed task queue, so a
    task that failed lands there with the reason and description it was dead-lettered with."""
    parked = dict(enable_partitioning=config.enable_partitioning, requires_duplicate_detection=True,
                  duplicate_detection_history_time_window=timedelta(
                      seconds=seconds(config.duplicate_detection_window, "duplicate_detection_window")))
    for name in (failed, unprocessable):
        if name:
            await ensure_queue(ns, name, **parked)
    tasks = await ensure_queue(
        ns, queue_name, **parked,
        lock_duration=timedelta(seconds=seconds(config.lock_duration, "lock_duration")),
        # one more than the runs allowed: the consumer fails a task whose runs were all lost itself
        # (recording FAILURE); the broker's own limit only catches what the consumer could not
        max_delivery_count=attempts_allowed(max_retries) + 1,
        forward_dead_lettered_messages_to=failed)
    if failed and (tasks.forward_dead_lettered_messages_to or "").lower() != failed.lower():
        await ns.update_queue(queue_name, forward_dead_lettered_messages_to=failed)
    await ensure_queue(ns, config.results_queue(queue_name), enable_partitioning=config.enable_partitioning,
                       requires_session=True,
                       default_message_time_to_live=timedelta(seconds=seconds(config.result_retention,
                                                                              "result_retention")))
