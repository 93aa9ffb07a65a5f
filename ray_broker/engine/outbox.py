"""The forwarder's outbox on one partition: messages of auto-forwarding entities on their way out.

An entity with `forward_to` hands each of its messages on to the destination (one with
`forward_dead_lettered_messages_to`, each dead-lettered one). The partition actor's forwarder
asks for a batch (`take`), sends it to the destination, and only then removes it here (`done`);
messages that can never arrive go to the transfer dead-letter sub-queue (`dead_letter`).

A batch taken is recorded and its messages set aside (state `TRANSFER`) in the same store
transaction, so after a crash the same batch, with the same id, is taken again: the forwarder's
send is idempotent by that id, and the destination recognizes a batch it already stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import codec
from ..message import envelope_from_wire
from ..protocol import DEAD_LETTER, MAX_TRANSFER_HOPS, TRANSFER_HOPS_FIELD
from . import messages
from .queries import MessageRow
from .state import Fragment, PartitionState

HOP_LIMIT_REASON = "MaxTransferHopCountExceeded"


@dataclass(frozen=True)
class Transfer:
    """A batch of messages to forward: send `envelopes` to `destination`, then call `done(id)`."""

    id: int
    source: str
    destination: str
    envelopes: list[dict[str, Any]]


def take(state: PartitionState, limit: int) -> Transfer | None:
    """The batch to forward next: the unfinished one, else up to `limit` messages of one
    forwarding entity (messages past `MAX_TRANSFER_HOPS` are dead-lettered instead), else None."""
    with state.store.transaction():
        pending = state.queries.pending_transfer()
        if pending is not None:
            return _build(state, pending.id, pending.eid, pending.subq, pending.destination,
                          [int(i) for i in codec.unpackb(pending.rows)])
        now = state.clock.now()
        for frag, subq, destination in state.forwarding():
            rows = state.queries.available(frag.entity_id, subq, 0, limit, None)
            if subq != DEAD_LETTER:
                rows = state.screen(frag, rows, now)
            rows = _within_hop_limit(state, frag, subq, rows)
            if rows:
                ids = [row.id for row in rows]
                transfer_id = state.queries.add_transfer(frag.entity_id, subq, destination, ids, codec.packb(ids))
                return _build(state, transfer_id, frag.entity_id, subq, destination, ids)
    return None


def done(state: PartitionState, transfer_id: int) -> None:
    """The destination stored the batch: remove its messages here."""
    with state.store.transaction():
        found = _pending(state, transfer_id)
        if found is None:
            return
        frag, rows = found
        state.remove(frag, [row.id for row in rows], [row.body for row in rows], sum(row.size for row in rows))
        state.queries.delete_transfer(transfer_id)


def dead_letter(state: PartitionState, transfer_id: int, reason: str, description: str) -> None:
    """The batch can never reach its destination: move it to the transfer dead-letter sub-queue."""
    with state.store.transaction():
        found = _pending(state, transfer_id)
        if found is None:
            return
        _, rows = found
        state.queries.transfer_dead_letter([row.id for row in rows], reason, description)
        state.queries.delete_transfer(transfer_id)


def _pending(state: PartitionState, transfer_id: int) -> tuple[Fragment, list[MessageRow]] | None:
    """The entity and rows of the unfinished transfer `transfer_id` (None if it is not the one)."""
    pending = state.queries.pending_transfer()
    if pending is None or pending.id != transfer_id:
        return None
    frag = state.fragments_by_id()[pending.eid]
    return frag, [state.queries.message_by_id(int(i)) for i in codec.unpackb(pending.rows)]


def _within_hop_limit(state: PartitionState, frag: Fragment, subq: int, rows: list[MessageRow]) -> list[MessageRow]:
    """The rows of sub-queue `subq` whose messages may be forwarded once more; the others are
    dead-lettered (a run whose messages differ is cut into single messages first)."""
    keep = []
    for row, payloads in zip(rows, messages.payloads(state.queries, rows)):
        over = [_hops(payload) >= MAX_TRANSFER_HOPS for payload in payloads]
        if not any(over):
            keep.append(row)
        elif all(over):
            _dead_letter_hop_limit(state, frag, subq, row)
        else:
            for piece, exceeded in zip(messages.cut(state.queries, row, range(1, row.span)), over):
                if exceeded:
                    _dead_letter_hop_limit(state, frag, subq, piece)
                else:
                    keep.append(piece)
    return keep


def _dead_letter_hop_limit(state: PartitionState, frag: Fragment, subq: int, row: MessageRow) -> None:
    """Dead-letter a message forwarded `MAX_TRANSFER_HOPS` times: from the main queue to the
    dead-letter queue; from a dead-letter queue that forwards (the dead-letter queue again would
    take it again, forever) to the transfer dead-letter queue."""
    description = f"The message was forwarded {MAX_TRANSFER_HOPS} times, the most allowed."
    if subq == DEAD_LETTER:
        state.queries.transfer_dead_letter([row.id], HOP_LIMIT_REASON, description)
    else:
        state.dead_letter(frag.key, row.id, row.span, HOP_LIMIT_REASON, description)


def _hops(payload: bytes) -> int:
    return int(codec.unpackb(payload).get(TRANSFER_HOPS_FIELD, 0))


def _build(state: PartitionState, transfer_id: int, entity_id: int, subq: int, destination: str,
           ids: list[int]) -> Transfer:
    """The transfer of rows `ids`: each message's wire form as sent, one hop further (with where
    and why it was dead-lettered, coming from a dead-letter queue), and no schedule left."""
    frag = state.fragments_by_id()[entity_id]
    rows = [state.queries.message_by_id(i) for i in ids]
    envelopes = []
    for row, payloads in zip(rows, messages.payloads(state.queries, rows)):
        for payload in payloads:
            wire = dict(codec.unpackb(payload))
            wire[TRANSFER_HOPS_FIELD] = int(wire.get(TRANSFER_HOPS_FIELD, 0)) + 1
            wire.pop("scheduled_enqueue_time", None)
            if subq == DEAD_LETTER:
                wire.update(dead_letter_source=frag.name, dead_letter_reason=row.dl_reason,
                            dead_letter_error_description=row.dl_description)
            envelopes.append(envelope_from_wire(wire))
    return Transfer(transfer_id, frag.name, destination, envelopes)
