"""Partition health as a gateway sees it: failures, back-off, and which partitions to try."""
from __future__ import annotations

import random
from dataclasses import dataclass

INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0


@dataclass
class _State:
    failures: int = 0
    retry_at: float = 0.0


class PartitionHealth:
    """Tracks which partitions answered lately; a failing one is skipped for an exponential back-off."""

    def __init__(self, partition_count: int) -> None:
        self._states = [_State() for _ in range(partition_count)]

    def succeeded(self, index: int) -> None:
        """Record an answer from partition `index`."""
        state = self._states[index]
        state.failures, state.retry_at = 0, 0.0

    def failed(self, index: int, now: float) -> float:
        """Record a failure; return the back-off before the partition should be tried again."""
        state = self._states[index]
        state.failures += 1
        backoff = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * (2 ** (state.failures - 1)))
        state.retry_at = now + backoff * (0.5 + random.random() / 2)
        return backoff

    def available(self, index: int, now: float) -> bool:
        """Whether partition `index` is healthy, or its back-off has passed."""
        return self._states[index].retry_at <= now

    def order(self, candidates: list[int], now: float) -> list[int]:
        """Candidates with the available ones first, keeping their relative order."""
        return [p for p in candidates if self.available(p, now)] + [p for p in candidates if not self.available(p, now)]
