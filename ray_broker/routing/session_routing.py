"""Sessions on the router: a named session locked on its partition, the next free one found
(waiting for one when none is), and a held session's calls (renew, release, state) made where it
lives."""
from __future__ import annotations

from typing import Any, Iterator

from ..errors import InvalidOperationError, OperationTimeoutError
from ..protocol import MAIN
from ..wire import SESSION_OPERATIONS, AcceptSession, HeldSession
from . import planner
from .channel import PartitionUnavailable
from .definitions import Definitions
from .reaching import PartitionReach
from .waiting import PartitionWaits

SESSION_CALL_TIMEOUT_S = 30.0
"""How long a held session's call (and a named session's lock) is retried on its partition."""


class SessionRouting:
    """A router's session locks and session calls.

    Args:
        reach: the partitions.
        definitions: the entity definitions cache.
        waits: the router's waits (a search for a free session waits there when none is).
        spread: a rotating partition index (where a search for a free session starts).
    """

    def __init__(self, reach: PartitionReach, definitions: Definitions, waits: PartitionWaits,
                 spread: Iterator[int]) -> None:
        self._reach = reach
        self._definitions = definitions
        self._waits = waits
        self._spread = spread

    async def accept_session(self, entity: str, session_id: str | None, max_wait: float) -> HeldSession:
        """Lock a named session, or the next available one (waiting up to `max_wait`)."""
        deadline = self._reach.clock() + max_wait
        definition = await self._definitions.get(entity)
        if not definition["options"]["requires_session"]:
            raise InvalidOperationError(
                f"entity {definition['name']!r} does not require sessions; open a receiver without session_id",
                entity=entity)
        if session_id is not None:
            k = planner.session_partition(definition, session_id, self._reach.count)
            lock = await self._reach.keyed(k, AcceptSession(entity, session_id),
                                           deadline=max(deadline, self._reach.clock() + SESSION_CALL_TIMEOUT_S),
                                           entity=entity)
            return HeldSession.granted(lock, k)
        hosts = planner.hosts(definition, self._reach.count)
        probed = False
        while True:
            start = next(self._spread)
            for j in range(len(hosts)):
                k = hosts[(start + j) % len(hosts)]
                if not self._reach.health.available(k, self._reach.clock()):
                    continue
                try:
                    lock = await self._reach.call_one(k, AcceptSession(entity, None))
                except PartitionUnavailable:
                    continue
                if lock is not None:
                    return HeldSession.granted(lock, k)
            remaining = deadline - self._reach.clock()
            if remaining <= 0 and probed:
                raise OperationTimeoutError(
                    f"no session of {definition['name']!r} became available within {max_wait:g} s; "
                    "retry, or pass a longer max_wait_time", entity=entity)
            probed = True
            await self._waits.wait_any(definition, MAIN, None, True, hosts, max(remaining, 0.0))

    async def session_call(self, entity: str, session: HeldSession, operation: str, args: tuple[Any, ...] = ()) -> Any:
        """Renew, release, or get/set the state of a held session (`operation` with `args`)."""
        deadline = self._reach.clock() + SESSION_CALL_TIMEOUT_S
        return await self._reach.keyed(session.partition, SESSION_OPERATIONS[operation](entity, session.ref, *args),
                                       deadline=deadline, entity=entity)
