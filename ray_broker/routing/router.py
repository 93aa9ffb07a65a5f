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

A router is made of parts with one job each: `reaching.PartitionReach` (calls, retries, health),
`definitions.Definitions` (the entity cache), `send_routing.Sends`, `coordinator.ReceiveCoordinator`
and the rounds they run (`rounds`); clients reach its data operations by name through
`operations`, an explicit table.
"""
from __future__ import annotations

import asyncio
import itertools
import random
import time
from typing import Any, Awaitable, Callable

from ..errors import InvalidOperationError
from ..sku import Sku
from .channel import PartitionChannel
from .coordinator import ReceiveCoordinator
from .definitions import Definitions
from .purging import Purges
from .reaching import PartitionReach
from .receive_state import Hints
from .send_routing import Sends

DATA_OPERATIONS = ("send", "send_batches", "send_peek_session", "cancel_scheduled", "commit_transaction", "receive", "settle",
                   "close_receiver", "receive_deferred", "peek", "peek_session", "accept_session", "session_call",
                   "definition", "purge")
"""The operations clients run on a router (a definition too: a direct client keeps its own cache
of them); everything else a gateway serves is management."""


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
        self.sends = Sends(self.reach, self.definitions, self.hints, sku, spread)
        self.receives = ReceiveCoordinator(self.reach, self.definitions, self.hints, spread)
        self.purges = Purges(self.reach, self.definitions)
        self.operations: dict[str, Callable[..., Awaitable[Any]]] = {
            "send": self.sends.send,
            "send_batches": self.sends.send_batches,
            "send_peek_session": self.sends.send_peek_session,
            "cancel_scheduled": self.sends.cancel_scheduled,
            "commit_transaction": self.sends.commit_transaction,
            "receive": self.receives.receive,
            "settle": self.receives.settle,
            "close_receiver": self.receives.close_receiver,
            "receive_deferred": self.receives.receive_deferred,
            "peek": self.receives.peek,
            "peek_session": self.receives.peek_session,
            "accept_session": self.receives.accept_session,
            "session_call": self.receives.session_call,
            "definition": self.definitions.get,
            "purge": self.purges.purge,
        }
        """The data operations by name (`DATA_OPERATIONS`)."""

    async def run(self, operation: str, *args: Any) -> Any:
        """Run a client's data operation by name."""
        handler = self.operations.get(operation)
        if handler is None:
            raise InvalidOperationError(f"{operation!r} is not a data operation; expected one of "
                                        f"{', '.join(DATA_OPERATIONS)}")
        return await handler(*args)
