"""Sending on one partition: enqueue or schedule a batch, with duplicate detection."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..entities import SEND_BLOCKING
from .. import codec
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityDisabledError, QuotaExceededError
from ..protocol import ACTIVE, COUNTER_BITS, SCHEDULED
from . import messages
from .state import Fragment, PartitionState

_ACTIVE, _SCHEDULED = int(ACTIVE), int(SCHEDULED)

PRODUCER_BATCH_HISTORY = 32
"""How many of an idempotent producer's latest batches a partition recognizes, per entity."""


def send(state: PartitionState, entity: str, envelopes: Sequence[Mapping[str, Any]],
         producer: tuple[str, int] | None = None) -> list[int | None]:
    """Enqueue messages (or schedule those with a future scheduled time); on a topic, deliver
    them to its subscriptions (see `fanout`).

    Each envelope holds `payload` (encoded message), `size`, and optionally `message_id`,
    `session_id`, `partition_key`, `ttl` (seconds) and `scheduled` (epoch seconds).
    Returns each message's sequence number, or None for a dropped duplicate.

    `producer` is `(producer_id, batch_number)` from an idempotent producer: a batch this
    partition already stored for that producer and entity (one of its last
    `PRODUCER_BATCH_HISTORY`) is not stored again, and the sequence numbers of the first time
    come back. The record is written in the same transaction as the messages.
    """
    frag = state.fragment(entity)
    if frag.kind == "subscription":
        raise state.error(InvalidOperationError, f"{frag.name!r} is a subscription: send to its topic "
                          f"{frag.definition['topic']!r}", frag.name)
    producer_id, batch_number = _check_producer(state, producer)
    with state.store.transaction():
        history = _producer_history(state, frag, producer_id)
        if batch_number in history:
            return unpack_runs(history[batch_number])
        seqs = _store(state, frag, envelopes)
        if producer_id is not None:
            history[batch_number] = pack_runs(seqs)
            _save_producer_history(state, frag, producer_id, history)
    return seqs


