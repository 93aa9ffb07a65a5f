"""The broker's metrics on one partition, with no Ray: what each operation adds to them.

A `Meter` runs the partition's engine operations and gathers, per entity, the messages sent,
received, completed, dead-lettered and expired, the lock losses, and the send and receive
latencies, in plain dicts (well under a microsecond per call). The partition actor hands the
gathered `Tally` to Ray's metrics every second or so (`actors/metrics.py`), one increment per
counter and entity rather than one per call or per message.

Most counts follow from an operation's request and result (`count_operation`). Expiries
and dead-letterings also happen inside the engine (a receive screening out an expired message, an
abandon past the maximum delivery count, housekeeping): `watch` observes those as the engine makes
them, and the meter keeps them only once the operation that made them has succeeded (a failed
operation's store changes are rolled back). A message that expires into its dead-letter queue
counts as both expired and dead-lettered.

Entities are tagged by their lower-cased path (`orders`, `events/subscriptions/audit`).

Example:
    >>> from ray_broker.wire import Send
    >>> meter = Meter()
    >>> meter.run(lambda: [1, 2, None], Send("Orders", [{}, {}, {}]))
    [1, 2, None]
    >>> meter.take().counts
    {('sent', 'orders'): 2}
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

from .engine import state as state_events
from .errors import MessageLockLostError, SessionLockLostError
from .routing.planner import hosts
from .wire import CommitTransaction, PartitionRequest, Receive, ReceiveDeferred, Send, Settle, Settlement

if TYPE_CHECKING:
    from .engine.partition import PartitionEngine

SENT = "sent"
RECEIVED = "received"
COMPLETED = "completed"
DEAD_LETTERED = state_events.DEAD_LETTERED
EXPIRED = state_events.EXPIRED
LOCK_LOST = "lock_lost"
COUNTERS = (SENT, RECEIVED, COMPLETED, DEAD_LETTERED, EXPIRED, LOCK_LOST)
"""The per-entity counters, in the order the README lists them."""

SEND = "send"
RECEIVE = "receive"
TIMED: dict[type[Any], str] = {Send: SEND, Receive: RECEIVE, ReceiveDeferred: RECEIVE}
"""The requests whose duration is recorded, and the latency each feeds."""

RUNTIME_COUNTS = ("active", "scheduled", "dead_letter")
"""The `PartitionEngine.runtime` counts published as gauges."""

LOCK_ERRORS = (MessageLockLostError, SessionLockLostError)
"""The errors that count as a lock loss, whether a settlement's result or an operation's failure."""

T = TypeVar("T")


@dataclass
class Tally:
    """Counts gathered on one partition since the last `Meter.take`.

    Attributes:
        counts: messages (or lock losses) per `(counter, entity)`; only non-zero entries.
        latencies: durations in seconds per `(latency, entity)`, one per timed call.
    """

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    latencies: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, counter: str, entity: str, n: int) -> None:
        """Add `n` to `counter` of `entity` (nothing when `n` is 0)."""
        if n:
            key = (counter, entity)
            self.counts[key] = self.counts.get(key, 0) + n

    def observe(self, latency: str, entity: str, seconds: float) -> None:
        """Record one call's duration."""
        self.latencies.setdefault((latency, entity), []).append(seconds)

    def merge(self, other: Tally) -> None:
        """Add everything `other` gathered."""
        for (counter, entity), n in other.counts.items():
            self.add(counter, entity, n)
        for key, values in other.latencies.items():
            self.latencies.setdefault(key, []).extend(values)


def count_operation(tally: Tally, request: PartitionRequest, result: Any) -> None:
    """Add what a successful partition request did to `tally`, from the request and its result.

    `Send` counts the messages stored (not dropped duplicates); `Receive` and `ReceiveDeferred`
    the messages handed out; `Settle` the completes that succeeded and the settlements that met a
    lost lock; `CommitTransaction` its sends and settlements. Dead-letterings and expiries are
    counted by `watch` as the engine makes them. Other requests count nothing.
    """
    if isinstance(request, Send):
        _count_send(tally, request.entity, result)
    elif isinstance(request, Receive):
        tally.add(RECEIVED, request.entity.lower(), len(result["messages"]))
    elif isinstance(request, ReceiveDeferred):
        tally.add(RECEIVED, request.entity.lower(), len(result))
    elif isinstance(request, Settle):
        _count_settle(tally, request.entity, request.settlements, result)
    elif isinstance(request, CommitTransaction):
        for op, outcome in zip(request.operations, result):
            if isinstance(op, Send):
                _count_send(tally, op.entity, outcome)
            else:
                _count_settle(tally, op.entity, op.settlements, outcome)


