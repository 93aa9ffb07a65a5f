"""Time on one partition: cancelling scheduled messages, and the housekeeping round."""
from __future__ import annotations

from typing import Iterable

from ..errors import MessageNotFoundError
from .state import Fragment, PartitionState


def cancel_scheduled(state: PartitionState, entity: str, sequence_numbers: Iterable[int]) -> None:
    """Delete scheduled messages; all must still be scheduled, or nothing is cancelled."""
    frag = state.fragment(entity)
    seqs = list(dict.fromkeys(int(s) for s in sequence_numbers))
    with state.store.transaction():
        found = {}
        for seq in seqs:
            size = state.queries.scheduled_size(frag.key, seq)
            if size is not None:
                found[seq] = size
        missing = [s for s in seqs if s not in found]
        if missing:
            raise state.error(MessageNotFoundError, f"no scheduled message with sequence number(s) {missing} in "
                              f"{frag.name!r}; it may have been enqueued already or cancelled", frag.name)
        state.queries.delete_messages(frag.key, seqs)
        state.sizes.add(frag.key, -sum(found.values()))


def housekeeping(state: PartitionState) -> bool:
    """Activate due scheduled messages, expire messages, prune duplicate-detection ids.

    Returns True when messages may have become available (to wake waiting receivers): scheduled
    messages came due, messages expired (perhaps into a dead-letter queue), or a lock lapsed
    since the previous round.
    """
    now = state.clock.now()
    since, state.last_housekeeping = state.last_housekeeping, now
    changed = state.activate_due(now) > 0
    expired = state.queries.expired(now)
    lapsed = state.queries.lock_lapsed_between(since, now)
    with state.store.transaction():
        for entity, row in expired:
            definition = state.definitions.get(entity, None)  # type: ignore[arg-type]
            if definition is not None:
                state.expire(Fragment(entity, definition, 0), row)
        state.queries.prune_message_ids(now)
    return changed or bool(expired) or lapsed
