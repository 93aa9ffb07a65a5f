"""Receivers: receive, settle, defer, peek, and sessions."""
from __future__ import annotations

import threading
import time
import weakref
from datetime import datetime
from types import TracebackType
from typing import Any, Iterable, Iterator, TypeVar

from ..clock import to_datetime
from ..errors import MessageLockLostError
from ..message import ReceivedMessage
from .core import FLUSH_DELAY_S, Flush
from .flow import Flow, Link, run
from .receiver_flows import ReceiverBase, Renewable, SessionBase

T = TypeVar("T")


class _FlushScheduler:
    """One background thread that sends receivers' buffered settlements when their delay is up."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, weakref.ref[Receiver]]] = {}
        self._thread: threading.Thread | None = None

    def schedule(self, receiver: Receiver, delay: float) -> None:
        """Flush `receiver` after `delay` seconds (once, however often it is scheduled meanwhile)."""
        with self._cond:
            if id(receiver) not in self._due:
                self._due[id(receiver)] = (time.monotonic() + delay, weakref.ref(receiver))
                self._cond.notify()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ray-broker-flush", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                ready = [key for key, (when, _) in self._due.items() if when <= now]
                if not ready:
                    self._cond.wait(min(when for when, _ in self._due.values()) - now)
                    continue
                receivers = [self._due.pop(key)[1]() for key in ready]
            for receiver in receivers:
                if receiver is not None and not receiver._closed:
                    receiver._flush_pending()


_FLUSHER = _FlushScheduler()


class ReceiverSession(SessionBase):
    """The session a session receiver holds: its id, lock expiry and state.

    Example:
        with ns.get_queue_receiver("orders", session_id="s1") as receiver:
            receiver.session.set_state(b"step 2")
            print(receiver.session.session_id, receiver.session.get_state())
    """

    _receiver: Receiver

    def get_state(self) -> bytes | None:
        """The session's state (None if it was never set)."""
        return self._receiver._run(self._receiver._session_call("get_session_state"))  # type: ignore[no-any-return]

    def set_state(self, state: bytes | str | None) -> None:
        """Replace the session's state; None clears it."""
        self._receiver._run(self._receiver._set_session_state(state))

    def renew_lock(self) -> datetime:
        """Extend the session lock (and the locks of its messages) by the entity's lock duration."""
        return to_datetime(self._receiver._run(self._receiver._renew_session(send_buffered=True)))  # type: ignore[return-value]