def _count_send(tally: Tally, entity: str, sequence_numbers: Iterable[int | None]) -> None:
    tally.add(SENT, entity.lower(), sum(1 for seq in sequence_numbers if seq is not None))


def _count_settle(tally: Tally, entity: str, settlements: Sequence[Settlement], results: Sequence[Any]) -> None:
    completed = lost = 0
    for settlement, outcome in zip(settlements, results):
        if isinstance(outcome, LOCK_ERRORS):
            lost += 1
        elif settlement.action == "complete" and outcome is None:
            completed += 1
    key = entity.lower()
    tally.add(COMPLETED, key, completed)
    tally.add(LOCK_LOST, key, lost)


class Meter:
    """Runs a partition's engine operations and gathers what they did (see the module docstring).

    Args:
        clock: the timer for latencies (seconds; `time.perf_counter` unless a test injects one).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._tally = Tally()
        self._events = Tally()
        """Expiries and dead-letterings the engine made during the operation under way."""

    def run(self, function: Callable[[], T], request: PartitionRequest | None = None) -> T:
        """Call `function`, which runs the partition request `request` (or, without one, engine
        work of the partition's own, such as housekeeping), and count what it did.

        If it raises, the engine events it produced are dropped (its changes were rolled back) and
        a lock error counts as a lock loss of the entity it names; the error propagates.
        """
        if self._events.counts:
            self._tally.merge(self._events)
            self._events = Tally()
        started = self._clock()
        try:
            result = function()
        except Exception as exc:
            self._events = Tally()
            if isinstance(exc, LOCK_ERRORS):
                self._tally.add(LOCK_LOST, str(exc.entity or "").lower(), 1)
            raise
        if isinstance(request, (Send, Receive, ReceiveDeferred)):
            self._tally.observe(TIMED[type(request)], request.entity.lower(), self._clock() - started)
        if request is not None:
            count_operation(self._tally, request, result)
        return result

    def event(self, counter: str, entity: str, n: int) -> None:
        """The engine expired or dead-lettered `n` messages of `entity` (kept once the operation
        under way succeeds; an engine call made outside `run` is kept at the next `run` or `take`)."""
        self._events.add(counter, entity, n)

    def take(self) -> Tally:
        """Everything gathered since the previous take; the meter starts again from nothing."""
        taken, self._tally = self._tally, Tally()
        taken.merge(self._events)
        self._events = Tally()
        return taken


def watch(engine: PartitionEngine, meter: Meter) -> None:
    """Report the expiries and dead-letterings `engine` makes to `meter.event`, per message (a run
    of messages counts each of them), through the partition's event hook."""
    engine.state.on_event = meter.event


def runtime_counts(engine: PartitionEngine) -> dict[str, dict[str, int]]:
    """The `RUNTIME_COUNTS` of every entity this partition hosts, by entity."""
    counts: dict[str, dict[str, int]] = {}
    for definition in engine.list_entities():
        if engine.index in hosts(definition, engine.partition_count):
            name = str(definition["name"])
            runtime = engine.runtime(name)
            counts[name.lower()] = {key: int(runtime[key]) for key in RUNTIME_COUNTS}
    return counts


def with_vanished(counts: Mapping[str, Mapping[str, int]], previous: Iterable[str]) -> dict[str, dict[str, int]]:
    """`counts`, plus zeros for each entity of `previous` no longer there (deleted), so that its
    gauges read 0 rather than their last value."""
    result = {entity: dict(values) for entity, values in counts.items()}
    for entity in previous:
        result.setdefault(entity, dict.fromkeys(RUNTIME_COUNTS, 0))
    return result
