"""Entity definitions as a router caches them: read from any partition, kept `DEFINITION_TTL_S`."""
from __future__ import annotations

from typing import Any

from ..entities import SUBSCRIPTIONS_SEGMENT
from ..errors import MessagingEntityNotFoundError
from ..wire import GetEntity
from .reaching import PartitionReach

DEFINITION_TTL_S = 2.0
"""How long an entity's definition is cached."""


class Definitions:
    """A cache of entity definitions by lower-cased name, filled from the partitions."""

    def __init__(self, reach: PartitionReach) -> None:
        self._reach = reach
        self._cached: dict[str, tuple[float, dict[str, Any]]] = {}

    def cached(self, name: str) -> dict[str, Any] | None:
        """An entity's definition if it is cached and fresh, else None."""
        entry = self._cached.get(name.lower())
        return entry[1] if entry is not None and entry[0] > self._reach.clock() else None

    async def get(self, name: str, fresh: bool = False) -> dict[str, Any]:
        """An entity's definition, from the cache unless `fresh` or stale."""
        cached = None if fresh else self.cached(name)
        if cached is not None:
            return cached
        try:
            definition = await self._reach.any(GetEntity(name))
        except MessagingEntityNotFoundError:
            self._cached.pop(name.lower(), None)
            raise
        self.remember(definition)
        return definition  # type: ignore[no-any-return]

    def remember(self, definition: dict[str, Any]) -> None:
        """Cache a definition just created or changed."""
        self._cached[definition["name"].lower()] = (self._reach.clock() + DEFINITION_TTL_S, definition)

    def forget(self, name: str) -> None:
        """Drop a deleted entity's definition."""
        self._cached.pop(name.lower(), None)

    def forget_subscriptions(self, topic: str) -> None:
        """Drop the definitions of a deleted topic's subscriptions."""
        prefix = topic.lower() + SUBSCRIPTIONS_SEGMENT
        for key in [key for key in self._cached if key.startswith(prefix)]:
            del self._cached[key]
