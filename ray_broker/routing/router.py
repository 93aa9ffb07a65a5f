"""The router: where each operation goes and what happens when a partition does not answer.

One implementation, used by the gateway (for callers without partition handles), embedded in
every client (which then sends and receives straight from partitions) and in each partition
that auto-forwards:
- keyed work goes to its partition and is retried there with back-off until the caller's
  deadline, then `PartitionUnavailableError`; it is never rerouted;
- an unkeyed batch goes to one partition (round robin, a sender's next batch to the next
  partition: `planner.spread_start`) and moves to another when that one is unavailable;
- a receive is served from the partitions known to hold messages, with the receiver's carried
  settlements in the same partition call, and waits on every host partition at once (no polling)
  when none has any.

A router is made of parts with one job each: `reaching.PartitionReach` (every partition call,
retries, health), `definitions.Definitions` (the entity cache), `send_routing.Sends`,
`coordinator.ReceiveCoordinator` and the rounds they run (`rounds`), `waiting.PartitionWaits`,
`browsing.Browsing`, `session_routing.SessionRouting` and `purging.Purges`. A client asks for an
operation with a typed request (`router_requests`), which `Router.run` gives to the part that
serves it by the request's type; `Router.try_now` runs what one round serves on the caller's
thread and says what is left for the loop.
"""
from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..errors import InvalidOperationError
from ..router_requests import (
    AcceptSessionRequest,
    CancelScheduledRequest,
    CloseReceiverRequest,
    CommitTransactionRequest,
    DefinitionRequest,
    PeekRequest,
    PeekSessionRequest,
    PurgeRequest,
    ReceiveDeferredRequest,
    ReceiveReply,
    ReceiveRequest,
    RouterRequest,
    SendBatchesRequest,
    SendPeekSessionRequest,
    SendRequest,
    SessionCallRequest,
    SettleRequest,
)
from ..sku import Sku
from .browsing import Browsing
from .channel import PartitionChannel
from .coordinator import ReceiveCoordinator, ReceiveRound
from .definitions import Definitions
from .purging import Purges
from .reaching import PartitionReach
from .receive_state import Hints
from .send_routing import Sends
from .session_routing import SessionRouting
from .waiting import PartitionWaits


@dataclass(frozen=True)
class Later:
    """What `Router.try_now` left for the router's loop: `request` to run there within `timeout`
    seconds (None: the caller's own timeout, nothing having been done), and the round the caller's
    thread already ran (a receive's), whose reply the loop's completes (`reply`)."""

    request: RouterRequest
    timeout: float | None = None
    done: ReceiveRound | None = None

    def reply(self, later: Any) -> Any:
        """The whole reply, given the loop's reply to `request`."""
        return later if self.done is None else self.done.merged(later)


class Router:
    """Routing policy over a channel to the partitions of one namespace.

    Args:
        name: the namespace's name (for messages).
        channel: how partitions are reached.
        sku: the namespace's tier (size limits).
        clock: monotonic seconds (injectable for tests).
        sleep: how the router waits out a back-off (injectable with `clock`).
    """

    def __init__(self, name: str, channel: PartitionChannel, sku: Sku,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.reach = PartitionReach(name, channel, clock, sleep)
        self.definitions = Definitions(self.reach)
        self.hints = Hints()
        spread = itertools.count(random.randrange(self.reach.count))
        waits = PartitionWaits(self.reach, self.hints)
        self.sends = Sends(self.reach, self.definitions, self.hints, sku, spread)
        self.receives = ReceiveCoordinator(self.reach, self.definitions, self.hints, waits, spread)
        self.browsing = Browsing(self.reach, self.definitions)
        self.sessions = SessionRouting(self.reach, self.definitions, waits, spread)
        self.purges = Purges(self.reach, self.definitions)
        self._handlers: dict[type[Any], Callable[..., Awaitable[Any]]] = {
            SendRequest: self.sends.send,
            SendBatchesRequest: self.sends.send_batches,
            SendPeekSessionRequest: self.sends.send_peek_session,
            CancelScheduledRequest: self.sends.cancel_scheduled,
            CommitTransactionRequest: self.sends.commit_transaction,
            ReceiveRequest: self.receives.receive,
            SettleRequest: self.receives.settle,
            CloseReceiverRequest: self.receives.close_receiver,
            ReceiveDeferredRequest: self.browsing.receive_deferred,
            PeekRequest: self.browsing.peek,
            PeekSessionRequest: self.browsing.peek_session,
            AcceptSessionRequest: self.sessions.accept_session,
            SessionCallRequest: self.sessions.session_call,
            DefinitionRequest: self.definitions.get,
            PurgeRequest: self.purges.purge,
        }
        """The part serving each request type; its fields are the part's arguments, in order."""

    async def run(self, request: RouterRequest) -> Any:
        """Run a client's request on the loop: the reply its type names (`router_requests`)."""
        handler = self._handlers.get(type(request))
        if handler is None:
            raise InvalidOperationError(f"a router runs no {type(request).__name__}; it runs "
                                        f"{', '.join(cls.__name__ for cls in self._handlers)}")
        return await handler(*request)

    def try_now(self, request: RouterRequest) -> Any:
        """Run `request` on the caller's thread when one round of partition calls serves it (a
        tagged send bound for one available partition, a receive served by the receiver's cache
        and the partitions known to hold messages), under the thread rule written in `rounds`.
        Returns the reply, or a `Later` with what is left for `run` on the loop: the request
        untouched when nothing was done; a send that failed here, with the time left (its
        producer tag makes the retry store nothing twice); the rest of a receive, with what this
        round got."""
        started = self.reach.clock()
        if isinstance(request, SendRequest):
            seqs = self.sends.send_now(request)
            if seqs is not None:
                return seqs
            left = max(request.timeout - (self.reach.clock() - started), 0.0)
            return Later(request._replace(timeout=left), left)
        if isinstance(request, ReceiveRequest):
            return self._receive_now(request, started)
        return Later(request)

    def _receive_now(self, request: ReceiveRequest, started: float) -> ReceiveReply | Later:
        done = self.receives.receive_now(request)
        if done is None:
            return Later(request)
        if done.complete:
            return done.reply
        got = len(done.reply.messages)
        left = 0.0 if got else max(request.max_wait - (self.reach.clock() - started), 0.0)
        rest = request._replace(max_count=request.max_count - got, max_wait=left,
                                settlements=[request.settlements[i] for i in done.rest])
        return Later(rest, left, done)

