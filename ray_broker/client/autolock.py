"""`AutoLockRenewer`: keeps message and session locks alive from one background thread."""
from __future__ import annotations

import threading
from datetime import timedelta
from types import TracebackType

from .receiver import Receiver
from .receiver_flows import Renewable
from .renewal import DEFAULT_MAX_RENEWAL_S, FailureCallback, Registration
from .renewing import RenewerBase


class AutoLockRenewer(RenewerBase):
    """Renews the locks of registered messages and sessions before they expire, from one daemon thread.

    A registration lasts until the message is settled, its receiver is closed, this renewer is
    closed, or `max_lock_renewal_duration` has passed since it was registered (the lock then
    expires as usual). A lock is renewed when 10 s of it remain, or half of it for shorter locks.
    A receiver made with `auto_lock_renewer=renewer` registers what it receives (its session, for
    a session receiver) by itself.

    Args:
        max_lock_renewal_duration: how long to keep each lock alive, in seconds or as a timedelta
            (default 300 s); `register` can set another limit per registration.
        on_lock_renew_failure: called as `on_lock_renew_failure(renewable, error)`, once per
            registration and from the renewer's thread, when the lock is lost while registered:
            renewing raised `error` (the lock was lost, the receiver was closed during a renewal,
            the entity was deleted), or `max_lock_renewal_duration` elapsed and the lock then
            expired before the message was settled or the receiver closed (`error` is then a
            `MessageLockLostError` or `SessionLockLostError` saying so). Not called when a
            registration ends by settling, closing the receiver or closing this renewer.

    Example:
        with rb.AutoLockRenewer(max_lock_renewal_duration=600) as renewer:
            for message in receiver.receive_messages(max_message_count=10):
                renewer.register(receiver, message)
                handle(message)                   # may take longer than the queue's lock_duration
                receiver.complete_message(message)
    """

    receiver_class = Receiver
    receiver_kind = "ray_broker Receiver"

    def __init__(self, max_lock_renewal_duration: float | timedelta = DEFAULT_MAX_RENEWAL_S,
                 on_lock_renew_failure: FailureCallback | None = None) -> None:
        super().__init__(max_lock_renewal_duration, on_lock_renew_failure)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> AutoLockRenewer:
        self._check_not_closed()
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
        max_duration, on_failure = self._registration(receiver, renewable, max_lock_renewal_duration,
                                                      on_lock_renew_failure)
        with self._cond:
            self._add(receiver, renewable, max_duration, on_failure)
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
                plan, sleep = self._plan()
                if not plan.due and not plan.lapsed:
                    self._cond.wait(sleep)
                    continue
            for registration in plan.lapsed:
                self._report_lapse(registration)
            for registration in plan.due:
                if self._closed:
                    return
                self._renew_one(registration)

    def _renew_one(self, registration: Registration[Renewable]) -> None:
        try:
            until = registration.receiver._renew_lock(registration.renewable)
        except Exception as error:  # noqa: BLE001 - reported to on_lock_renew_failure
            with self._cond:
                failed = self._failed(registration)
            if failed:
                self._report(registration, error)
            return
        with self._cond:
            self._renewed(registration, until)
