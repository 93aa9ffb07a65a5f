"""Partition health as a router sees it, and the one back-off policy every retry loop uses."""
from __future__ import annotations

import random
from collections.abc import Iterable
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
AWAY_BACKOFF = Backoff(initial=30.0, multiplier=2.0, maximum=240.0, jitter=0.0)
"""How long a partition that stays away (its node likely lost, not restarting) is passed over by
unkeyed sends and receives: 30 s, and twice as long each time it is still away after a hold, up
to 4 minutes, until it answers again."""
INITIAL_BACKOFF_S = BACKOFF.initial
MAX_BACKOFF_S = BACKOFF.maximum


@dataclass
class _State:
    failures: int = 0
    retry_at: float = 0.0
    failing_since: float | None = None
    """When the partition's current run of failures began (None while it answers)."""
    holds: int = 0
    """Away holds since it last answered."""


class PartitionHealth:
    """Tracks which partitions answered lately; a failing one is skipped for an exponential back-off.

    Args:
        partition_count: how many partitions there are.
        backoff: the back-off policy (default `BACKOFF`).
        away: the policy of holds of a partition that stays away (default `AWAY_BACKOFF`).
    """

    def __init__(self, partition_count: int, backoff: Backoff = BACKOFF, away: Backoff = AWAY_BACKOFF) -> None:
        self._states = [_State() for _ in range(partition_count)]
        self._backoff = backoff
        self._away = away

    def succeeded(self, index: int) -> None:
        """Record an answer from partition `index`."""
        self._states[index] = _State()

    def failed(self, index: int, now: float) -> float:
        """Record a failure; return the back-off before the partition should be tried again (a
        hold under way is kept)."""
        state = self._states[index]
        backoff = self._backoff.delay(state.failures)
        state.failures += 1
        if state.failing_since is None:
            state.failing_since = now
        state.retry_at = max(state.retry_at, now + backoff * (1.0 - self._backoff.jitter * random.random()))
        return backoff

    def failing_for(self, index: int, now: float) -> float:
        """How long partition `index` has failed without an answer (0 while it answers)."""
        since = self._states[index].failing_since
        return 0.0 if since is None else now - since

    def hold_away(self, index: int, now: float) -> float:
        """Skip partition `index`, which stayed away longer than a restart takes, for the next
        hold of the away policy (each one longer while it does not answer); returns the hold."""
        state = self._states[index]
        hold = self._away.delay(state.holds)
        state.holds += 1
        state.retry_at = max(state.retry_at, now + hold)
        return hold

    def available(self, index: int, now: float) -> bool:
        """Whether partition `index` is healthy, or its back-off has passed."""
        return self._states[index].retry_at <= now

    def next_retry(self, indexes: Iterable[int], now: float) -> float | None:
        """Seconds until the first of `indexes` held in back-off may be tried again (None when
        none is held)."""
        waits = [self._states[k].retry_at - now for k in indexes if self._states[k].retry_at > now]
        return min(waits) if waits else None

    def order(self, candidates: list[int], now: float) -> list[int]:
        """Candidates with the available ones first, keeping their relative order."""
        return [p for p in candidates if self.available(p, now)] + [p for p in candidates if not self.available(p, now)]
