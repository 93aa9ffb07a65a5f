"""The send and receive rounds, written once and without I/O: what partition calls a round makes,
and what their outcomes mean. Two drivers run them:
- the router's event loop (`send_routing.Sends`, `coordinator.ReceiveCoordinator`), which retries,
  waits and runs round after round;
- the caller's thread (`Router.try_now`: `Sends.send_now`, `ReceiveCoordinator.receive_now`),
  which runs one round with `PartitionReach.call_now` and hands whatever is left to the loop.

The thread rule: a router belongs to its event loop, and a caller's thread may run a round of its
own only in one case: a receiver with nothing under way on the loop (`ReceiverState.busy` and
`watches` both empty), or a send whose producer tag makes a retry on the loop safe. The state a
round shares with the loop (partition health, hints, cached definitions) is updated by single
assignments, each atomic under the GIL, and is advisory: a stale read costs at most a wasted
call, never a wrong result. Imports no Ray.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..protocol import MAIN, PEEK_LOCK
from ..router_requests import ReceiveReply
from ..wire import Delivered, HeldSession, PartitionRequest, Receive, Send, Settle, Settlement
from . import planner
from .channel import PartitionUnavailable
from .receive_state import Hints, ReceiverState

RELEASING = ("abandon", "release")
"""Settlements that make a message available again."""


def settle_call(entity: str, subq: int, settlements: list[Settlement], positions: list[int],
                session: HeldSession | None) -> Settle:
    """The partition request applying the settlements at `positions`."""
    return Settle(entity, subq, [settlements[i] for i in positions], None if session is None else session.ref)


# ---------------------------------------------------------------------------- sending


@dataclass
class UnkeyedPart:
    """The unkeyed messages of one batch: they go together to one partition, tried from `start` on,
    under `tag` (the batch's producer tag as unkeyed parts carry it)."""

    batch: int
    indexes: list[int]
    start: int
    tag: tuple[str, int] | None


@dataclass
class SendPlan:
    """Where the batches of one send go: `keyed` maps a partition to the `(batch, indexes)` parts
    bound for it (one call there for all of them); `unkeyed` lists each batch's unkeyed part."""

    entity: str
    batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]]
    keyed: dict[int, list[tuple[int, list[int]]]]
    unkeyed: list[UnkeyedPart]

    def keyed_calls(self, k: int) -> list[PartitionRequest]:
        """The requests of partition `k`'s keyed parts, each batch's under its own tag."""
        return [Send(self.entity, [self.batches[b][0][i] for i in indexes], self.batches[b][1])
                for b, indexes in self.keyed[k]]

    def unkeyed_call(self, part: UnkeyedPart) -> Send:
        """The request of an unkeyed part (the same on every partition it is tried on)."""
        return Send(self.entity, [self.batches[part.batch][0][i] for i in part.indexes], part.tag)

    def single(self) -> tuple[int, PartitionRequest, list[int]] | None:
        """The whole send as one call to one partition, when it is that: `(partition, call, indexes)`."""
        if len(self.batches) != 1 or len(self.keyed) + len(self.unkeyed) != 1:
            return None
        if self.unkeyed:
            (part,) = self.unkeyed
            return part.start, self.unkeyed_call(part), part.indexes
        ((k, [(_, indexes)]),) = self.keyed.items()
        return k, self.keyed_calls(k)[0], indexes


def plan_send(definition: dict[str, Any], batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]],
              max_message_bytes: int, sku_name: str, count: int, spread: Iterator[int]) -> SendPlan:
    """Check every batch against the entity and the tier (before anything is sent), and plan
    where each message goes: keyed ones to their partition, a batch's unkeyed ones together from
    the partition its tag hashes to (`planner.spread_start`: a sender's next batch to the next
    partition, and a retry where the batch went), or the next of `spread` for an untagged batch."""
    keyed: dict[int, list[tuple[int, list[int]]]] = {}
    unkeyed: list[UnkeyedPart] = []
    for b, (envelopes, producer) in enumerate(batches):
        planner.check_send(definition, envelopes, max_message_bytes, sku_name)
        by_partition, rest = planner.plan_send(definition, envelopes, count)
        for k, indexes in by_partition.items():
            keyed.setdefault(k, []).append((b, indexes))
        if rest:
            start = next(spread) if producer is None else planner.spread_start(producer, count)
            unkeyed.append(UnkeyedPart(b, rest, start % count, planner.unkeyed_tag(producer)))
    return SendPlan(definition["name"], batches, keyed, unkeyed)


