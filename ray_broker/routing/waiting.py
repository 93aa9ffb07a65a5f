"""Waiting for messages without polling: a router's watches on partitions (one per entity,
sub-queue, session and partition, shared by every receive and session search waiting there),
each a partition's own wait (`PartitionReach.wait_available`) that ends when a receive there
could get a message or its time is up."""
from __future__ import annotations

import asyncio
from typing import Any

from .reaching import PartitionReach
from .receive_state import Hints

WATCH_TIMEOUT_S = 10.0
"""The longest one wait on a partition lasts before it is renewed."""


class PartitionWaits:
    """A router's waits on its partitions.

    Args:
        reach: the partitions.
        hints: where messages are known to be (a watch's answer sets its partition's hint).
    """

    def __init__(self, reach: PartitionReach, hints: Hints) -> None:
        self._reach = reach
        self._hints = hints
        self._watches: dict[tuple[Any, ...], asyncio.Task[bool]] = {}

    async def wait_any(self, definition: dict[str, Any], subq: int, session_id: str | None, free_session: bool,
                       hosts: list[int], timeout: float) -> bool:
        """Wait until some host partition has messages (or, with `free_session`, a session no
        receiver holds); True when one has, False when `timeout` (or a back-off's end) came first.

        Partitions in back-off are not watched; a watch that ends without news leaves the others
        waiting, so a failing partition cannot turn the wait into a busy loop.
        """
        name = definition["name"]
        key = name.lower()
        watch_for = min(max(timeout, 0.0), WATCH_TIMEOUT_S)
        now = self._reach.clock()
        give_up = now + self.bound(hosts, watch_for + 1.0, now)
        waiting: set[asyncio.Task[bool]] = set()
        for k in hosts:
            if not self._reach.health.available(k, now):
                continue
            wkey = (key, subq, session_id, free_session, k)
            task = self._watches.get(wkey)
            if task is None or task.done():
                task = asyncio.ensure_future(self._watch(name, subq, session_id, free_session, k, watch_for))
                self._watches[wkey] = task
                task.add_done_callback(lambda t, w=wkey: self._watches.pop(w, None) if self._watches.get(w) is t else None)
            waiting.add(task)
        while waiting:
            remaining = give_up - self._reach.clock()
            if remaining <= 0:
                return False
            done, waiting = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if any(not t.cancelled() and t.exception() is None and t.result() for t in done):
                return True
        await self._reach.sleep(0.05)
        return False

    def bound(self, hosts: list[int], longest: float, now: float) -> float:
        """How long waits on `hosts` may go on before their caller looks at them again: `longest`,
        or less when a host left out for its back-off may be asked again sooner (so a partition
        that failed once, say a dead actor since replaced, is not passed over for the whole wait)."""
        retry = self._reach.health.next_retry(hosts, now)
        return longest if retry is None else min(longest, retry)

    async def _watch(self, entity: str, subq: int, session_id: str | None, free_session: bool, k: int,
                     timeout: float) -> bool:
        available = await self._reach.wait_available(k, entity, subq, session_id, free_session, timeout)
        if available is None:
            return False
        if not free_session:
            self._hints.of(entity, subq, session_id)[k] = int(available)
        return available
