"""What a lock renewer is without its thread or task: settings, registrations and their checks, and
the bookkeeping after each renewal. The sync `AutoLockRenewer` (a thread) and the async one (an
asyncio task) add the waiting and the calls; imports no Ray.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, ClassVar

from ..clock import Clock, SystemClock, to_datetime
from ..errors import InvalidArgumentError, InvalidOperationError, MessageLockLostError, SessionLockLostError
from ..message import ReceivedMessage
from ..protocol import ReceiveMode
from .receiver_flows import ReceiverBase, Renewable, SessionBase, check_renewable, lock_view
from .renewal import (
    DEFAULT_MAX_RENEWAL_S,
    Ending,
    FailureCallback,
    Plan,
    Registration,
    RenewalBook,
    failure_callback,
    max_renewal_seconds,
)

_log = logging.getLogger("ray_broker.client.autolock")


class RenewerBase:
    """A renewer's settings and registrations; subclasses name their receiver class, guard the book
    as their concurrency needs, and renew.

    Args:
        max_lock_renewal_duration: how long to keep each lock alive (seconds or timedelta).
        on_lock_renew_failure: called as `on_lock_renew_failure(renewable, error)` when a renewal fails.
    """

    receiver_class: ClassVar[type[ReceiverBase]]
    receiver_kind: ClassVar[str]
    """How errors name the receiver class, e.g. "ray_broker Receiver"."""

    def __init__(self, max_lock_renewal_duration: float | timedelta = DEFAULT_MAX_RENEWAL_S,
                 on_lock_renew_failure: FailureCallback | None = None) -> None:
        self._max_duration = max_renewal_seconds(max_lock_renewal_duration)
        self._on_failure = failure_callback(on_lock_renew_failure)
        self._clock: Clock = SystemClock()
        self._book: RenewalBook[Renewable] = RenewalBook(lock_view)
        self._closed = False

    def _check_not_closed(self) -> None:
        if self._closed:
            raise InvalidOperationError("this AutoLockRenewer is closed; create a new one to register locks")

    def _check_receiver_class(self, receiver_class: type[ReceiverBase]) -> None:
        """Raise unless receivers of `receiver_class` can be given this renewer (`auto_lock_renewer=`)."""
        if self.receiver_class is not receiver_class:
            raise InvalidArgumentError(
                f"auto_lock_renewer is a renewer for {self.receiver_kind}s and cannot serve a "
                f"{receiver_class.__module__}.{receiver_class.__name__}; use rb.AutoLockRenewer with the sync "
                "client and ray_broker.aio.AutoLockRenewer with the async one")
        self._check_not_closed()

    def _registration(self, receiver: Any, renewable: Any, max_lock_renewal_duration: float | timedelta | None,
                      on_lock_renew_failure: FailureCallback | None) -> tuple[float, FailureCallback | None]:
        """Check a registration's arguments; returns its limit and failure callback."""
        if not isinstance(receiver, self.receiver_class):
            raise InvalidArgumentError(
                f"receiver must be a {self.receiver_kind}, not {type(receiver).__name__}; pass the receiver that received the message (or holds the session)")
        if not isinstance(renewable, (ReceivedMessage, SessionBase)):
            raise InvalidArgumentError(
                f"only a ReceivedMessage or a ReceiverSession (receiver.session) can be registered, "
                f"not {type(renewable).__name__}")
        max_duration = (self._max_duration if max_lock_renewal_duration is None
                        else max_renewal_seconds(max_lock_renewal_duration))
        return max_duration, failure_callback(on_lock_renew_failure) or self._on_failure

    def _to_register(self, receiver: ReceiverBase, session: SessionBase | None,
                     messages: list[ReceivedMessage]) -> list[Renewable]:
        """What a receiver made with `auto_lock_renewer=` this renewer registers after receiving
        `messages`: its locked `session` (once), else each message it locked."""
        if receiver._target.session_id is not None:
            return [session] if session is not None and receiver._session is not None \
                and not self._book.holds(session) else []
        return list(messages) if receiver.receive_mode is ReceiveMode.PEEK_LOCK else []

    def _add(self, receiver: ReceiverBase, renewable: Renewable, max_duration: float,
             on_failure: FailureCallback | None) -> None:
        """Start renewing (the caller holds whatever guards the book)."""
        self._check_not_closed()
        check_renewable(receiver, renewable)
        self._book.add(renewable, receiver, now=self._clock.now(), max_duration=max_duration, on_failure=on_failure)

    def _plan(self) -> tuple[Plan[Renewable], float | None]:
        """What to renew now, and how long to sleep when nothing is due (None: until woken)."""
        now = self._clock.now()
        plan = self._book.plan(now)
        for registration, ending in plan.ended:
            _log.debug("stopped renewing %r after %d renewals: %s",
                       registration.renewable, registration.renewals, ending.value)
        return plan, None if plan.wake_at is None else plan.wake_at - now

    def _renewed(self, registration: Registration[Renewable], until: float) -> None:
        self._book.renewed(registration, self._clock.now(), until)

    def _failed(self, registration: Registration[Renewable]) -> bool:
        """Record a failed renewal; True when it is to be reported."""
        return self._book.failed(registration) is Ending.FAILED

    def _report_lapse(self, registration: Registration[Renewable]) -> Any:
        """Tell the registration's failure callback that its lock expired unsettled after renewing
        stopped; returns what it returned (an async callback's awaitable)."""
        return self._report(registration, lapse_error(registration))

    def _report(self, registration: Registration[Renewable], error: Exception) -> Any:
        """Tell the registration's failure callback; returns what it returned (an async callback's
        awaitable)."""
        _log.debug("renewing the lock of %r failed: %r", registration.renewable, error)
        if registration.on_failure is None:
            return None
        try:
            return registration.on_failure(registration.renewable, error)
        except Exception:  # noqa: BLE001 - a failing callback must not stop the renewal of other locks
            self._callback_raised(registration)
            return None

    @staticmethod
    def _callback_raised(registration: Registration[Renewable]) -> None:
        _log.exception("on_lock_renew_failure raised for %r", registration.renewable)


def lapse_error(registration: Registration[Renewable]) -> Exception:
    """The error an `on_lock_renew_failure` callback gets when a registration's lock expired
    unsettled after its `max_lock_renewal_duration` had elapsed."""
    renewable = registration.renewable
    limit = f"max_lock_renewal_duration ({registration.max_duration:g} s) elapsed"
    if isinstance(renewable, SessionBase):
        return SessionLockLostError(
            f"the lock on session {renewable.session_id!r} expired at {renewable.locked_until_utc}: renewing "
            f"stopped when {limit}; register the session with a longer max_lock_renewal_duration")
    return MessageLockLostError(
        f"the lock on message {renewable.sequence_number} expired at {to_datetime(renewable.locked_until)} "
        f"unsettled: renewing stopped when {limit}; register it with a longer max_lock_renewal_duration, "
        "or settle it sooner")


def check_auto_lock_renewer(value: Any, receiver_class: type[ReceiverBase]) -> RenewerBase | None:
    """A receiver's `auto_lock_renewer` argument: None, or an open renewer of the receiver's client."""
    if value is None:
        return None
    if not isinstance(value, RenewerBase):
        raise InvalidArgumentError(
            f"auto_lock_renewer must be an AutoLockRenewer or None, not {type(value).__name__}")
    value._check_receiver_class(receiver_class)
    return value
