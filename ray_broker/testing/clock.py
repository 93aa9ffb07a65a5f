"""Moving a namespace's clock forward in tests.

Every partition (each replica of a replicated one) keeps its own clock: the wall clock plus an
offset that only grows. Moving it forward affects what the broker decides by its clock, at once:
scheduled messages become due and are delivered, messages past their time to live expire (to the
dead-letter queue where the entity says so), message and session locks lapse, duplicate detection
forgets ids older than its window, and idle entities with `auto_delete_on_idle` are deleted by the
gateway's next sweep. Times the broker reports (enqueued, locked until, expires at) are on the
moved clock. Clients' own waits (`max_wait_time`, timeouts) stay on the wall clock. A partition
that Ray restarts starts again from the wall clock.
"""
from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from ..errors import InvalidArgumentError

ADVANCE_TIMEOUT_S = 60.0


def advance_clock(ns: Any, by: timedelta | float) -> None:
    """Move the clock of namespace `ns` (an `rb.Namespace` or `ray_broker.aio.Namespace`) forward by
    `by` (a timedelta, or seconds), on every partition and replica, and let each do at once what is
    due by its new time.

    Example:
        ns.get_queue_sender("q").schedule_messages(rb.Message("later"), now + timedelta(hours=1))
        ray_broker.testing.advance_clock(ns, timedelta(hours=1))
        ns.get_queue_receiver("q").receive_messages(max_wait_time=5)    # the scheduled message
    """
    import ray

    from ..config import RAY_NAMESPACE

    seconds = by.total_seconds() if isinstance(by, timedelta) else by
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds < 0:
        raise InvalidArgumentError(f"a namespace's clock moves forward by a timedelta or seconds of at least 0, "
                                   f"got {by!r}")
    config = ns.config
    names = [config.replica_name(k, r) for k in range(config.partition_count) for r in range(config.replicas)]
    ray.get([ray.get_actor(name, namespace=RAY_NAMESPACE).advance_clock.remote(float(seconds)) for name in names],
            timeout=ADVANCE_TIMEOUT_S)
