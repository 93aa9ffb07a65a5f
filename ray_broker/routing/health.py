"""Partition health as a router sees it, and the one back-off policy every retry loop uses."""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off: `initial` seconds, times `multiplier` per attempt, at most `maximum`,
    with `jitter` (a fraction of the delay taken off at random, so retries do not move in step).

    Example:
        BACKOFF.delay(0) == 0.05; BACKOFF.delay(3) == 0.4; BACKOFF.jittered(3) is in [0.2, 0.4]
    """

    initial: float = 0.05
    multiplier: float = 2.0
    maximum: float = 2.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        """The back-off after `attempt` earlier failures (0 for the first retry), without jitter."""
        return min(self.maximum, self.initial * self.multiplier ** attempt)

    def jittered(self, attempt: int) -> float:
        """`delay(attempt)` less a random share of up to `jitter` of it."""
        return self.delay(attempt) * (1.0 - self.jitter * random.random())


BACKOFF = Backoff()
"""The policy of partition health and of every retry of a partition or gateway call."""
RETRY_BACKOFF = Backoff(maximum=1.0)
"""Keyed retries of one partition keep knocking at least once a second."""
INITIAL_BACKOFF_S = BACKOFF.initial
MAX_BACKOFF_S = BACKOFF.maximum


@dataclass
class _State:
    failures: int = 0
    retry_at: float = 0.0


class PartitionHealth:
    """Tracks which partitions answered lately; a failing one is skipped for an exponential back-off.

    Args:
        partition_count: how many partitions there are.
        backoff: the back-off policy (default `BACKOFF`).
    """

    def __init__(self, partition_count: int, backoff: Backoff = BACKOFF) -> None:
        self._states = [_State() for _ in range(partition_count)]
        self._backoff = backoff

    def succeeded(self, index: int) -> None:
        """Record an answer from partition `index`."""
        state = self._states[index]
        state.failures, state.retry_at = 0, 0.0

    def failed(self, index: int, now: float) -> float:
        """Record a failure; return the back-off before the partition should be tried again."""
        state = self._states[index]
        backoff = self._backoff.delay(state.failures)
        state.failures += 1
        state.retry_at = now + backoff * (1.0 - self._backoff.jitter * random.random())
        return backoff

    def hold(self, index: int, until: float) -> None:
        """Skip partition `index` until `until` at least (it stayed away longer than a restart takes)."""
        state = self._states[index]
        state.retry_at = max(state.retry_at, until)

    def available(self, index: int, now: float) -> bool:
        """Whether partition `index` is healthy, or its back-off has passed."""
        return self._states[index].retry_at <= now

    def order(self, candidates: list[int], now: float) -> list[int]:
        """Candidates with the available ones first, keeping their relative order."""
        return [p for p in candidates if self.available(p, now)] + [p for p in candidates if not self.available(p, now)]
