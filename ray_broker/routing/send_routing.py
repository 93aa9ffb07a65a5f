"""Sends on the router's loop: keyed messages to their partition, retried there until the caller's
deadline (never rerouted); an unkeyed batch to one partition, moving on when that one is
unavailable; a transaction's commit and the cancelling of scheduled messages on the partitions
that hold them. Where messages go is planned by `rounds.plan_send`."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Iterator, Sequence

from ..errors import InvalidOperationError, PartitionUnavailableError
from ..protocol import MAIN
from ..router_requests import SendRequest, SentAndPeeked
from ..sku import Sku
from ..wire import CancelScheduled, CommitTransaction, Peek, Send, TransactionOperation
from . import planner
from .channel import PartitionUnavailable
from .definitions import Definitions
from .health import RETRY_BACKOFF
from .reaching import PartitionReach
from .receive_state import Hints
from .rounds import SendPlan, UnkeyedPart, place, plan_send

logger = logging.getLogger("ray_broker.sending")

MAX_DOUBTS = 1024
"""How many batches in doubt a router remembers (see `Sends.doubt`)."""

UNKEYED_SETTLE_S = 10.0
"""How long an unkeyed tagged batch keeps to a partition that failed with it, maybe having stored
it, before moving on; a partition failing longer is taken as away (its node likely lost, not
restarting) and held (`health.AWAY_BACKOFF`)."""
MOVED_IN_DOUBT = "moved_in_doubt"
"""The attribute of the warning logged for a batch moved on in doubt that holds its `MovedInDoubt`."""


@dataclass(frozen=True)
class MovedInDoubt:
    """An unkeyed batch that moved on from `partition`, which may have stored it before it
    failed and then stayed away longer than `UNKEYED_SETTLE_S`: its messages may be stored twice
    (at least once, as Service Bus). The warning logged then carries it as `MOVED_IN_DOUBT`, so
    that an operator or a test can tell these copies from any other."""

    entity: str
    partition: int
    message_ids: tuple[str | None, ...]
    """The batch's message ids, in order (None where the sender set none)."""


def moved_in_doubt(k: int, call: Send, what: str) -> None:
    """Warn that the batch of `call` leaves partition `k`, which may have stored it (`what` it did),
    for another partition: a `MovedInDoubt` on the record names it."""
    moved = MovedInDoubt(call.entity, k, tuple(envelope.get("message_id") for envelope in call.envelopes))
    logger.warning("partition %d of %r %s; the batch of %d messages goes to another partition if time allows, "
                   "where it may be stored a second time", k, call.entity, what, len(moved.message_ids),
                   extra={MOVED_IN_DOUBT: moved})


