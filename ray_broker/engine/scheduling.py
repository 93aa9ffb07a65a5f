"""Time on one partition: cancelling scheduled messages, and the housekeeping round."""
from __future__ import annotations

from typing import Iterable

from ..errors import MessageNotFoundError
from .state import PartitionState

PRODUCER_IDLE_S = 3600.0
"""How long a partition remembers an idempotent producer that sends nothing."""
TRANSACTION_MEMORY_S = 3600.0
"""How long a partition remembers a committed transaction (to answer a retried commit)."""
NAMED_PRODUCER_IDLE_S = 30 * 86400.0
"""How long a partition remembers a caller-named producer (a stream sink) that sends nothing."""


def cancel_scheduled(state: PartitionState, entity: str, sequence_numbers: Iterable[int]) -> None:
    """Delete scheduled messages; all must still be scheduled, or nothing is cancelled. (A
    scheduled message is never part of a run: it has its own row and body.)"""
    frag = state.fragment(entity)
    seqs = list(dict.fromkeys(int(s) for s in sequence_numbers))
    with state.store.transaction():
        sizes = {seq: state.queries.scheduled_size(frag.row_id(seq), seq) for seq in seqs}
        missing = [seq for seq, size in sizes.items() if size is None]
        if missing:
            raise state.error(MessageNotFoundError, f"no scheduled message with sequence number(s) {missing} in "
                              f"{frag.name!r}; it may have been enqueued already or cancelled", frag.name)
        ids = [frag.row_id(seq) for seq in seqs]
        state.remove(frag, ids, ids, sum(size or 0 for size in sizes.values()))


def housekeeping(state: PartitionState) -> bool:
    """Activate due scheduled messages, expire messages, prune duplicate-detection ids, forget
    idempotent producers idle for over `PRODUCER_IDLE_S` (named ones: `NAMED_PRODUCER_IDLE_S`) and
    transactions committed over `TRANSACTION_MEMORY_S` ago.

    Returns True when messages may have become available (to wake waiting receivers): scheduled
    messages came due, messages expired (perhaps into a dead-letter queue), or a lock lapsed
    since the previous round.
    """
    now = state.clock.now()
    since, state.last_housekeeping = state.last_housekeeping, now
    with state.store.transaction():
        changed = state.activate_due(now) > 0
        expired = state.queries.expired(now)
        if expired:
            fragments = state.fragments_by_id()
            for entity_id, row in expired:
                state.expire(fragments[entity_id], row)
        state.queries.prune_message_ids(now)
        state.queries.forget_producers(now - PRODUCER_IDLE_S, now - NAMED_PRODUCER_IDLE_S)
        state.queries.forget_transactions(now - TRANSACTION_MEMORY_S)
        lapsed = state.queries.lock_lapsed_between(since, now)
    return changed or bool(expired) or lapsed