class Receiver(ReceiverBase):
    """Receives from one queue, subscription or dead-letter sub-queue; unaware of partitions.

    Settlements are buffered and travel with the next receive (or are sent on their own within
    50 ms); `flush()` sends them at once and raises what any of them met.

    Example:
        with ns.get_queue_receiver("orders", max_wait_time=5) as receiver:
            for message in receiver:
                receiver.complete_message(message)
    """

    def __init__(self, link: Link, sku: Any, target: Any) -> None:
        super().__init__(link, sku, target)
        self._flush_lock = threading.Lock()
        self._session_handle: ReceiverSession | None = None

    def _run(self, flow: Flow[T]) -> T:
        """Run one of the receiver's flows, one at a time (buffered settlements go out in order)."""
        with self._flush_lock:
            return run(self._link, flow)

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> Receiver:
        self._run(self._open())
        self._registered([])
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Send pending settlements, then release messages held but never handed out (no delivery
        counted) and the session lock."""
        self._run(self._close())

    @property
    def session(self) -> ReceiverSession | None:
        """The held session (session receivers; locked first if need be), else None."""
        if self._target.session_id is None:
            return None
        if self._session is None:
            self._run(self._open())
        if self._session_handle is None:
            self._session_handle = ReceiverSession(self)
        return self._session_handle

    # ------------------------------------------------------------------ buffered settlements

    def flush(self) -> None:
        """Send buffered settlements now and raise the first error any buffered settlement met.

        Receive calls and a short timer otherwise carry them; a settlement is confirmed by the
        broker once a `flush()` (or the receive that carried it) returned without raising.
        """
        self._run(self._flush())

    def _flush_pending(self) -> None:
        """Send buffered settlements, keeping any error for the receiver's next operation."""
        self._run(self._send_buffered())

    def _after_settle(self, when: Flush) -> None:
        if when is Flush.LATER:
            _FLUSHER.schedule(self, FLUSH_DELAY_S)
        elif when is Flush.NOW:
            self.flush()

    # ------------------------------------------------------------------ receiving

    def receive_messages(self, max_message_count: int | None = 1, max_wait_time: float | None = None) -> list[ReceivedMessage]:
        """Up to `max_message_count` messages, waiting up to `max_wait_time` seconds for the first."""
        self._check_renewer()
        return self._registered(self._run(self._receive(max_message_count, max_wait_time)))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        """Messages one by one; stops after `max_wait_time` without a message."""
        while batch := self.receive_messages(self._iteration_batch):
            yield from batch

    def receive_deferred_messages(self, sequence_numbers: int | list[int]) -> list[ReceivedMessage]:
        """Receive deferred messages by their sequence numbers."""
        self._check_renewer()
        return self._registered(self._run(self._receive_deferred(sequence_numbers)))

    def peek_messages(self, max_message_count: int = 1, *, sequence_number: int = 0,
                      end_sequence_number: int | None = None) -> list[ReceivedMessage]:
        """Browse messages without locking them, in sequence-number order (across partitions in index order).

        With `sequence_number=0` browsing continues after the last message this receiver peeked.
        With `end_sequence_number`, browsing stops before that sequence number and asks only the
        partitions holding the range (a partition's `next_sequence_number` in the runtime
        properties ends what it held when they were read).
        """
        return self._run(self._peek(max_message_count, sequence_number, end_sequence_number))

    # ------------------------------------------------------------------ settling

    def complete_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Remove the message from the entity (when `transaction` commits, if one is given)."""
        self._settlement(message, "complete", transaction)

    def abandon_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Release the lock at once; the message can be received again (its delivery counted)."""
        self._settlement(message, "abandon", transaction)

    def defer_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Set the message aside; only `receive_deferred_messages` can get it again."""
        self._settlement(message, "defer", transaction)

    def dead_letter_message(self, message: ReceivedMessage, reason: str | None = None,
                            error_description: str | None = None, *, transaction: Any = None) -> None:
        """Move the message to the dead-letter sub-queue with a reason and description."""
        self._settlement(message, "dead_letter", transaction, reason, error_description)

    def renew_message_lock(self, message: ReceivedMessage, *, transaction: Any = None) -> datetime:
        """Extend the message's lock by the entity's lock duration; returns the new expiry (UTC).

        In a transaction the lock is extended when it commits; until then this returns the
        current expiry.
        """
        if transaction is not None:
            self._run(self._settle_in(transaction, message, "renew"))
            return message.locked_until_utc  # type: ignore[return-value]
        return to_datetime(self._run(self._renew_message_lock(message, send_buffered=True)))  # type: ignore[return-value]

    def _settlement(self, message: ReceivedMessage, action: str, transaction: Any, reason: str | None = None,
                    description: str | None = None) -> None:
        """Buffer a settlement, or add it to `transaction`."""
        if transaction is None:
            self._after_settle(self._settle(message, action, reason, description))
        else:
            self._run(self._settle_in(transaction, message, action, reason, description))

    def _renew_lock(self, renewable: Renewable) -> float:
        """A lock renewer's renewal: never waits behind a receive, leaves buffered settlements alone."""
        return run(self._link, self._renewal(renewable))


def abandon_held(receiver: Receiver, messages: Iterable[ReceivedMessage]) -> None:
    """Abandon `messages` (one delivery counted each) and wait until the broker has them; a message
    whose lock lapsed, whether the client refuses its abandon at once or the broker does on the
    flush, is back on its entity already and is left as it is."""
    for message in messages:
        try:
            receiver.abandon_message(message)
        except MessageLockLostError:
            pass
    try:
        receiver.flush()
    except MessageLockLostError:
        pass