def place(result: list[int | None], indexes: list[int], seqs: Sequence[int | None], hints: Hints,
          entity: str, k: int) -> None:
    """Record partition `k`'s sequence numbers for the messages at `indexes` of a batch, and that
    `k` now holds that many more messages of the entity (of those it was known to hold)."""
    for i, seq in zip(indexes, seqs):
        result[i] = seq
    known = hints.of(entity, MAIN, None)
    known[k] = known.get(k, 0) + len(indexes)


def fewest(ready: list[int], hints: dict[int, int], pending: dict[int, list[int]], need: int) -> list[int]:
    """The partitions a receive round asks, of `ready` (in the order given): the fewest that can
    fill `need` by what they are known to hold. Those with pending settlements come first (the
    receive carries them), then the rest by the messages they hold, most first; a partition not
    known counts as one message, so a receive that knows nothing asks up to `need` partitions at
    once, and one that knows where a batch waits asks that partition alone.

    >>> fewest([0, 1, 2, 3], {0: 0, 1: 5, 2: 120}, {}, 100)
    [2]
    >>> fewest([0, 1, 2, 3], {1: 5, 2: 40}, {3: [0]}, 100)
    [3, 2, 1]
    """
    chosen: list[int] = []
    covered = 0
    for k in sorted(ready, key=lambda k: (k not in pending, -hints.get(k, 0))):
        if covered >= need:
            break
        chosen.append(k)
        covered += hints.get(k, 1)
    return chosen


def shares(chosen: list[int], hints: dict[int, int], need: int) -> list[int]:
    """How many messages a round asks of each of `chosen`: of a partition known to hold some, up
    to that many, in order; what is left of `need` is split among the partitions not known (or,
    when all are known, asked of the first), since what they hold is only a lower bound.

    >>> shares([2], {2: 120}, 100)
    [100]
    >>> shares([3, 2, 1], {1: 5, 2: 40}, 100)
    [55, 40, 5]
    >>> shares([4, 5, 6], {}, 10)
    [4, 3, 3]
    >>> shares([2, 1], {1: 5, 2: 40}, 100)
    [95, 5]
    """
    out = []
    left = need
    for k in chosen:
        take = min(hints.get(k, 0), left)
        out.append(take)
        left -= take
    unknown = [j for j, k in enumerate(chosen) if k not in hints] or [0]
    for n, j in enumerate(unknown):
        out[j] += left // len(unknown) + (1 if n < left % len(unknown) else 0)
    return out


# ---------------------------------------------------------------------------- receiving


@dataclass
class RoundCall:
    """One partition call of a receive round: the operations, the positions of the settlements it
    carries, and whether it receives (else it only settles)."""

    partition: int
    calls: list[PartitionRequest]
    carried: list[int]
    receives: bool


def receive_reply(out: list[tuple[int, dict[str, Any]]], settled: list[Any]) -> ReceiveReply:
    """A receive's reply: the messages handed out, each with its partition, and the results of
    the settlements it carried."""
    return ReceiveReply([dict(r, partition=k) for k, r in out], settled)


