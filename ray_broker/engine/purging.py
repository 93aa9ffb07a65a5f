"""Purging on one partition: removing a queue's or subscription's messages in bounded batches.

A purge removes the messages of one sub-queue of an entity: the main queue's active, deferred and
scheduled messages, or the dead-letter (or transfer dead-letter) sub-queue's. Locked messages go
too (their settlement then fails with the lock lost, as Service Bus's purge does). Each call
removes at most one batch, so a partition is never held for long and other traffic goes on
between batches; the caller repeats until `more` is False. Messages the forwarder has taken
(state `TRANSFER`) are left to reach their destination. Sessions' states and locks, duplicate
detection, sequence counters and every other entity are untouched.
"""
from __future__ import annotations

from typing import TypedDict

from ..errors import InvalidArgumentError, InvalidOperationError
from .state import PartitionState

MAX_PURGE_BATCH = 5000
"""The most rows one purge call removes."""


class PurgeBatch(TypedDict):
    """What one purge call did: how many messages it removed, and whether more remain."""

    removed: int
    more: bool


def purge(state: PartitionState, entity: str, subq: int, max_count: int, before: float | None = None) -> PurgeBatch:
    """Remove about `max_count` messages of sub-queue `subq` of `entity` here, in sequence order,
    in one store transaction: whole rows until `max_count` messages are reached (a run, at most
    `messages.RUN_MAX` messages, goes whole, so a batch may end up to one run past `max_count`);
    with `before` (epoch seconds), only messages enqueued before then (Service Bus's batch delete)."""
    if not 0 < max_count <= MAX_PURGE_BATCH:
        raise InvalidArgumentError(f"a purge batch takes 1 to {MAX_PURGE_BATCH} messages, not {max_count}")
    frag = state.fragment(entity)
    if frag.kind == "topic":
        raise state.error(InvalidOperationError, f"{frag.name!r} is a topic, which holds no messages of its own: "
                          "purge its subscriptions (TOPIC/Subscriptions/SUB)", frag.name)
    with state.store.transaction():
        rows = state.queries.purgeable(frag.entity_id, subq, max_count + 1, before)
        taken, removed = 0, 0
        while taken < len(rows) and removed < max_count:
            removed += rows[taken].span
            taken += 1
        batch = rows[:taken]
        state.remove(frag, [row.id for row in batch], [row.body for row in batch], sum(row.size for row in batch))
    return {"removed": removed, "more": taken < len(rows)}
