"""Sending on one partition: enqueue or schedule a batch, with duplicate detection."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..entities import SEND_BLOCKING
from ..errors import InvalidOperationError, MessagingEntityDisabledError, QuotaExceededError
from ..protocol import ACTIVE, SCHEDULED
from ..routing import COUNTER_BITS
from .state import Fragment, PartitionState

_ACTIVE, _SCHEDULED = int(ACTIVE), int(SCHEDULED)


def send(state: PartitionState, entity: str, envelopes: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Enqueue messages (or schedule those with a future scheduled time).

    Each envelope holds `payload` (encoded message), `size`, and optionally `message_id`,
    `session_id`, `partition_key`, `ttl` (seconds) and `scheduled` (epoch seconds).
    Returns each message's sequence number, or None for a dropped duplicate.
    """
    frag = state.fragment(entity)
    _check_sendable(state, frag, envelopes)
    opts = frag.options
    now = state.clock.now()
    default_ttl = opts["default_message_time_to_live"]
    with state.store.transaction():
        keep = _new_messages(state, frag, envelopes, now) if opts["requires_duplicate_detection"] else None
        accepted = envelopes if keep is None else [env for env, new in zip(envelopes, keep) if new]
        counter = state.take_counters(frag, len(accepted))
        entity_id, seq_base, id_base = frag.entity_id, frag.seq_base, frag.entity_id << COUNTER_BITS
        rows: list[tuple[Any, ...]] = []
        bodies: list[tuple[int, bytes]] = []
        seqs: list[int | None] = []
        added = 0
        for env in accepted:
            ttl, scheduled, size = env.get("ttl"), env.get("scheduled"), int(env["size"])
            if default_ttl is not None:
                ttl = default_ttl if ttl is None else min(ttl, default_ttl)
            if scheduled is not None and scheduled > now:
                message_state, expires_at = _SCHEDULED, None
            else:
                message_state, expires_at = _ACTIVE, (None if ttl is None else now + ttl)
            row_id, seq = id_base | counter, seq_base | counter
            counter += 1
            rows.append((row_id, entity_id, seq, message_state, env.get("session_id"), scheduled, now, ttl, expires_at,
                         size))
            bodies.append((row_id, env["payload"]))
            seqs.append(seq)
            added += size
        state.queries.insert_messages(rows, bodies)
        state.sizes.add(frag.key, added)
    if keep is None:
        return seqs
    stored = iter(seqs)
    return [next(stored) if new else None for new in keep]


def _new_messages(state: PartitionState, frag: Fragment, envelopes: Sequence[Mapping[str, Any]],
                  now: float) -> list[bool]:
    """Duplicate detection: which envelopes are new (their message id is not remembered, nor
    repeated earlier in the batch); remembers the new ones' ids for the entity's window."""
    window = frag.options["duplicate_detection_history_time_window"]
    seen: set[str] = set()
    keep = []
    for env in envelopes:
        if env.get("message_id") is None:
            keep.append(True)
            continue
        key = _dedup_key(env, frag.options)
        expiry = state.queries.dedup_expiry(frag.key, key)
        new = key not in seen and (expiry is None or expiry <= now)
        keep.append(new)
        if new:
            seen.add(key)
            state.queries.remember_message_id(frag.key, key, now + window)
    return keep


def _check_sendable(state: PartitionState, frag: Fragment, envelopes: Sequence[Mapping[str, Any]]) -> None:
    """Raise unless the entity takes these messages: its status, sessions and size quota."""
    opts = frag.options
    if opts["status"] in SEND_BLOCKING:
        raise state.error(MessagingEntityDisabledError, f"entity {frag.name!r} has status {opts['status']} and "
                          "accepts no messages; set its status to Active to send", frag.name)
    if opts["requires_session"] and any(e.get("session_id") is None for e in envelopes):
        raise state.error(InvalidOperationError,
                          f"entity {frag.name!r} requires sessions: set session_id on every message", frag.name)
    incoming = sum(int(e["size"]) for e in envelopes)
    limit = int(opts["max_size_in_megabytes"]) * 1024 * 1024
    if state.sizes.get(frag.key, 0) + incoming > limit:
        raise state.error(QuotaExceededError, f"entity {frag.name!r} is full on partition {state.index} "
                          f"({limit} bytes); receive messages or raise max_size_in_megabytes", frag.name)


def _dedup_key(env: Mapping[str, Any], opts: Mapping[str, Any]) -> str:
    """MessageId, plus the partition key (the session id on a session message) when partitioned."""
    key = str(env["message_id"])
    partition_key = env.get("session_id") or env.get("partition_key")
    if opts.get("enable_partitioning") and partition_key is not None:
        key += "\x1f" + str(partition_key)
    return key
