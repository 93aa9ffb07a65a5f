"""Fan-out: the messages of a topic become rows of its subscriptions.

A subscription's rules are evaluated once per message, when the message is enqueued on the
partition that received it (sent, or come due after being scheduled). The message's payload is
stored once, as a body in the topic's own id range, and every subscription whose rules select it
gets a row that refers to that body, under the message's sequence number: one row however many
of its action-less rules match. Each matching rule with an action gives a copy of its own: its own
body (the action applied) and a sequence number of its own. The body goes when the last row that
refers to it goes (`Queries.delete_messages`).

A large plain batch keeps the shape of a run (see `messages`): one body for the batch, and one row
per subscription that takes all of it unchanged, so that twenty such subscriptions cost twenty
small rows, not two thousand.

Pure: takes what the partition knows (subscriptions, compiled rules, counters) and returns the rows,
bodies and dead-letterings to store; `PartitionState.publish` stores them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from .. import codec
from ..clock import to_datetime
from ..filters import CompiledRules
from ..protocol import ACTIVE, COUNTER_BITS
from . import messages

_ACTIVE = int(ACTIVE)
SESSION_ID_MISSING = ("Session ID is null.", "The subscription requires sessions and the message has no session id.")
"""The dead-letter reason and description of a message without a session id that a session-enabled
subscription selected."""
FILTER_EXCEPTION_REASON = "FilterEvaluationException"
"""The dead-letter reason of a message whose subscription rule failed to evaluate on it."""


class Subscriber(NamedTuple):
    """A subscription as fan-out needs it."""

    key: str
    entity_id: int
    options: Mapping[str, Any]
    rules: CompiledRules


@dataclass
class Fanout:
    """What a fan-out stores: rows and bodies in `Queries.insert_messages` form, the rows to
    dead-letter at once (row id, reason, description), the bytes each subscription's rows hold,
    and the bytes of the bodies (the topic's)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    bodies: list[tuple[Any, ...]] = field(default_factory=list)
    dead_letters: list[tuple[int, str, str]] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    body_bytes: int = 0


def _ttl(env: Mapping[str, Any], *defaults: float | None) -> float | None:
    """A message's time to live: its own, capped by each default that is set."""
    ttl = env.get("ttl")
    for default in defaults:
        if default is not None:
            ttl = default if ttl is None else min(ttl, default)
    return ttl  # type: ignore[no-any-return]


class _Batch:
    """The messages of one fan-out and their shared bodies, stored as rows come to need them."""

    def __init__(self, topic_id: int, incoming: Sequence[tuple[int, Mapping[str, Any]]], out: Fanout) -> None:
        self.topic_id = topic_id
        self.incoming = incoming
        self.out = out
        self.wires: dict[int, Any] = {}
        self.body_of: list[int] = []
        self.run_bodies: list[tuple[int, int, int]] = []
        """(first index, count, body id) of each run body, when the batch is a run."""
        self._pending: dict[int, tuple[Any, ...]] = {}
        envelopes = [env for _, env in incoming]
        counters = [c for c, _ in incoming]
        consecutive = all(b == a + 1 for a, b in zip(counters, counters[1:]))
        if len(incoming) >= messages.RUN_MIN and consecutive and messages.alike(envelopes):
            for start in range(0, len(incoming), messages.RUN_MAX):
                chunk = envelopes[start:start + messages.RUN_MAX]
                payloads = [env["payload"] for env in chunk]
                body_id = (topic_id << COUNTER_BITS) | counters[start]
                self._pending[body_id] = (body_id, len(chunk), codec.packb([len(p) for p in payloads]),
                                          b"".join(payloads))
                self.run_bodies.append((start, len(chunk), body_id))
                self.body_of += [body_id] * len(chunk)
        else:
            for counter, env in incoming:
                body_id = (topic_id << COUNTER_BITS) | counter
                self._pending[body_id] = (body_id, 1, None, env["payload"])
                self.body_of.append(body_id)

    def use(self, body_id: int) -> int:
        """Store body `body_id` (once) and return its id."""
        body = self._pending.pop(body_id, None)
        if body is not None:
            self.out.bodies.append(body)
            self.out.body_bytes += len(body[3])
        return body_id

    def wire(self, index: int) -> Any:
        """Message `index`'s fields, decoded once for all subscriptions."""
        wire = self.wires.get(index)
        if wire is None:
            wire = self.wires[index] = codec.unpackb(self.incoming[index][1]["payload"])
        return wire


def fan_out(topic_id: int, seq_base: int, topic_ttl: float | None, subscribers: Sequence[Subscriber],
            incoming: Sequence[tuple[int, Mapping[str, Any]]], now: float,
            take_counter: Callable[[], int]) -> Fanout:
    """The rows that deliver `incoming` messages, `(counter, envelope)` each, of the topic numbered
    `topic_id` to its subscribers; `take_counter` gives a fresh counter of the topic for each copy
    a rule action makes and each dead-lettered copy."""
    out = Fanout()
    batch = _Batch(topic_id, incoming, out)
    enqueued = to_datetime(now)
    for sub in subscribers:
        fixed = None if sub.rules.needs_properties else sub.rules.select(None, {})
        if fixed is not None and not fixed.plain:
            continue
        if fixed is not None and batch.run_bodies and not sub.options["requires_session"]:
            _add_runs(sub, batch, seq_base, topic_ttl, now)
            continue
        for index, (counter, env) in enumerate(incoming):
            seq = seq_base | counter
            if fixed is None:
                system = {"sequence_number": seq, "enqueued_sequence_number": seq, "enqueued_time_utc": enqueued,
                          "size": int(env["size"]), "delivery_count": 0}
                selection = sub.rules.select(batch.wire(index), system)
            else:
                selection = fixed
            if selection.plain:
                _add_row(sub, batch, seq_base, counter, env, batch.use(batch.body_of[index]), topic_ttl, now)
            for copy in selection.copies:
                payload = codec.packb(copy)
                copy_counter = take_counter()
                body_id = (topic_id << COUNTER_BITS) | copy_counter
                out.bodies.append((body_id, 1, None, payload))
                out.body_bytes += len(payload)
                copy_env = {**env, "payload": payload, "size": len(payload), "session_id": copy.get("session_id"),
                            "ttl": copy.get("time_to_live")}
                _add_row(sub, batch, seq_base, copy_counter, copy_env, body_id, topic_ttl, now)
            if selection.error is not None and sub.options["dead_lettering_on_filter_evaluation_exceptions"]:
                dl_counter = take_counter()
                row_id = _add_row(sub, batch, seq_base, dl_counter, env, batch.use(batch.body_of[index]), topic_ttl,
                                  now)
                out.dead_letters.append((row_id, FILTER_EXCEPTION_REASON, selection.error))
    return out


def _add_row(sub: Subscriber, batch: _Batch, seq_base: int, counter: int, env: Mapping[str, Any], body_id: int,
             topic_ttl: float | None, now: float) -> int:
    """One message's row in a subscription (dead-lettered at once if the subscription needs a
    session id the message lacks); its row id."""
    ttl = _ttl(env, topic_ttl, sub.options["default_message_time_to_live"])
    row_id = (sub.entity_id << COUNTER_BITS) | counter
    size = int(env["size"])
    batch.out.rows.append((row_id, sub.entity_id, seq_base | counter, _ACTIVE, env.get("session_id"), None, now, ttl,
                           None if ttl is None else now + ttl, size, 1, body_id))
    batch.out.sizes[sub.key] = batch.out.sizes.get(sub.key, 0) + size
    if sub.options["requires_session"] and env.get("session_id") is None:
        batch.out.dead_letters.append((row_id, *SESSION_ID_MISSING))
    return row_id


def _add_runs(sub: Subscriber, batch: _Batch, seq_base: int, topic_ttl: float | None, now: float) -> None:
    """A subscription that takes a whole run unchanged: one row per run body."""
    ttl = _ttl(batch.incoming[0][1], topic_ttl, sub.options["default_message_time_to_live"])
    for start, count, body_id in batch.run_bodies:
        counter = batch.incoming[start][0]
        size = sum(int(env["size"]) for _, env in batch.incoming[start:start + count])
        batch.out.rows.append(((sub.entity_id << COUNTER_BITS) | counter, sub.entity_id, seq_base | counter, _ACTIVE,
                               None, None, now, ttl, None if ttl is None else now + ttl, size, count,
                               batch.use(body_id)))
        batch.out.sizes[sub.key] = batch.out.sizes.get(sub.key, 0) + size
