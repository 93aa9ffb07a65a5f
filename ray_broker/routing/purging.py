"""A purge's batch across the partitions that hold an entity: one `Purge` request on each, at once."""
from __future__ import annotations

import asyncio

from ..router_requests import PurgeReply
from ..wire import Purge
from . import planner
from .definitions import Definitions
from .reaching import PartitionReach


class Purges:
    """Runs purge batches over `reach`, finding where an entity lives in `definitions`."""

    def __init__(self, reach: PartitionReach, definitions: Definitions) -> None:
        self._reach = reach
        self._definitions = definitions

    async def purge(self, entity: str, subq: int, max_count: int, timeout: float, before: float | None = None,
                    in_all: bool = False) -> PurgeReply:
        """Remove up to `max_count` messages of sub-queue `subq` of `entity` on each partition that
        holds it (`in_all`: about `max_count` over all of them, shared out evenly), enqueued before
        `before` (epoch seconds) when given, each retried there until `timeout`: how many in all,
        and whether any has more."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        hosts = planner.hosts(definition, self._reach.count)
        each = -(-max_count // len(hosts)) if in_all else max_count
        replies = await asyncio.gather(*(self._reach.keyed(k, Purge(entity, subq, each, before), deadline=deadline,
                                                            entity=entity)
                                         for k in hosts))
        return PurgeReply(sum(r["removed"] for r in replies), any(r["more"] for r in replies))
