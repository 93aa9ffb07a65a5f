"""`AutoLockRenewer`: keeps message and session locks alive from one background thread."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta
from types import TracebackType
from typing import Union

from ..clock import Clock, SystemClock
from ..errors import InvalidArgumentError, InvalidOperationError, MessageAlreadySettled
from ..message import ReceivedMessage
from .receiver import Receiver, ReceiverSession
from .renewal import (
    DEFAULT_MAX_RENEWAL_S,
    Ending,
    FailureCallback,
    LockView,
    Registration,
    RenewalBook,
    failure_callback,
    max_renewal_seconds,
)

_log = logging.getLogger(__name__)

Renewable = Union[ReceivedMessage, ReceiverSession]


def _view(registration: Registration[Renewable]) -> LockView:
    """The lock state of a registered message or session, read from the client objects."""
    renewable = registration.renewable
    until = renewable.locked_until_utc
    assert until is not None
    settled = isinstance(renewable, ReceivedMessage) and renewable._settled
    return LockView(until.timestamp(), settled, registration.receiver._closed)


def _renew(registration: Registration[Renewable]) -> float:
    """Renew one lock and return its new expiry, leaving the receiver's buffered settlements alone."""
    renewable = registration.renewable
    if isinstance(renewable, ReceiverSession):
        return renewable._renew(send_buffered=False).timestamp()
    return registration.receiver._renew_message_lock(renewable, send_buffered=False).timestamp()


def _check_renewable(receiver: Receiver, renewable: Renewable) -> None:
    """Raise unless `receiver` holds the lock on `renewable` and can renew it."""
    receiver._check_open()
    if isinstance(renewable, ReceiverSession):
        if renewable._receiver is not receiver:
            raise InvalidOperationError(
                f"session {renewable.session_id!r} is held by another receiver; register it with that receiver")
        return
    seq = renewable.sequence_number
    if renewable.lock_token is None or renewable.locked_until_utc is None:
        raise MessageAlreadySettled(
            f"message {seq} has no lock to renew: it was received in RECEIVE_AND_DELETE mode or peeked; "
            "only messages received in PEEK_LOCK mode can be registered")
    if renewable._settled:
        raise MessageAlreadySettled(f"message {seq} was already settled; register messages before settling them")
    if receiver._target.session_id is not None:
        raise InvalidOperationError(
            f"message {seq} is locked by its session: register receiver.session instead of the message")
    if renewable._receiver_key != receiver._key:
        raise InvalidOperationError(
            f"message {seq} was received by another receiver; register it with the receiver that received it")


