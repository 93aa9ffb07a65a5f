"""The router's hot path on the caller's thread: a send or a receive that one round of partition
calls serves, made with the channel's blocking `call_now` instead of on the router's event loop.

A synchronous client would otherwise hand each call to the loop's thread and wait for it back,
and the loop would wait on Ray's callback thread: three thread hand-offs per call, each costing
as much as the engine work on a busy machine. Here the same routing decisions (`Router.choose`,
`Router.receive_requests`, `Router.plan_send`, ...) are made in the calling thread and the
partitions are called with one blocking wait. Whatever this path cannot finish in one round (no
cached definition, a batch split over partitions, a partition that does not answer, a receive
that has to wait) it hands back untouched, or with what is left, to the router's own operation,
which retries and waits; a send handed back keeps its producer tag, so the partition it may have
reached answers the retry with the first reply and nothing is stored twice. Imports no Ray.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from . import planner
from .channel import PartitionUnavailable
from .router import ATTEMPT_TIMEOUT_S, Router, Session, receive_reply, settle_call


def send_now(router: Router, entity: str, envelopes: list[dict[str, Any]], timeout: float,
             producer: tuple[str, int] | None) -> list[int | None] | None:
    """`router.send` in one partition call on this thread, when it takes one: a tagged batch
    whose entity's definition is cached, bound for one partition that is available. Returns the
    sequence numbers, or None when the send is to go through `router.send` (retried there under
    the same tag if this call may have reached the partition and its reply was lost; sent
    elsewhere first if it cannot have)."""
    definition = router.cached_definition(entity)
    if definition is None or producer is None:
        return None
    keyed, unkeyed = router.plan_send(definition, envelopes)
    if unkeyed and keyed or len(keyed) > 1:
        return None
    if unkeyed:
        k, tag = planner.spread_start(producer, router.count), planner.unkeyed_tag(producer)
    else:
        (k,), tag = keyed, producer
    if not router.health.available(k, router.clock()):
        return None
    (outcome,) = router.channel.call_now([(k, [("send", (entity, envelopes, tag))])], min(timeout, ATTEMPT_TIMEOUT_S))
    if isinstance(outcome, PartitionUnavailable):
        if not outcome.reached:
            router.health.failed(k, router.clock())
        return None
    if isinstance(outcome, BaseException):
        raise outcome
    router.health.succeeded(k)
    result: list[int | None] = [None] * len(envelopes)
    router.place(result, list(range(len(envelopes))), outcome[0], definition, k)
    return result


@dataclass
class ReceiveRound:
    """What one round of a receive on this thread did: the reply so far, and what it left for
    `router.receive` (`rest` settlement positions still to apply; `finished` False when more
    messages may be had by asking again or waiting)."""

    reply: dict[str, Any]
    rest: list[int] = field(default_factory=list)
    finished: bool = True

    @property
    def complete(self) -> bool:
        """Whether the reply is the whole receive."""
        return self.finished and not self.rest

    def merged(self, later: dict[str, Any]) -> dict[str, Any]:
        """The reply with `router.receive`'s reply for what was left (the `rest` settlements) added."""
        settled = list(self.reply["settled"])
        for i, result in zip(self.rest, later["settled"]):
            settled[i] = result
        return {"messages": self.reply["messages"] + later["messages"], "settled": settled}


def receive_now(router: Router, receiver_id: str, entity: str, subq: int, mode: str, session: Session | None,
                max_count: int, prefetch: int, settlements: list[list[Any]],
                partitions: Sequence[int] | None = None) -> ReceiveRound | None:
    """One round of `router.receive` on this thread: the receiver's cache, then the partitions
    known to hold messages, every carried settlement going in the same calls. Returns None (having
    done nothing) when the round would need the router's loop: no cached definition, waiting
    receives of this receiver under way, or nothing cached or known to be there."""
    definition = router.cached_definition(entity)
    state = router.receiver(receiver_id, entity, subq)
    if definition is None or state.watches:
        return None
    session_id = None if session is None else session["session_id"]
    hosts = router.receive_hosts(definition, session, partitions)
    hints = router.hints(definition, subq, session_id)
    if not state.cache and not any(hints.get(k, True) for k in hosts):
        return None
    pending = router.settlement_groups(definition, session, settlements)
    out = state.take(max_count, time.time())
    chosen = router.choose(hosts, hints, pending, max_count - len(out)) if len(out) < max_count else []
    requests = router.receive_requests(state, entity, subq, mode, session, chosen, max_count - len(out), prefetch,
                                       settlements, pending) if chosen else []
    settle_only = [(k, [settle_call(entity, subq, settlements, idx, session)], idx) for k, idx in pending.items()]
    outcomes = router.channel.call_now([(k, calls) for k, calls, _ in requests + settle_only], ATTEMPT_TIMEOUT_S)
    settled: list[Any] = [None] * len(settlements)
    rest: list[int] = []
    fetched: list[list[tuple[int, dict[str, Any]]]] = []
    failure: BaseException | None = None
    for (k, _, carried), outcome in zip(requests, outcomes):
        if isinstance(outcome, PartitionUnavailable):
            router.health.failed(k, router.clock())
            hints[k] = False
            rest.extend(carried)
        elif isinstance(outcome, BaseException):
            failure = failure or outcome
        else:
            router.health.succeeded(k)
            fetched.append(router.received(k, outcome, carried, settlements, settled, hints))
    for (k, _, idx), outcome in zip(settle_only, outcomes[len(requests):]):
        if isinstance(outcome, PartitionUnavailable):
            rest.extend(idx)
            continue
        for i, result in zip(idx, [outcome] * len(idx) if isinstance(outcome, BaseException) else outcome[0]):
            settled[i] = result
    out.extend(router.hand_out(state, fetched, max_count - len(out)))
    state.last_used = router.clock()
    if failure is not None:
        state.cache.extendleft(reversed(out))
        raise failure
    more = len(out) < max_count and bool(router.choose(hosts, hints, {}, 1))
    return ReceiveRound(receive_reply(out, settled), sorted(rest), finished=bool(out) and not more)