class ReceiveRounds:
    """One receive as rounds of partition calls, without I/O.

    It starts with what the receiver's cache holds. Each round, `calls(chosen)` gives the calls
    to make: each chosen partition its share of the messages still wanted (the first also the
    prefetch the cache lacks) with the settlements pending for it, and, when asked, every other
    partition with pending settlements those alone. `apply` takes the calls' outcomes: settlement
    results, messages handed out (the surplus to the cache), each partition's hint; a
    partition that did not answer gets its settlements back in `pending`; an engine error puts
    every message the receive took back in the cache and is raised.
    """

    def __init__(self, state: ReceiverState, hints: dict[int, int], entity: str, subq: int, mode: str,
                 session: HeldSession | None, max_count: int, prefetch: int, settlements: list[Settlement],
                 pending: dict[int, list[int]], wall_now: float) -> None:
        self.state = state
        self.hints = hints
        self.entity = entity
        self.subq = subq
        self.mode = mode
        self.session = session
        self.max_count = max_count
        self.prefetch = prefetch
        self.settlements = settlements
        self.pending = pending
        """Settlement positions by partition still to apply."""
        self.out = state.take(max_count, wall_now)
        """The messages taken for the caller, with their partition."""
        self.settled: list[Any] = [None] * len(settlements)

    @property
    def wanted(self) -> int:
        """How many more messages the receive may take."""
        return self.max_count - len(self.out)

    def left(self) -> list[int]:
        """The positions of the settlements not applied yet."""
        return sorted(i for positions in self.pending.values() for i in positions)

    def calls(self, chosen: list[int], settle_others: bool) -> list[RoundCall]:
        """This round's calls: a receive on each of `chosen` (carrying its pending settlements) and,
        with `settle_others`, a settle on each other partition with pending settlements."""
        asked = shares(chosen, self.hints, self.wanted) if chosen else []
        extra = max(0, self.prefetch - len(self.state.cache)) if self.mode == PEEK_LOCK else 0
        seen = 0 if self.session is None else self.state.highest_sequence(self.session.seen)
        ref = None if self.session is None else self.session.ref
        out = []
        for j, (k, share) in enumerate(zip(chosen, asked)):
            carried = self.pending.pop(k, [])
            calls: list[PartitionRequest] = \
                [settle_call(self.entity, self.subq, self.settlements, carried, self.session)] if carried else []
            calls.append(Receive(self.entity, self.subq, share + (extra if j == 0 else 0), self.mode, ref, seen))
            out.append(RoundCall(k, calls, carried, True))
        if settle_others:
            for k in list(self.pending):
                carried = self.pending.pop(k)
                out.append(RoundCall(k, [settle_call(self.entity, self.subq, self.settlements, carried, self.session)],
                                     carried, False))
        return out

    def apply(self, calls: list[RoundCall], outcomes: Sequence[list[Any] | BaseException]) -> bool:
        """Take a round's outcomes (one per call, in order; the partitions' health is recorded where
        they were called, `PartitionReach`); returns whether it brought messages."""
        fetched: list[list[tuple[int, dict[str, Any]]]] = []
        failure: BaseException | None = None
        for call, outcome in zip(calls, outcomes):
            k = call.partition
            if isinstance(outcome, PartitionUnavailable):
                if call.receives:
                    self.hints[k] = 0
                if call.carried:
                    self.pending.setdefault(k, []).extend(call.carried)
            elif isinstance(outcome, BaseException):
                if call.receives:
                    failure = failure or outcome
                for i in call.carried:
                    self.settled[i] = outcome
            else:
                if call.carried:
                    for i, result in zip(call.carried, outcome[0]):
                        self.settled[i] = result
                if call.receives:
                    reply: Delivered = outcome[-1]
                    self.hints[k] = max(reply.backlog, int(any(self.settlements[i].action in RELEASING
                                                               for i in call.carried)))
                    fetched.append([(k, r) for r in reply.messages])
        self._hand_out(fetched)
        if failure is not None:
            self.state.cache.extendleft(reversed(self.out))
            self.out = []
            raise failure
        return any(fetched)

    def _hand_out(self, fetched: list[list[tuple[int, dict[str, Any]]]]) -> None:
        """Take what the caller still wants of a round's messages; the rest go to the cache."""
        for records in fetched:
            take = self.wanted
            self.out.extend(records[:take])
            self.state.cache.extend(records[take:])

    def reply(self) -> ReceiveReply:
        """The receive's reply so far."""
        return receive_reply(self.out, self.settled)