class AutoLockRenewer:
    """Renews the locks of registered messages and sessions before they expire, from one daemon thread.

    A registration lasts until the message is settled, its receiver is closed, this renewer is
    closed, or `max_lock_renewal_duration` has passed since it was registered (the lock then
    expires as usual). A lock is renewed when 10 s of it remain, or half of it for shorter locks.

    Args:
        max_lock_renewal_duration: how long to keep each lock alive, in seconds or as a timedelta
            (default 300 s); `register` can set another limit per registration.
        on_lock_renew_failure: called as `on_lock_renew_failure(renewable, error)`, once per
            registration and from the renewer's thread, when renewing raised `error`: the lock was
            lost, the receiver was closed during a renewal, the entity was deleted. Not called when a
            registration ends for the reasons above.

    Example:
        with rb.AutoLockRenewer(max_lock_renewal_duration=600) as renewer:
            for message in receiver.receive_messages(max_message_count=10):
                renewer.register(receiver, message)
                handle(message)                   # may take longer than the queue's lock_duration
                receiver.complete_message(message)
    """

    def __init__(self, max_lock_renewal_duration: float | timedelta = DEFAULT_MAX_RENEWAL_S,
                 on_lock_renew_failure: FailureCallback | None = None) -> None:
        self._max_duration = max_renewal_seconds(max_lock_renewal_duration)
        self._on_failure = failure_callback(on_lock_renew_failure)
        self._clock: Clock = SystemClock()
        self._cond = threading.Condition()
        self._book: RenewalBook[Renewable] = RenewalBook(_view)
        self._thread: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> AutoLockRenewer:
        if self._closed:
            raise InvalidOperationError("this AutoLockRenewer is closed; create a new one")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def register(self, receiver: Receiver, renewable: Renewable,
                 max_lock_renewal_duration: float | timedelta | None = None,
                 on_lock_renew_failure: FailureCallback | None = None) -> None:
        """Keep the lock of `renewable` alive: a message `receiver` received in PEEK_LOCK mode, or the
        session of a session receiver (`receiver.session`).

        Args:
            receiver: the receiver that holds the lock.
            renewable: the message or session to keep locked; registering it again restarts its limit.
            max_lock_renewal_duration: this registration's limit (seconds or timedelta); None means
                the renewer's.
            on_lock_renew_failure: this registration's failure callback; None means the renewer's.

        Raises `MessageAlreadySettled` for a settled message or one without a lock (received in
        RECEIVE_AND_DELETE mode, or peeked), `InvalidOperationError` when this renewer or the
        receiver is closed or the receiver does not hold the lock, `InvalidArgumentError` for
        arguments of the wrong type.

            renewer.register(receiver, message, max_lock_renewal_duration=timedelta(minutes=30))
            renewer.register(session_receiver, session_receiver.session)
        """
        if not isinstance(receiver, Receiver):
            raise InvalidArgumentError(
                f"receiver must be a ray_broker Receiver, not {type(receiver).__name__}; pass the receiver "
                "that received the message (or holds the session)")
        if not isinstance(renewable, (ReceivedMessage, ReceiverSession)):
            raise InvalidArgumentError(
                f"only a ReceivedMessage or a ReceiverSession (receiver.session) can be registered, "
                f"not {type(renewable).__name__}")
        max_duration = (self._max_duration if max_lock_renewal_duration is None
                        else max_renewal_seconds(max_lock_renewal_duration))
        on_failure = failure_callback(on_lock_renew_failure) or self._on_failure
        with self._cond:
            if self._closed:
                raise InvalidOperationError("this AutoLockRenewer is closed; create a new one to register locks")
            _check_renewable(receiver, renewable)
            self._book.add(renewable, receiver, now=self._clock.now(), max_duration=max_duration,
                           on_failure=on_failure)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ray-broker-lock-renewer", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Stop renewing every lock and wait for the renewer's thread (and a renewal under way) to end."""
        with self._cond:
            self._closed = True
            self._book.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = self._clock.now()
                plan = self._book.plan(now)
                for registration, ending in plan.ended:
                    _log.debug("stopped renewing %r after %d renewals: %s",
                               registration.renewable, registration.renewals, ending.value)
                if not plan.due:
                    self._cond.wait(None if plan.wake_at is None else plan.wake_at - now)
                    continue
            for registration in plan.due:
                if self._closed:
                    return
                self._renew_one(registration)

    def _renew_one(self, registration: Registration[Renewable]) -> None:
        try:
            until = _renew(registration)
        except Exception as error:  # noqa: BLE001 - reported to on_lock_renew_failure
            with self._cond:
                ending = self._book.failed(registration)
            if ending is Ending.FAILED:
                self._report(registration, error)
            return
        with self._cond:
            self._book.renewed(registration, self._clock.now(), until)

    def _report(self, registration: Registration[Renewable], error: Exception) -> None:
        _log.debug("renewing the lock of %r failed: %r", registration.renewable, error)
        if registration.on_failure is None:
            return
        try:
            registration.on_failure(registration.renewable, error)
        except Exception:  # noqa: BLE001 - a failing callback must not stop the renewal of other locks
            _log.exception("on_lock_renew_failure raised for %r", registration.renewable)
