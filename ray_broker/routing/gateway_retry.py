"""What a failed gateway call means, and what its caller does next: the one retry policy of every
caller of a gateway (clients, partitions' forwarders, gateways taking the routing table from the
one that decides leadership). Imports no Ray: `ray_gateway` reads Ray's errors into a `Failure`
and acts on the decision.

Example:
    >>> retry = GatewayRetry("ns", "routing_table", index=0, gateways=2, timeout=10.0, clock=lambda: 0.0)
    >>> retry.after(Failure.GONE, RuntimeError("gone"))
    Retry(delay=0.05, index=1, find=True)
"""
from __future__ import annotations

import enum
import time
from typing import Callable, NamedTuple

from ..errors import OperationTimeoutError
from .health import RETRY_BACKOFF, Backoff

MIN_WAIT_S = 0.1
"""The least time a call is given to answer, however close its deadline."""


class Failure(enum.Enum):
    """What a failed gateway call met, as the Ray shell reads Ray's error (`ray_gateway.failure_of`)."""

    TYPED = enum.auto()
    """An error that is not Ray's: the gateway's own (typed, as it raised it), raised to the caller."""
    GONE = enum.auto()
    """The gateway is dead and Ray will not restart it (died for good, unschedulable): it is found
    again, or made again by callers that make it, and called after the back-off."""
    PASSING = enum.auto()
    """Any other error of Ray's (the gateway restarting, its node lost, ...): waited out with the
    back-off; a Ray error is never raised as it is."""
    UNANSWERED = enum.auto()
    """No answer within the caller's time: `OperationTimeoutError`."""


class Retry(NamedTuple):
    """Call again after `delay` seconds, on gateway `index`; with `find`, look that gateway up
    (or make it) first, as the handle held is of another gateway or of one gone for good."""

    delay: float
    index: int
    find: bool


class GatewayRetry:
    """The retries of one gateway call, without I/O: each failure either raises the error the
    caller gets or says when, and on which gateway, to call again.

    Args:
        namespace: the namespace's name (for messages).
        operation: the gateway operation called (for messages).
        index: the gateway called first.
        gateways: how many gateways the caller moves between when one fails, from `index` on
            (1: it sticks to `index`, waiting while it restarts).
        timeout: the caller's time for the call, from now, retries included.
        clock: monotonic seconds.
        backoff: the wait before each new try (the shared `RETRY_BACKOFF`).
    """

    def __init__(self, namespace: str, operation: str, *, index: int, gateways: int, timeout: float,
                 clock: Callable[[], float] = time.monotonic, backoff: Backoff = RETRY_BACKOFF) -> None:
        self.namespace = namespace
        self.operation = operation
        self.index = index
        self.gateways = gateways
        self.timeout = timeout
        self._clock = clock
        self._backoff = backoff
        self.deadline = clock() + timeout
        self.attempt = 0

    def remaining(self) -> float:
        """How long the next try may wait for its answer (at least `MIN_WAIT_S`)."""
        return max(self.deadline - self._clock(), MIN_WAIT_S)

    def after(self, failure: Failure, error: BaseException) -> Retry:
        """The next try after the current one met `failure` (`error` is the error behind it), or
        the error to raise: `error` itself when it is `TYPED`; `OperationTimeoutError` when the
        gateway did not answer in time, or when the back-off would end past the deadline."""
        if failure is Failure.TYPED:
            raise error from None
        if failure is Failure.UNANSWERED:
            raise OperationTimeoutError(
                f"gateway {self.index} of namespace {self.namespace!r} did not answer {self.operation} in "
                f"{self.timeout:g} s; retry later") from None
        delay = self._backoff.delay(self.attempt)
        if self._clock() + delay >= self.deadline:
            raise OperationTimeoutError(f"gateway {self.index} of namespace {self.namespace!r} stayed unavailable; "
                                        "retry later") from None
        self.attempt += 1
        moves = self.gateways > 1
        if moves:
            self.index = (self.index + 1) % self.gateways
        return Retry(delay, self.index, find=moves or failure is Failure.GONE)