class Sends:
    """A router's sends.

    Args:
        reach: the partitions.
        definitions: the entity definitions cache.
        hints: where messages are known to be (a send marks its partitions).
        sku: the namespace's tier (size limits).
        spread: where the next untagged unkeyed batch starts (a rotating partition index).
    """

    def __init__(self, reach: PartitionReach, definitions: Definitions, hints: Hints, sku: Sku,
                 spread: Iterator[int]) -> None:
        self._reach = reach
        self._definitions = definitions
        self._hints = hints
        self._sku = sku
        self._spread = spread
        self._doubts: dict[tuple[str, int], int] = {}
        """Unkeyed batches (by tag) that a call on the caller's thread (`send_now`) may
        have stored on a partition that then failed, and which partition: see `doubt`."""

    def plan(self, definition: dict[str, Any],
             batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]]) -> SendPlan:
        """`rounds.plan_send` for this namespace: every batch checked, then placed."""
        return plan_send(definition, batches, self._sku.max_message_bytes, self._sku.name, self._reach.count,
                         self._spread)

    def doubt(self, tag: tuple[str, int], k: int) -> None:
        """A call with the unkeyed batch tagged `tag` may have reached partition `k` before it
        failed: the router's send of that batch settles it on `k` first (`_settle_doubt`), however
        its own first call there fails."""
        self._doubts[tag] = k
        if len(self._doubts) > MAX_DOUBTS:  # sends that timed out before the loop took them
            del self._doubts[next(iter(self._doubts))]

    def place(self, result: list[int | None], indexes: list[int], seqs: Sequence[int | None], entity: str,
              k: int) -> None:
        """`rounds.place` with this router's hints."""
        place(result, indexes, seqs, self._hints, entity, k)

    def send_now(self, request: SendRequest) -> list[int | None] | None:
        """`send` in one partition call on the caller's thread, when it takes one: a tagged batch
        whose entity's definition is cached, bound for one partition that is available. Returns the
        sequence numbers, or None when the send is to go through the router's loop (an unkeyed
        batch this call may have stored is settled there on this partition first, under the same
        tag: `doubt`; one it cannot have reached may go elsewhere at once)."""
        definition = self._definitions.cached(request.entity)
        if definition is None or request.producer is None:
            return None
        plan = self.plan(definition, [(request.envelopes, request.producer)])
        single = plan.single()
        if single is None or not self._reach.health.available(single[0], self._reach.clock()):
            return None
        k, call, indexes = single
        (outcome,) = self._reach.call_now([(k, [call])], request.timeout)
        if isinstance(outcome, PartitionUnavailable):
            if outcome.reached and plan.unkeyed and plan.unkeyed[0].tag is not None:
                self.doubt(plan.unkeyed[0].tag, k)
            return None
        if isinstance(outcome, BaseException):
            raise outcome
        result: list[int | None] = [None] * len(request.envelopes)
        self.place(result, indexes, outcome[0], plan.entity, k)
        return result

    async def send(self, entity: str, envelopes: list[dict[str, Any]], timeout: float,
                   producer: tuple[str, int] | None = None) -> list[int | None]:
        """Route and store messages; returns sequence numbers in order (None for dropped duplicates).

        `producer` tags the batch (the sender's id and its batch number): every partition it
        reaches stores the tag with the messages and answers a repeat of it (a retry after a lost
        reply) with the original sequence numbers, storing nothing twice. An unkeyed batch with
        a tag starts at the partition the tag hashes to, so a retry goes where the batch went.
        """
        return (await self.send_batches(entity, [(envelopes, producer)], timeout))[0]

    async def send_batches(self, entity: str, batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]],
                           timeout: float) -> list[list[int | None]]:
        """Store several batches, each as `send` stores it (under its own producer tag), in as few
        partition calls as routing allows: the keyed parts of every batch bound for one partition
        go in one call there (one store commit); unkeyed parts spread batch by batch. Every batch
        is checked before any is sent. Returns each batch's sequence numbers."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        plan = self.plan(definition, batches)
        results: list[list[int | None]] = [[None] * len(envelopes) for envelopes, _ in batches]

        async def to_partition(k: int) -> None:
            replies = await self._reach.keyed_calls(k, plan.keyed_calls(k), deadline=deadline, entity=entity)
            for (b, indexes), seqs in zip(plan.keyed[k], replies):
                self.place(results[b], indexes, seqs, plan.entity, k)

        jobs: list[Awaitable[None]] = [to_partition(k) for k in plan.keyed]
        jobs.extend(self._send_spread(plan, part, results[part.batch], deadline) for part in plan.unkeyed)
        await asyncio.gather(*jobs)
        return results

    async def _send_spread(self, plan: SendPlan, part: UnkeyedPart, result: list[int | None],
                           deadline: float) -> None:
        """Send an unkeyed part to one partition (from its start on), moving to another when one
        is unavailable.

        A partition that failed after the batch was sent to it may have stored it, and only that
        partition recognizes a repeat of a tagged batch: so it is retried for up to
        `UNKEYED_SETTLE_S` (a restart takes a second or two) before the batch moves on, once per
        batch. Only a partition that stays away longer, or another that fails with the batch after
        that (or with an untagged batch), can leave a copy behind (at-least-once, as Service Bus):
        each such move is warned of (`moved_in_doubt`). A call that cannot have reached its
        partition (refused before it was sent) leaves no doubt: the batch moves on at once. A
        partition failing for longer than `UNKEYED_SETTLE_S` is held away
        (`PartitionHealth.hold_away`), longer each time it is still away after a hold.
        """
        reach, count = self._reach, self._reach.count
        call = plan.unkeyed_call(part)
        doubted = False
        reached = self._doubts.pop(part.tag, None) if part.tag is not None else None
        if reached is not None:
            doubted = True
            seqs = await self._settle_doubt(reached, call, deadline)
            if seqs is not None:
                self.place(result, part.indexes, seqs, plan.entity, reached)
                return
        while True:
            order = reach.health.order([(part.start + j) % count for j in range(count)], reach.clock())
            for k in order:
                remaining = deadline - reach.clock()
                if remaining <= 0:
                    break
                try:
                    (seqs,) = await reach.call(k, [call], timeout=remaining)
                except PartitionUnavailable as exc:
                    seqs = None
                    if exc.reached and part.tag is not None and not doubted:
                        doubted = True
                        seqs = await self._settle_doubt(k, call, deadline)
                    elif exc.reached:
                        moved_in_doubt(k, call, "failed with it")
                    if seqs is None:
                        if reach.health.failing_for(k, reach.clock()) >= UNKEYED_SETTLE_S:
                            reach.health.hold_away(k, reach.clock())
                        continue
                self.place(result, part.indexes, seqs, plan.entity, k)
                return
            if reach.clock() >= deadline:
                raise PartitionUnavailableError(
                    f"no partition of {plan.entity!r} accepted the messages before the timeout; retry later",
                    entity=plan.entity)
            await reach.sleep(0.05)

    async def _settle_doubt(self, k: int, call: Send, deadline: float) -> list[int | None] | None:
        """Retry a tagged batch on partition `k`, which failed with it, for up to `UNKEYED_SETTLE_S`:
        its reply (the first one, if `k` had stored the batch) or None if `k` stayed away."""
        reach = self._reach
        give_up = min(deadline, reach.clock() + UNKEYED_SETTLE_S)
        attempt = 0
        while reach.clock() < give_up:
            await reach.sleep(min(RETRY_BACKOFF.delay(attempt), max(give_up - reach.clock(), 0.0)))
            attempt += 1
            try:
                (seqs,) = await reach.call(k, [call], timeout=give_up - reach.clock())
                return seqs  # type: ignore[no-any-return]
            except PartitionUnavailable:
                continue
        moved_in_doubt(k, call, "stayed unavailable after a send that may have reached it")
        return None

    async def send_peek_session(self, entity: str, envelopes: list[dict[str, Any]], timeout: float,
                                producer: tuple[str, int] | None, max_count: int) -> SentAndPeeked:
        """Store messages of one session and browse that session as it stands right after them, in
        one call to its partition (one store commit, so nothing comes between the two): the
        sequence numbers and the records (up to `max_count`, in sequence order) those
        stored before and the new ones. A retry after a lost reply stores nothing twice (`producer`
        tags the batch). `InvalidOperationError` unless the entity requires sessions and every
        message names the same session."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        sessions = {envelope.get("session_id") for envelope in envelopes}
        if not definition["options"]["requires_session"] or len(sessions) != 1 or None in sessions:
            raise InvalidOperationError(
                f"send_peek_session needs a session-enabled entity and messages of one session; {definition['name']!r}"
                f" {'requires' if definition['options']['requires_session'] else 'does not require'} sessions and "
                f"the messages name sessions {sorted(map(str, sessions))}", entity=entity)
        plan = self.plan(definition, [(envelopes, producer)])
        single = plan.single()
        assert single is not None, "messages of one session go to one partition"
        k, call, indexes = single
        session_id = str(next(iter(sessions)))
        seqs, records = await self._reach.keyed_calls(
            k, [call, Peek(plan.entity, MAIN, 0, max_count, session_id, None)], deadline=deadline, entity=entity)
        result: list[int | None] = [None] * len(envelopes)
        self.place(result, indexes, seqs, plan.entity, k)
        return SentAndPeeked(result, records)

    async def commit_transaction(self, partition: int, transaction_id: str, deadline: float,
                                 operations: list[TransactionOperation], timeout: float) -> list[Any]:
        """Commit a transaction's operations (sends and settlements) on `partition` (the one they
        are pinned to), retried there until `timeout` (a repeat of a commit that took effect
        answers with its results)."""
        request = CommitTransaction(transaction_id, deadline, operations)
        return await self._reach.keyed(partition, request, deadline=self._reach.clock() + timeout)  # type: ignore[no-any-return]

    async def cancel_scheduled(self, entity: str, sequence_numbers: list[int], timeout: float) -> None:
        """Cancel scheduled messages on the partitions that hold them."""
        deadline = self._reach.clock() + timeout
        definition = await self._definitions.get(entity)
        groups = planner.group_by_sequence(definition, sequence_numbers, self._reach.count)
        await asyncio.gather(*(self._reach.keyed(k, CancelScheduled(entity, [sequence_numbers[i] for i in idx]),
                                                 deadline=deadline, entity=entity) for k, idx in groups.items()))
