"""Per-receiver state a router keeps: messages fetched beyond a request, waiting to be handed out."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..protocol import MAIN

LOCK_MARGIN_S = 0.5
"""A cached message whose lock ends sooner than this is not handed out (it will come back)."""
RECEIVER_IDLE_S = 300.0
"""A receiver unused this long is taken as gone: its cache is released."""


@dataclass
class ReceiverState:
    """A receiver's cache of `(partition, record)` pairs, locked for it, in arrival order, and the
    waiting receives it has under way."""

    entity: str
    subq: int = MAIN
    cache: deque[tuple[int, dict[str, Any]]] = field(default_factory=deque)
    last_used: float = field(default_factory=time.monotonic)
    watches: dict[int, asyncio.Task[list[tuple[int, dict[str, Any]]]]] = field(default_factory=dict)
    """Waiting receives under way, by partition; what they bring goes to the cache."""

    def harvest(self) -> None:
        """Move what finished waiting receives brought into the cache (failed ones bring nothing)."""
        for k, task in list(self.watches.items()):
            if task.done():
                del self.watches[k]
                if not task.cancelled() and task.exception() is None:
                    self.cache.extend(task.result())

    def take(self, max_count: int, wall_now: float) -> list[tuple[int, dict[str, Any]]]:
        """Up to `max_count` cached messages whose locks still hold; expired ones are dropped."""
        out = []
        while self.cache and len(out) < max_count:
            k, record = self.cache.popleft()
            if (record.get("locked_until") or 0) > wall_now + LOCK_MARGIN_S:
                out.append((k, record))
        return out

    def releases(self) -> dict[int, list[list[Any]]]:
        """"release" settlements for every cached message, grouped by partition, emptying the cache."""
        ops: dict[int, list[list[Any]]] = {}
        while self.cache:
            k, record = self.cache.popleft()
            ops.setdefault(k, []).append(["release", record["sequence_number"], record["lock_token"]])
        return ops

    def highest_sequence(self, floor: int) -> int:
        """The highest sequence number cached, or `floor` (sessions resume after what they have seen)."""
        return max([floor] + [r["sequence_number"] for _, r in self.cache])
