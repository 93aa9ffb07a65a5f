"""How many task consumers a backlog needs, as pure functions (Ray-free).

The policy drains the backlog within `target_drain_s`: it needs `backlog / (rate * target_drain_s)`
replicas, where `rate` is what one replica drains per second. The rate starts at
`tasks_per_replica_s` and is then measured: whenever the backlog falls between two samples, the
fall per second per replica is blended in (weight `smoothing`). The fall is the drain net of new
arrivals, so the estimate errs low and the policy errs towards more replicas. An empty backlog
asks for `min_replicas`; the answer always lies within `min_replicas`..`max_replicas`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class BacklogSizing:
    """The backlog policy's parameters.

    Args:
        target_drain_s: drain the backlog within this many seconds.
        tasks_per_replica_s: tasks per second one replica is assumed to finish until measured.
        smoothing: weight (0 < w <= 1) of a new rate sample against the running estimate.
    """

    target_drain_s: float = 30.0
    tasks_per_replica_s: float = 1.0
    smoothing: float = 0.5

    def __post_init__(self) -> None:
        for name in ("target_drain_s", "tasks_per_replica_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgumentError(f"BacklogSizing.{name} must be a positive number, got {value!r}")
        if isinstance(self.smoothing, bool) or not isinstance(self.smoothing, (int, float)) \
                or not 0 < self.smoothing <= 1:
            raise InvalidArgumentError(f"BacklogSizing.smoothing must be in (0, 1], got {self.smoothing!r}")


def drain_rate(previous_rate: float, previous_backlog: int, backlog: int, elapsed_s: float, replicas: int,
               sizing: BacklogSizing) -> float:
    """The per-replica drain rate after a new backlog sample: unchanged unless the backlog fell
    while replicas ran."""
    if backlog >= previous_backlog or elapsed_s <= 0 or replicas <= 0:
        return previous_rate
    sample = (previous_backlog - backlog) / elapsed_s / replicas
    return (1 - sizing.smoothing) * previous_rate + sizing.smoothing * sample


def desired_replicas(backlog: int, rate_per_replica: float, sizing: BacklogSizing, *, min_replicas: int,
                     max_replicas: int) -> int:
    """The replicas that drain `backlog` within the target time, within min..max."""
    if backlog <= 0:
        need = 0
    else:
        need = max(1, math.ceil(backlog / (max(rate_per_replica, 1e-9) * sizing.target_drain_s)))
    return max(min_replicas, min(max_replicas, need))
