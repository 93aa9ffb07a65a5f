"""The receive state a router keeps: per receiver, messages fetched beyond a request, waiting to be
handed out (`ReceiverState`); per entity, how many messages each partition is known to hold (`Hints`)."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..protocol import MAIN
from ..wire import Settlement

LOCK_MARGIN_S = 0.5
"""A cached message whose lock ends sooner than this is not handed out (it will come back)."""
RECEIVER_IDLE_S = 300.0
"""A receiver unused this long is taken as gone: its cache is released."""

Watch = asyncio.Task[list[tuple[int, dict[str, Any]]]]
"""A waiting receive on one partition: it brings `(partition, record)` pairs locked for the receiver."""


def brought(watches: Iterable[Watch]) -> list[tuple[int, dict[str, Any]]]:
    """What finished waiting receives brought (failed or cancelled ones bring nothing)."""
    return [pair for task in watches if task.done() and not task.cancelled() and task.exception() is None
            for pair in task.result()]


def release_op(record: dict[str, Any]) -> Settlement:
    """The "release" settlement (which counts no delivery) of one locked message."""
    return Settlement("release", record["sequence_number"], record["lock_token"])


def releases(held: Iterable[tuple[int, dict[str, Any]]]) -> dict[int, list[Settlement]]:
    """`release_op`s for locked messages, grouped by partition."""
    ops: dict[int, list[Settlement]] = {}
    for k, record in held:
        ops.setdefault(k, []).append(release_op(record))
    return ops


@dataclass
class ReceiverState:
    """A receiver's cache of `(partition, record)` pairs, locked for it, in arrival order, and the
    waiting receives it has under way."""

    entity: str
    subq: int = MAIN
    cache: deque[tuple[int, dict[str, Any]]] = field(default_factory=deque)
    last_used: float = field(default_factory=time.monotonic)
    watches: dict[int, Watch] = field(default_factory=dict)
    """Waiting receives under way, by partition; what they bring goes to the cache."""
    busy: int = 0
    """Receives of it under way on the router's loop (while any is, the caller's thread runs no round of it)."""
    closed: bool = False
    """Set when the receiver closes: receives of it still under way start no more waits and hand
    out nothing."""

    def harvest(self) -> None:
        """Move what finished waiting receives brought into the cache (failed ones bring nothing)."""
        for k, task in list(self.watches.items()):
            if task.done():
                del self.watches[k]
                self.cache.extend(brought([task]))

    def detach(self) -> tuple[dict[int, Watch], list[tuple[int, dict[str, Any]]]]:
        """Take every waiting receive under way and every cached message away from the receiver
        (to be ended and released): `(watches, cached)`."""
        watches, self.watches = self.watches, {}
        cached = list(self.cache)
        self.cache.clear()
        return watches, cached

    def take(self, max_count: int, wall_now: float) -> list[tuple[int, dict[str, Any]]]:
        """Up to `max_count` cached messages whose locks still hold; expired ones are dropped."""
        out = []
        while self.cache and len(out) < max_count:
            k, record = self.cache.popleft()
            if (record.get("locked_until") or 0) > wall_now + LOCK_MARGIN_S:
                out.append((k, record))
        return out

    def highest_sequence(self, floor: int) -> int:
        """The highest sequence number cached, or `floor` (sessions resume after what they have seen)."""
        return max([floor] + [r["sequence_number"] for _, r in self.cache])


class Hints:
    """How many messages of an entity's sub-queue (or of one session) each partition is known to
    hold, at least: 0 for a partition known to be empty; a partition missing from an entity's map
    may hold any number. Sends add what they stored, releases and waits that saw messages mark at
    least one, and receives set what their reply says is left (its `backlog`)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, str | None], dict[int, int]] = {}

    def of(self, entity: str, subq: int, session_id: str | None) -> dict[int, int]:
        """The map of `entity`'s sub-queue (or session), partition -> messages it holds at least
        (made on first use)."""
        return self._known.setdefault((entity.lower(), subq, session_id), {})

    def mark(self, entity: str, subq: int, session_id: str | None, partitions: Iterable[int], holds: bool) -> None:
        """Mark `partitions` as holding messages of the sub-queue (or session: at least one, or
        what was known), or as empty."""
        known = self.of(entity, subq, session_id)
        for k in partitions:
            known[k] = max(known.get(k, 0), 1) if holds else 0
