"""How messages lie in rows: a row holds one message, or a run of consecutive ones.

A run is what a large plain batch becomes when it is sent: its messages have consecutive row ids
and sequence numbers and, while nothing tells them apart, share one `messages` row (`span` of
them, `size` their total) and one `bodies` row (their payloads, one after another, and their
lengths). They are locked, unlocked, expired, dead-lettered and deleted together. When one of
them must differ from the others (a receive takes only some of them, a settlement touches only
some, or any settlement other than a complete of all of them), the run is first cut into pieces,
each a run again or a single message. A run's body stays whole until no row refers to it (the
rows of its own entity, and the subscription rows that share a topic's body: see
`Queries.delete_messages`).

The lock token of the k-th message of a locked row is derived from the row's own token (see
`lock_token`), so cutting a locked run keeps every message's token.
"""
from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any, Mapping, Sequence

from .. import codec
from ..protocol import COUNTER_MASK
from .queries import LockState, MessageRow, Queries, lock_token

RUN_MIN = 16
"""The fewest messages of a batch stored as a run: a few messages gain little from sharing a row,
and are the likeliest to be split among receivers (cutting a run costs about what storing its
messages as rows would have)."""
RUN_MAX = 1024
"""The most messages in one run."""


def alike(envelopes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the messages of a batch can share a run: no session, no schedule, one time to
    live, and each size the length of its payload."""
    ttl = envelopes[0].get("ttl")
    return all(env.get("session_id") is None and env.get("scheduled") is None and env.get("ttl") == ttl
               and env["size"] == len(env["payload"]) for env in envelopes)


def message_token(row: MessageRow | LockState, offset: int) -> bytes | None:
    """The lock token of the message `offset` places into a locked row (None when unlocked)."""
    if row.lock_token is None or offset == 0:
        return row.lock_token
    return lock_token(row.lock_token[:8], row.id + offset)


def message_tokens(row: MessageRow | LockState, first: int, count: int) -> list[bytes | None]:
    """The lock tokens of `count` messages of a row from offset `first` on."""
    if row.lock_token is None:
        return [None] * count
    prefix = row.lock_token[:8]
    return [row.lock_token if offset == 0 else lock_token(prefix, row.id + offset)
            for offset in range(first, first + count)]


def _offset(row_id: int, body_id: int) -> int:
    """Where message `row_id` lies in body `body_id`: the distance of their counters (a row of a
    subscription shares its topic's body, whose id is in the topic's range)."""
    return (row_id & COUNTER_MASK) - (body_id & COUNTER_MASK)


def payloads(queries: Queries, rows: Sequence[MessageRow]) -> list[list[bytes]]:
    """The payloads of the messages of each row, in order."""
    bodies = {body.id: body for body in queries.bodies(sorted({row.body for row in rows}))}
    offsets: dict[int, list[int]] = {}
    result = []
    for row in rows:
        body = bodies[row.body]
        if body.lengths is None:
            result.append([body.payload])
            continue
        if body.id not in offsets:
            offsets[body.id] = list(accumulate(codec.unpackb(body.lengths), initial=0))
        bounds, start = offsets[body.id], _offset(row.id, body.id)
        result.append([body.payload[bounds[k]:bounds[k + 1]] for k in range(start, start + row.span)])
    return result


def records(row: MessageRow, row_payloads: Sequence[bytes], delivery_count: int, *, locked: bool,
            first: int = 0) -> list[dict[str, Any]]:
    """The dicts a receiver turns into `ReceivedMessage`s, for the messages of `row` from offset
    `first` on (one per payload), with the row's lock when `locked`."""
    base: dict[str, Any] = {"enqueued_time": row.enqueued_at, "expires_at": row.expires_at,
                            "delivery_count": delivery_count, "state": row.state}
    if row.visible_at is not None:
        base["scheduled_enqueue_time"] = row.visible_at
    if row.dl_reason is not None or row.dl_description is not None:
        base["dead_letter_reason"] = row.dl_reason
        base["dead_letter_error_description"] = row.dl_description
    if row.dl_source is not None:
        base["dead_letter_source"] = row.dl_source
    if locked and row.lock_token is not None:
        base["locked_until"] = row.locked_until
    else:
        locked = False
    result = []
    for offset, payload in enumerate(row_payloads, first):
        record = dict(base)
        seq = row.seq + offset
        record["payload"] = payload
        record["sequence_number"] = seq
        record["enqueued_sequence_number"] = row.enqueued_seq or seq
        result.append(record)
    if locked:
        for offset, token in enumerate(message_tokens(row, first, len(result)), first):
            result[offset - first]["lock_token"] = token
    return result


def cut(queries: Queries, row: MessageRow, offsets: Sequence[int]) -> list[MessageRow]:
    """Cut a run at the given offsets (each in 1 .. span - 1, ascending); the pieces, in order."""
    stored = queries.body_lengths(row.body)
    assert stored is not None, "only a run is cut, and a run's body records its lengths"
    lengths, start = codec.unpackb(stored), _offset(row.id, row.body)
    bounds = [0, *offsets, row.span]
    pieces = [row._replace(id=row.id + a, seq=row.seq + a, span=b - a, size=sum(lengths[start + a:start + b]),
                           lock_token=message_token(row, a))
              for a, b in zip(bounds, bounds[1:])]
    queries.cut(row.id, pieces)
    return pieces


def locate(queries: Queries, entity_id: int, ids: Sequence[int],
           seqs: Sequence[int]) -> dict[int, tuple[LockState, int]]:
    """The row holding each message (by row id, with its sequence number to confirm it), and the
    message's offset in it: `{seq: (row, offset)}` for the messages that exist."""
    rows = {row.id: row for row in queries.lock_states(ids)}
    inside = [row_id for row_id in ids if row_id not in rows]
    runs = queries.runs_between(entity_id, min(inside) - RUN_MAX + 1, max(inside)) if inside else []
    starts = [run.id for run in runs]
    found: dict[int, tuple[LockState, int]] = {}
    for row_id, seq in zip(ids, seqs):
        row = rows.get(row_id)
        if row is None:
            k = bisect_right(starts, row_id) - 1
            if k >= 0 and row_id < runs[k].id + runs[k].span:
                row = runs[k]
        if row is not None and row.seq + (row_id - row.id) == seq:
            found[seq] = (row, row_id - row.id)
    return found
