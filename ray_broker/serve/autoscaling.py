"""`BacklogAutoscalingPolicy`: a Serve autoscaling policy sizing a task consumer from its backlog.

Serve calls the policy on its controller's event loop every control-loop tick; the policy never
blocks there: the queue's runtime properties are fetched by a one-shot task on that loop at most
every `poll_interval_s`, and each call decides from the latest sample (`sizing.py`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, Optional, Tuple

from ray.serve.config import AutoscalingContext

from .sizing import BacklogSizing, desired_replicas, drain_rate

log = logging.getLogger("ray.serve")


class BacklogAutoscalingPolicy:
    """Sizes a `@task_consumer` deployment from its queue's backlog and measured drain rate.

    Pass it to Serve as a class policy; Serve creates it once with `policy_kwargs` (plain JSON
    values) and keeps the result within the deployment's `min_replicas`..`max_replicas`,
    applying its `upscale_delay_s` / `downscale_delay_s` as for any policy.

    Args:
        namespace: the broker namespace's name.
        queue_name: the task queue (`TaskProcessorConfig.queue_name`).
        target_drain_s: drain the backlog within this many seconds (default 30).
        tasks_per_replica_s: one replica's assumed throughput until measured (default 1).
        smoothing: weight of each new drain-rate sample (default 0.5).
        poll_interval_s: how often to read the queue's runtime properties (default 2).
        address, auth_token: as for `rb.connect`.

    Example:
        from ray.serve.config import AutoscalingConfig, AutoscalingPolicy
        @serve.deployment(autoscaling_config=AutoscalingConfig(
            min_replicas=1, max_replicas=8, upscale_delay_s=2, downscale_delay_s=30,
            policy=AutoscalingPolicy(policy_function=BacklogAutoscalingPolicy,
                                     policy_kwargs={"namespace": "shop", "queue_name": "inference",
                                                    "target_drain_s": 20})))
        @task_consumer(task_processor_config=config)
        class Embedder: ...
    """

    def __init__(self, namespace: str, queue_name: str, *, target_drain_s: float = 30.0,
                 tasks_per_replica_s: float = 1.0, smoothing: float = 0.5, poll_interval_s: float = 2.0,
                 address: Optional[str] = None, auth_token: Optional[str] = None) -> None:
        self._sizing = BacklogSizing(target_drain_s, tasks_per_replica_s, smoothing)
        self._namespace, self._queue, self._poll_s = namespace, queue_name, poll_interval_s
        self._address, self._auth_token = address, auth_token
        self._ns: Any = None
        self._poll: Optional[asyncio.Task[None]] = None
        self._last_poll = float("-inf")
        self._backlog: Optional[int] = None
        self._sample: Optional[Tuple[float, int]] = None
        self._rate = self._sizing.tasks_per_replica_s

    async def _read_backlog(self, replicas: int) -> None:
        try:
            if self._ns is None:
                import ray_broker.aio as rba

                self._ns = await rba.connect(self._namespace, address=self._address, auth_token=self._auth_token)
            backlog = (await self._ns.get_queue_runtime_properties(self._queue)).active_message_count
        except Exception as e:  # noqa: BLE001 - keep deciding from the last sample
            log.warning("backlog of %r unavailable (%s: %s)", self._queue, type(e).__name__, e)
            return
        now = time.monotonic()
        if self._sample is not None:
            at, previous = self._sample
            self._rate = drain_rate(self._rate, previous, backlog, now - at, replicas, self._sizing)
        self._sample, self._backlog = (now, backlog), backlog

    def __call__(self, ctx: AutoscalingContext) -> Tuple[int, Dict[str, Any]]:
        now = time.monotonic()
        if (self._poll is None or self._poll.done()) and now - self._last_poll >= self._poll_s:
            self._last_poll = now
            self._poll = asyncio.get_running_loop().create_task(self._read_backlog(ctx.current_num_replicas))
        state = {"backlog": self._backlog, "drain_rate_per_replica": self._rate}
        if self._backlog is None:     # no sample yet: stay as we are
            return ctx.target_num_replicas, state
        return desired_replicas(self._backlog, self._rate, self._sizing,
                                min_replicas=ctx.capacity_adjusted_min_replicas,
                                max_replicas=ctx.capacity_adjusted_max_replicas), state
