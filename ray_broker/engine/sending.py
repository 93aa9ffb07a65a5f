"""Sending on one partition: enqueue or schedule a batch, with duplicate detection."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..entities import SEND_BLOCKING
from ..errors import InvalidOperationError, MessagingEntityDisabledError, QuotaExceededError
from ..protocol import ACTIVE, MAIN, SCHEDULED
from .state import Fragment, PartitionState


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
    dedup_window = opts["duplicate_detection_history_time_window"] if opts["requires_duplicate_detection"] else None
    rows: list[tuple[Any, ...]] = []
    result: list[int | None] = []
    added = 0
    with state.store.transaction():
        seen: set[str] = set()
        for env in envelopes:
            if dedup_window is not None and env.get("message_id") is not None:
                key = _dedup_key(env, opts)
                expiry = state.queries.dedup_expiry(frag.key, key)
                if key in seen or (expiry is not None and expiry > now):
                    result.append(None)
                    continue
                seen.add(key)
                state.queries.remember_message_id(frag.key, key, now + dedup_window)
            ttl = env.get("ttl")
            if default_ttl is not None:
                ttl = default_ttl if ttl is None else min(ttl, default_ttl)
            scheduled = env.get("scheduled")
            seq = state.next_sequence_number(frag.key, frag.seq_base)
            if scheduled is not None and scheduled > now:
                message_state, visible_at, expires_at = SCHEDULED, scheduled, None
            else:
                message_state, visible_at, expires_at = ACTIVE, scheduled, (None if ttl is None else now + ttl)
            rows.append((frag.key, seq, MAIN, message_state, env.get("session_id"), env.get("message_id"),
                         visible_at, now, ttl, expires_at, int(env["size"]), env["payload"]))
            added += int(env["size"])
            result.append(seq)
        state.queries.insert_messages(rows)
        state.save_counter(frag.key)
        state.sizes.add(frag.key, added)
    return result


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