def _store(state: PartitionState, frag: Fragment, envelopes: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Store a batch (inside a transaction); its sequence numbers (None for dropped duplicates)."""
    _check_sendable(state, frag, envelopes)
    opts = frag.options
    now = state.clock.now()
    keep = _new_messages(state, frag, envelopes, now) if opts["requires_duplicate_detection"] else None
    accepted = envelopes if keep is None else [env for env, new in zip(envelopes, keep) if new]
    counter = state.take_counters(frag, len(accepted))
    rows: list[tuple[Any, ...]] = []
    bodies: list[tuple[Any, ...]] = []
    default_ttl = opts["default_message_time_to_live"]
    if frag.kind == "topic":
        due = [(counter + offset, env) for offset, env in enumerate(accepted) if not _later(env, now)]
        for offset, env in enumerate(accepted):
            if _later(env, now):
                _add_message(frag, env, counter + offset, now, default_ttl, rows, bodies)
        state.publish(frag, due, now)
    elif len(accepted) >= messages.RUN_MIN and messages.alike(accepted):
        for start in range(0, len(accepted), messages.RUN_MAX):
            _add_run(frag, accepted[start:start + messages.RUN_MAX], counter + start, now, default_ttl, rows, bodies)
    else:
        for offset, env in enumerate(accepted):
            _add_message(frag, env, counter + offset, now, default_ttl, rows, bodies)
    state.queries.insert_messages(rows, bodies)
    state.sizes.add(frag.key, sum(row[9] for row in rows))
    seqs: list[int | None] = [frag.seq_base | (counter + offset) for offset in range(len(accepted))]
    if keep is None:
        return seqs
    stored = iter(seqs)
    return [next(stored) if new else None for new in keep]


def _ttl(env: Mapping[str, Any], default_ttl: float | None) -> float | None:
    """A message's time to live: its own, capped by the entity's default."""
    ttl = env.get("ttl")
    if default_ttl is not None:
        ttl = default_ttl if ttl is None else min(ttl, default_ttl)
    return ttl  # type: ignore[no-any-return]


def _later(env: Mapping[str, Any], now: float) -> bool:
    """Whether a message is scheduled for a time still to come."""
    scheduled = env.get("scheduled")
    return scheduled is not None and scheduled > now


def _add_message(frag: Fragment, env: Mapping[str, Any], counter: int, now: float, default_ttl: float | None,
                 rows: list[tuple[Any, ...]], bodies: list[tuple[Any, ...]]) -> None:
    """The row and body of one message (scheduled if its time is still to come)."""
    ttl, scheduled = _ttl(env, default_ttl), env.get("scheduled")
    if _later(env, now):
        message_state, expires_at = _SCHEDULED, None
    else:
        message_state, expires_at = _ACTIVE, (None if ttl is None else now + ttl)
    row_id = (frag.entity_id << COUNTER_BITS) | counter
    rows.append((row_id, frag.entity_id, frag.seq_base | counter, message_state, env.get("session_id"), scheduled,
                 now, ttl, expires_at, int(env["size"]), 1, row_id))
    bodies.append((row_id, 1, None, env["payload"]))


def _add_run(frag: Fragment, envelopes: Sequence[Mapping[str, Any]], counter: int, now: float,
             default_ttl: float | None, rows: list[tuple[Any, ...]], bodies: list[tuple[Any, ...]]) -> None:
    """The row and body of a run of alike messages: one of each, whatever their number."""
    ttl = _ttl(envelopes[0], default_ttl)
    payloads = [env["payload"] for env in envelopes]
    lengths = [len(payload) for payload in payloads]
    row_id = (frag.entity_id << COUNTER_BITS) | counter
    rows.append((row_id, frag.entity_id, frag.seq_base | counter, _ACTIVE, None, None, now, ttl,
                 None if ttl is None else now + ttl, sum(lengths), len(envelopes), row_id))
    bodies.append((row_id, len(envelopes), codec.packb(lengths), b"".join(payloads)))


def _check_producer(state: PartitionState, producer: Any) -> tuple[str | None, int | None]:
    """`(producer_id, batch_number)` checked, or (None, None) without a producer."""
    if producer is None:
        return None, None
    if (not isinstance(producer, (tuple, list)) or len(producer) != 2 or not isinstance(producer[0], str)
            or not isinstance(producer[1], int) or isinstance(producer[1], bool)):
        raise state.error(InvalidArgumentError,
                          f"producer must be a (producer_id: str, batch_number: int) pair, got {producer!r}")
    return producer[0], producer[1]


def _producer_history(state: PartitionState, frag: Fragment, producer_id: str | None) -> dict[int, list[Any]]:
    """A producer's recent batches to an entity: batch number -> sequence numbers as `pack_runs`
    gives them, oldest first."""
    if producer_id is None:
        return {}
    stored = state.queries.producer_batches(frag.key, producer_id)
    return {} if stored is None else {int(number): runs for number, runs in codec.unpackb(stored)}


def _save_producer_history(state: PartitionState, frag: Fragment, producer_id: str,
                           history: dict[int, list[Any]]) -> None:
    """Store a producer's last `PRODUCER_BATCH_HISTORY` batches to an entity."""
    recent = list(history.items())[-PRODUCER_BATCH_HISTORY:]
    state.queries.save_producer_batches(frag.key, producer_id, codec.packb(recent), state.clock.now())


def pack_runs(seqs: Sequence[int | None]) -> list[list[Any]]:
    """A batch's sequence numbers as runs `[first, count]` of consecutive numbers (`[None, count]`
    for dropped duplicates): a stored batch is one run, so a producer's history stays a few bytes
    a batch however large its batches."""
    if seqs and seqs[0] is not None and list(seqs) == list(range(seqs[0], seqs[0] + len(seqs))):
        return [[seqs[0], len(seqs)]]
    runs: list[list[Any]] = []
    for seq in seqs:
        if runs:
            last = runs[-1]
            if (seq is None and last[0] is None) or (seq is not None and last[0] is not None
                                                      and seq == last[0] + last[1]):
                last[1] += 1
                continue
        runs.append([seq, 1])
    return runs


def unpack_runs(runs: Sequence[Any]) -> list[int | None]:
    """The sequence numbers `pack_runs` packed (a history written before runs holds them as they are)."""
    if not runs or not isinstance(runs[0], list):
        return list(runs)
    seqs: list[int | None] = []
    for first, count in runs:
        seqs.extend([None] * count if first is None else range(first, first + count))
    return seqs


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
    for position, envelope in enumerate(envelopes):
        if not _is_message(envelope.get("payload")):
            raise state.error(InvalidArgumentError, f"message {position} of the batch to {frag.name!r} is not an "
                              "encoded message (a msgpack map with a bytes body); send rb.Message objects through a "
                              "sender", frag.name)
    incoming = sum(int(e["size"]) for e in envelopes)
    limit = int(opts["max_size_in_megabytes"]) * 1024 * 1024
    if state.sizes.get(frag.key, 0) + incoming > limit:
        raise state.error(QuotaExceededError, f"entity {frag.name!r} is full on partition {state.index} "
                          f"({limit} bytes); receive messages or raise max_size_in_megabytes", frag.name)


def _is_message(payload: Any) -> bool:
    """Whether `payload` is a message's wire form, encoded (a map with a bytes body): a partition
    stores nothing that receivers could not decode, and decodes only msgpack."""
    if not isinstance(payload, bytes):
        return False
    try:
        wire = codec.unpackb(payload)
    except Exception:  # noqa: BLE001 - msgpack raises several kinds for bytes that are not one value
        return False
    return isinstance(wire, dict) and isinstance(wire.get("body"), bytes)


def _dedup_key(env: Mapping[str, Any], opts: Mapping[str, Any]) -> str:
    """MessageId, plus the partition key (the session id on a session message) when partitioned."""
    key = str(env["message_id"])
    session_id = env.get("session_id")
    partition_key = session_id if session_id is not None else env.get("partition_key")
    if opts.get("enable_partitioning") and partition_key is not None:
        key += "\x1f" + str(partition_key)
    return key
