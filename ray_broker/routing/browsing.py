"""Reading messages without taking them: peeks (of an entity, of a held session, of any session)
and deferred messages by sequence number, each read from the partitions that hold them."""
from __future__ import annotations

import asyncio
from typing import Any

from ..errors import InvalidOperationError
from ..wire import HeldSession, Peek, ReceiveDeferred
from . import planner
from .definitions import Definitions
from .reaching import PartitionReach

BROWSE_TIMEOUT_S = 30.0
"""How long a peek is retried on a partition that holds its range."""


class Browsing:
    """A router's peeks and deferred-message reads.

    Args:
        reach: the partitions.
        definitions: the entity definitions cache.
    """

    def __init__(self, reach: PartitionReach, definitions: Definitions) -> None:
        self._reach = reach
        self._definitions = definitions

    async def receive_deferred(self, entity: str, subq: int, mode: str, session: HeldSession | None,
                               sequence_numbers: list[int], timeout: float) -> list[dict[str, Any]]:
        """Deferred messages by sequence number, from the partitions that hold them."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        groups = planner.group_by_sequence(definition, sequence_numbers, self._reach.count,
                                           None if session is None else session.partition)
        replies = await asyncio.gather(*(
            self._reach.keyed(k, ReceiveDeferred(entity, subq, [sequence_numbers[i] for i in idx], mode,
                                                 None if session is None else session.ref),
                              deadline=deadline, entity=entity) for k, idx in groups.items()))
        by_seq = {r["sequence_number"]: dict(r, partition=k) for k, rs in zip(groups, replies) for r in rs}
        return [by_seq[s] for s in dict.fromkeys(sequence_numbers) if s in by_seq]

    async def peek(self, entity: str, subq: int, session: HeldSession | None, from_sequence: int,
                   max_count: int, to_sequence: int | None = None) -> list[dict[str, Any]]:
        """Browse messages in sequence-number order from `from_sequence` (up to `to_sequence`,
        exclusive, when given), across partitions in index order (those holding the range are all
        asked at once)."""
        definition = await self._definitions.get(entity)
        hosts = planner.peek_hosts(definition, self._reach.count, from_sequence,
                                   None if session is None else session.partition, to_sequence)
        deadline = self._reach.clock() + BROWSE_TIMEOUT_S
        session_id = None if session is None else session.session_id
        pages = await asyncio.gather(*(
            self._reach.keyed(k, Peek(entity, subq, from_sequence if k == hosts[0] else (k << 48), max_count,
                                      session_id, to_sequence), deadline=deadline, entity=entity) for k in hosts))
        return planner.merge_peeks(pages, max_count)

    async def peek_session(self, entity: str, subq: int, session_id: str, from_sequence: int, max_count: int,
                           to_sequence: int | None = None) -> list[dict[str, Any]]:
        """Browse one session's messages as `peek` does, without holding the session's lock (a
        receiver may hold it meanwhile); `InvalidOperationError` for an entity without sessions."""
        definition = await self._definitions.get(entity)
        if not definition["options"]["requires_session"]:
            raise InvalidOperationError(
                f"entity {definition['name']!r} does not require sessions, so it has no session {session_id!r}; "
                "peek it without session_id", entity=entity)
        k = planner.session_partition(definition, session_id, self._reach.count)
        return await self._reach.keyed(k, Peek(entity, subq, from_sequence, max_count, session_id, to_sequence),
                                       deadline=self._reach.clock() + BROWSE_TIMEOUT_S, entity=entity)
