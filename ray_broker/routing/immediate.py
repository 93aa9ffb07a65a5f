"""The router's rounds driven from the caller's thread: a send or a receive that one round of
partition calls serves, made with the channel's blocking `call_now` instead of on the router's
event loop.

A synchronous client would otherwise hand each call to the loop's thread and wait for it back,
and the loop would wait on Ray's callback thread: three thread hand-offs per call, each costing
as much as the engine work on a busy machine. Here the same rounds the loop runs
(`rounds.plan_send`, `rounds.ReceiveRounds`) are run once on the calling thread, under the thread
rule written in `rounds`. Whatever one round cannot finish (no cached definition, a send split
over partitions, a partition that does not answer, a receive that has to wait) is handed back
untouched, or with what is left, to the router's own operation, which retries and waits; a send
handed back keeps its producer tag, so the partition it may have reached answers the retry with
the first reply and nothing is stored twice. Imports no Ray.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..wire import HeldSession, Settlement
from .channel import PartitionUnavailable
from .reaching import ATTEMPT_TIMEOUT_S
from .rounds import ReceiveRounds
from .router import Router


def send_now(router: Router, entity: str, envelopes: list[dict[str, Any]], timeout: float,
             producer: tuple[str, int] | None) -> list[int | None] | None:
    """`router`'s send in one partition call on this thread, when it takes one: a tagged batch
    whose entity's definition is cached, bound for one partition that is available. Returns the
    sequence numbers, or None when the send is to go through the router's loop (an unkeyed batch
    this call may have stored is settled there on this partition first, under the same tag:
    `Sends.doubt`; one it cannot have reached may go elsewhere at once)."""
    definition = router.definitions.cached(entity)
    if definition is None or producer is None:
        return None
    plan = router.sends.plan(definition, [(envelopes, producer)])
    single = plan.single()
    if single is None:
        return None
    k, call, indexes = single
    health = router.reach.health
    if not health.available(k, router.reach.clock()):
        return None
    (outcome,) = router.reach.channel.call_now([(k, [call])], min(timeout, ATTEMPT_TIMEOUT_S))
    if isinstance(outcome, PartitionUnavailable):
        if not outcome.reached:
            health.failed(k, router.reach.clock())
        elif plan.unkeyed and plan.unkeyed[0].tag is not None:
            router.sends.doubt(plan.unkeyed[0].tag, k)
        return None
    if isinstance(outcome, BaseException):
        raise outcome
    health.succeeded(k)
    result: list[int | None] = [None] * len(envelopes)
    router.sends.place(result, indexes, outcome[0], definition["name"], k)
    return result


@dataclass
class ReceiveRound:
    """What one round of a receive on this thread did: the reply so far, and what it left for
    the router's loop (`rest` settlement positions still to apply; `finished` False when more
    messages may be had by asking again or waiting)."""

    reply: dict[str, Any]
    rest: list[int] = field(default_factory=list)
    finished: bool = True

    @property
    def complete(self) -> bool:
        """Whether the reply is the whole receive."""
        return self.finished and not self.rest

    def merged(self, later: dict[str, Any]) -> dict[str, Any]:
        """The reply with the loop's reply for what was left (the `rest` settlements) added."""
        settled = list(self.reply["settled"])
        for i, result in zip(self.rest, later["settled"]):
            settled[i] = result
        return {"messages": self.reply["messages"] + later["messages"], "settled": settled}


def receive_now(router: Router, receiver_id: str, entity: str, subq: int, mode: str, session: HeldSession | None,
                max_count: int, prefetch: int, settlements: list[Settlement],
                partitions: Sequence[int] | None = None) -> ReceiveRound | None:
    """One round of `router`'s receive on this thread: the receiver's cache, then the partitions
    known to hold messages, every carried settlement going in the same calls. Returns None (having
    done nothing) when the round would need the router's loop: no cached definition, the receiver
    busy there (a receive or waits under way), or nothing cached or known to be there."""
    receives = router.receives
    definition = router.definitions.cached(entity)
    state = receives.receiver(receiver_id, entity, subq)
    if definition is None or state.watches or state.busy:
        return None
    session_id = None if session is None else session.session_id
    hosts = receives.receive_hosts(definition, session, partitions)
    hints = router.hints.of(definition["name"], subq, session_id)
    if not state.cache and not any(hints.get(k, 1) for k in hosts):
        return None
    job = ReceiveRounds(state, hints, entity, subq, mode, session, max_count, prefetch, settlements,
                        receives.settlement_groups(definition, session, settlements), time.time())
    chosen = receives.choose(hosts, hints, job.pending, job.wanted) if job.wanted > 0 else []
    calls = job.calls(chosen, settle_others=True)
    outcomes = router.reach.channel.call_now([(c.partition, c.calls) for c in calls], ATTEMPT_TIMEOUT_S)
    try:
        job.apply(calls, outcomes, router.reach.health, router.reach.clock())
    finally:
        state.last_used = router.reach.clock()
    more = job.wanted > 0 and bool(receives.choose(hosts, hints, {}, 1))
    return ReceiveRound(job.reply(), job.left(), finished=bool(job.out) and not more)
