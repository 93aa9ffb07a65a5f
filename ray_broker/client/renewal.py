"""When a lock renewer renews a lock and when it stops: the policy, free of I/O, threads and Ray.

A `RenewalBook` holds the registrations of one renewer. Its owner (a thread, or an asyncio task)
asks it for a `Plan` at a time, renews the locks the plan names, reports each result back with
`renewed` or `failed`, and sleeps until the plan's `wake_at` or until something new is registered.
The book reads a lock holder's state through a probe the owner supplies, so it never touches a
receiver itself. Times are epoch seconds from a `Clock`.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from ..clock import duration_seconds
from ..errors import InvalidArgumentError

MAX_MARGIN_S = 10.0
"""A lock is renewed when at most this many seconds of it remain..."""
SHORT_LOCK_FRACTION = 0.5
"""...or, for locks shorter than twice MAX_MARGIN_S, when this fraction of the lock remains."""
DEFAULT_MAX_RENEWAL_S = 300.0
"""How long a renewer keeps a lock alive unless told otherwise (as in azure-servicebus)."""

T = TypeVar("T")
FailureCallback = Callable[[Any, BaseException], None]


class Ending(enum.Enum):
    """Why a registration left its book."""

    SETTLED = "the message was settled"
    RECEIVER_CLOSED = "the receiver was closed"
    LAPSED = "max_lock_renewal_duration elapsed, then the lock expired unsettled"
    FAILED = "a renewal failed"


@dataclass(frozen=True)
class LockView:
    """What a probe reads from a lock holder: its lock expiry and whether renewing still makes sense."""

    locked_until: float
    settled: bool = False
    receiver_closed: bool = False


def renewal_margin(lock_span: float) -> float:
    """How long before its expiry a lock of `lock_span` seconds is renewed."""
    return min(MAX_MARGIN_S, max(lock_span, 0.0) * SHORT_LOCK_FRACTION)


def max_renewal_seconds(value: Any, name: str = "max_lock_renewal_duration") -> float:
    """A renewal limit as positive, finite seconds (from a number of seconds or a timedelta)."""
    seconds = duration_seconds(value)
    if seconds is None:
        raise InvalidArgumentError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}; "
            f"for example {name}=300 or timedelta(minutes=5)")
    if not 0 < seconds < math.inf:
        raise InvalidArgumentError(f"{name} must be a positive, finite duration, got {value!r}")
    return seconds


def failure_callback(value: Any) -> FailureCallback | None:
    """An `on_lock_renew_failure` argument: None or a callable taking (renewable, error)."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(
            f"on_lock_renew_failure must be a callable taking (renewable, error) or None, not {type(value).__name__}")
    return value  # type: ignore[no-any-return]


@dataclass(eq=False)
class Registration(Generic[T]):
    """One lock kept alive: what holds it, since when, for how long, and whom to tell of a failure."""

    renewable: T
    receiver: Any
    started: float
    max_duration: float
    lock_span: float
    on_failure: FailureCallback | None = None
    renewals: int = 0

    @property
    def ends_at(self) -> float:
        """When renewing stops (the lock then lasts until its current expiry, and the registration
        is watched until then)."""
        return self.started + self.max_duration

    def renew_at(self, view: LockView) -> float:
        """When the lock that `view` shows is due for renewal."""
        return view.locked_until - renewal_margin(self.lock_span)

    def ending(self, now: float, view: LockView) -> Ending | None:
        """Why the registration ends at `now`, or None while it goes on (renewed before
        `ends_at`, watched from then until its lock expires)."""
        if view.settled:
            return Ending.SETTLED
        if view.receiver_closed:
            return Ending.RECEIVER_CLOSED
        if now >= self.ends_at and now >= view.locked_until:
            return Ending.LAPSED
        return None


@dataclass
class Plan(Generic[T]):
    """What a book's owner does now: renew `due`; `ended` left the book (report the `lapsed`
    ones to their `on_failure`); sleep until `wake_at`.

    `wake_at` is None when nothing but a new registration can make anything due; when `due` is
    not empty the owner plans again after renewing, without sleeping.
    """

    due: list[Registration[T]] = field(default_factory=list)
    ended: list[tuple[Registration[T], Ending]] = field(default_factory=list)
    wake_at: float | None = None

    @property
    def lapsed(self) -> list[Registration[T]]:
        """The registrations whose lock expired unsettled after their renewing stopped: the lock
        is lost, which their `on_failure` is told of."""
        return [registration for registration, ending in self.ended if ending is Ending.LAPSED]


class RenewalBook(Generic[T]):
    """The registrations of one renewer and the decisions on them.

    `probe(registration)` reads the registration's holder (no I/O). A failure is reported at most
    once per registration: the first `failed` call removes it, later results of it are ignored.

        book = RenewalBook(probe)
        book.add(message, receiver, now=clock.now(), max_duration=300)
        plan = book.plan(clock.now())
        for registration in plan.due:
            book.renewed(registration, clock.now(), receiver.renew_message_lock(message).timestamp())
    """

    def __init__(self, probe: Callable[[Registration[T]], LockView]) -> None:
        self._probe = probe
        self._registrations: dict[int, Registration[T]] = {}

    def __len__(self) -> int:
        return len(self._registrations)

    def __contains__(self, registration: object) -> bool:
        return isinstance(registration, Registration) and self._registrations.get(
            id(registration.renewable)) is registration

    def holds(self, renewable: object) -> bool:
        """Whether `renewable` is registered."""
        return id(renewable) in self._registrations

    def add(self, renewable: T, receiver: Any, *, now: float, max_duration: float,
            on_failure: FailureCallback | None = None) -> Registration[T]:
        """Start renewing `renewable`'s lock at `now` for `max_duration` seconds.

        Registering a renewable again replaces its registration (the limit counts from `now`).
        """
        registration = Registration(renewable, receiver, now, max_duration, 0.0, on_failure)
        registration.lock_span = self._probe(registration).locked_until - now
        self._registrations[id(renewable)] = registration
        return registration

    def plan(self, now: float) -> Plan[T]:
        """Decide, at `now`, which locks to renew, which registrations end, and when to look again."""
        plan: Plan[T] = Plan()
        for key, registration in list(self._registrations.items()):
            view = self._probe(registration)
            ending = registration.ending(now, view)
            if ending is not None:
                del self._registrations[key]
                plan.ended.append((registration, ending))
                continue
            if now >= registration.ends_at:
                wake = view.locked_until
            elif (renew_at := registration.renew_at(view)) <= now:
                plan.due.append(registration)
                continue
            else:
                wake = min(renew_at, registration.ends_at)
            plan.wake_at = wake if plan.wake_at is None else min(plan.wake_at, wake)
        return plan

    def renewed(self, registration: Registration[T], now: float, locked_until: float) -> None:
        """Record a renewal that returned `locked_until` at `now` (ignored if the registration ended)."""
        if registration in self:
            registration.lock_span = locked_until - now
            registration.renewals += 1

    def failed(self, registration: Registration[T]) -> Ending | None:
        """Record that renewing `registration` raised; returns why it ends, None if it had ended already.

        A message settled while its renewal was under way ends as SETTLED: its lock is no longer
        needed, so that is no failure. Anything else ends as FAILED, to be reported to the
        registration's `on_failure`.
        """
        if registration not in self:
            return None
        del self._registrations[id(registration.renewable)]
        return Ending.SETTLED if self._probe(registration).settled else Ending.FAILED

    def clear(self) -> None:
        """Remove every registration (the renewer closes): none of them is reported as failed."""
        self._registrations.clear()
