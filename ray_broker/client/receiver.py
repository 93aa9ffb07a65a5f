"""Receivers: receive, settle, defer, peek, and sessions."""
from __future__ import annotations

import threading
import time
import uuid
import weakref
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterator

from ..clock import to_datetime
from ..errors import InvalidOperationError
from ..message import ReceivedMessage
from .core import (
    NEXT_AVAILABLE_SESSION,
    ReceiveMode,
    ReceiveTarget,
    SettlementBuffer,
    apply_settlement,
    check_count,
    check_sequence_number,
    sequence_list,
    session_state_bytes,
    settlement_op,
    wait_seconds,
)

if TYPE_CHECKING:
    from ..sku import Sku
    from .direct import DirectLink
    from .link import GatewayLink

_OP_TIMEOUT_S = 60.0
FLUSH_DELAY_S = 0.05
"""How long a settlement waits for a receive call to carry it before it is sent on its own."""


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
                    receiver._send_buffered()


_FLUSHER = _FlushScheduler()


class ReceiverSession:
    """The session a session receiver holds: its id, lock expiry and state."""

    def __init__(self, receiver: Receiver, lock: dict[str, Any]) -> None:
        self._receiver = receiver
        self._lock = lock
        self.session_id: str = lock["session_id"]
        self.locked_until_utc: datetime | None = to_datetime(lock["locked_until"])

    def _call(self, operation: str, *args: Any, send_buffered: bool = True) -> Any:
        if send_buffered:
            self._receiver._before_operation()
        else:
            self._receiver._check_open()
        return self._receiver._link.call(
            "session_call", self._receiver._target.entity, self._lock, operation, *args, timeout=_OP_TIMEOUT_S)

    def get_state(self) -> bytes | None:
        """The session's state (None if it was never set)."""
        return self._call("get_session_state")  # type: ignore[no-any-return]

    def set_state(self, state: bytes | str | None) -> None:
        """Replace the session's state; None clears it."""
        self._call("set_session_state", session_state_bytes(state, self._receiver._sku))

    def renew_lock(self) -> datetime:
        """Extend the session lock (and the locks of its messages) by the entity's lock duration."""
        return self._renew(send_buffered=True)

    def _renew(self, *, send_buffered: bool) -> datetime:
        """Renew the session lock; without `send_buffered`, buffered settlements and their errors are
        left to the receiver's next operation (a lock renewer's thread renews this way)."""
        until = to_datetime(self._call("renew_session", send_buffered=send_buffered))
        assert until is not None
        self.locked_until_utc = until
        self._lock["locked_until"] = until.timestamp()
        return until


class Receiver:
    """Receives from one queue, subscription or dead-letter sub-queue; unaware of partitions."""

    def __init__(self, link: GatewayLink | DirectLink, sku: Sku, target: ReceiveTarget) -> None:
        self._link = link
        self._sku = sku
        self._target = target
        self._key = uuid.uuid4().hex
        self._closed = False
        self._session: ReceiverSession | None = None
        self._peek_from = 0
        self._session_seen = 0
        self._settlements = SettlementBuffer()
        self._flush_lock = threading.Lock()
        self.entity_path = target.entity
        self.receive_mode = target.mode
        self.max_wait_time = target.max_wait_time

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> Receiver:
        self._open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOperationError(f"the receiver for {self._target.entity!r} is closed; create a new one")

    def _open(self) -> None:
        """Lock the session of a session receiver (once)."""
        self._check_open()
        target = self._target
        if target.session_id is None or self._session is not None:
            return
        wanted = None if target.session_id is NEXT_AVAILABLE_SESSION else target.session_id
        lock = self._link.call("accept_session", target.entity, wanted, target.max_wait_time,
                                   timeout=target.max_wait_time)
        self._session = ReceiverSession(self, lock)

    def close(self) -> None:
        """Send pending settlements, then release messages held but never handed out (no delivery
        counted) and the session lock."""
        if self._closed:
            return
        self._send_buffered()
        self._closed = True
        self._link.call("close_receiver", self._key, timeout=_OP_TIMEOUT_S)
        if self._session is not None:
            self._link.call("session_call", self._target.entity, self._session._lock, "release_session",
                                timeout=_OP_TIMEOUT_S)
        self._settlements.raise_deferred()

    # ------------------------------------------------------------------ buffered settlements

    def flush(self) -> None:
        """Send buffered settlements now and raise the first error any buffered settlement met.

        Receive calls and a short timer otherwise carry them; a settlement is confirmed by the
        broker once a `flush()` (or the receive that carried it) returned without raising.
        """
        self._check_open()
        self._send_buffered()
        self._settlements.raise_deferred()

    def _send_buffered(self) -> None:
        """Send buffered settlements, keeping any error for the receiver's next operation."""
        with self._flush_lock:
            ops = self._settlements.drain()
            if not ops:
                return
            try:
                results = self._link.call("settle", self._target.entity, self._target.subq, self._session_lock(),
                                              ops, _OP_TIMEOUT_S, timeout=_OP_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - kept and raised by the receiver's next operation
                self._settlements.fail(exc)
                return
            self._settlements.record(results)


    def _before_operation(self) -> None:
        """Raise what a buffered settlement met, then send the rest before another kind of call."""
        self._check_open()
        self._settlements.raise_deferred()
        self.flush()

    @property
    def session(self) -> ReceiverSession | None:
        """The held session (session receivers), else None."""
        if self._target.session_id is not None:
            self._open()
        return self._session

    def _session_lock(self) -> dict[str, Any] | None:
        self._open()
        return None if self._session is None else self._session._lock

    # ------------------------------------------------------------------ receiving

    def receive_messages(self, max_message_count: int | None = 1, max_wait_time: float | None = None) -> list[ReceivedMessage]:
        """Up to `max_message_count` messages, waiting up to `max_wait_time` seconds for the first."""
        self._check_open()
        self._settlements.raise_deferred()
        count = check_count(max_message_count)
        wait = wait_seconds(max_wait_time, self._target.max_wait_time)
        session = self._session_lock()
        if session is not None:
            session = dict(session, seen=self._session_seen)
        target = self._target
        with self._flush_lock:
            ops = self._settlements.drain()
            try:
                reply = self._link.call("receive", self._key, target.entity, target.subq, target.mode.value,
                                            session, count, wait, target.prefetch_count, ops, timeout=wait)
            except Exception as exc:
                if ops:
                    self._settlements.fail(exc)
                raise
        self._settlements.record(reply["settled"])
        messages = [ReceivedMessage(r, receiver_key=self._key) for r in reply["messages"]]
        if messages and session is not None:
            self._session_seen = max(self._session_seen, max(m.sequence_number for m in messages))
        return messages

    def __iter__(self) -> Iterator[ReceivedMessage]:
        """Messages one by one; stops after `max_wait_time` without a message."""
        while True:
            batch = self.receive_messages(max(1, self._target.prefetch_count))
            if not batch:
                return
            yield from batch

    def receive_deferred_messages(self, sequence_numbers: int | list[int]) -> list[ReceivedMessage]:
        """Receive deferred messages by their sequence numbers."""
        self._before_operation()
        seqs = sequence_list(sequence_numbers)
        if not seqs:
            return []
        target = self._target
        records = self._link.call("receive_deferred", target.entity, target.subq, target.mode.value,
                                      self._session_lock(), seqs, _OP_TIMEOUT_S, timeout=_OP_TIMEOUT_S)
        return [ReceivedMessage(r, receiver_key=self._key) for r in records]

    def peek_messages(self, max_message_count: int = 1, *, sequence_number: int = 0) -> list[ReceivedMessage]:
        """Browse messages without locking them, in sequence-number order (across partitions in index order).

        With `sequence_number=0` browsing continues after the last message this receiver peeked.
        """
        self._before_operation()
        count = check_count(max_message_count)
        start = check_sequence_number(sequence_number) or self._peek_from
        records = self._link.call("peek", self._target.entity, self._target.subq, self._session_lock(),
                                      start, count, timeout=_OP_TIMEOUT_S)
        messages = [ReceivedMessage(r, peeked=True) for r in records]
        if messages:
            self._peek_from = messages[-1].sequence_number + 1
        return messages

    # ------------------------------------------------------------------ settling

    def _settle(self, message: ReceivedMessage, action: str, reason: Any = None, description: Any = None) -> None:
        """Check a settlement here and buffer it for the next call (sent within FLUSH_DELAY_S)."""
        self._settlements.raise_deferred()
        session = self._session_lock()
        session_until = None if session is None else float(session["locked_until"])
        op = settlement_op(message, action, self._key, self._closed, reason, description, session_until)
        assert message.locked_until_utc is not None
        deadline = session_until if session_until is not None else message.locked_until_utc.timestamp()
        if self._settlements.add(message, op, deadline):
            self.flush()
        else:
            _FLUSHER.schedule(self, FLUSH_DELAY_S)

    def complete_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Remove the message from the entity."""
        if transaction is not None:
            raise InvalidOperationError("transactions are not available in this version; complete without transaction=")
        self._settle(message, "complete")

    def abandon_message(self, message: ReceivedMessage) -> None:
        """Release the lock at once; the message can be received again (its delivery counted)."""
        self._settle(message, "abandon")

    def defer_message(self, message: ReceivedMessage) -> None:
        """Set the message aside; only `receive_deferred_messages` can get it again."""
        self._settle(message, "defer")

    def dead_letter_message(self, message: ReceivedMessage, reason: str | None = None,
                            error_description: str | None = None) -> None:
        """Move the message to the dead-letter sub-queue with a reason and description."""
        self._settle(message, "dead_letter", reason, error_description)

    def renew_message_lock(self, message: ReceivedMessage) -> datetime:
        """Extend the message's lock by the entity's lock duration; returns the new expiry (UTC)."""
        return self._renew_message_lock(message, send_buffered=True)

    def _renew_message_lock(self, message: ReceivedMessage, *, send_buffered: bool) -> datetime:
        """Renew one message lock; without `send_buffered`, buffered settlements and their errors are
        left to the receiver's next operation (a lock renewer's thread renews this way)."""
        if self._target.session_id is not None:
            raise InvalidOperationError("messages of a session receiver are locked by the session: "
                                        "use receiver.session.renew_lock()")
        if self._target.mode is ReceiveMode.RECEIVE_AND_DELETE:
            raise InvalidOperationError("messages received in RECEIVE_AND_DELETE mode have no lock to renew")
        if send_buffered:
            self._before_operation()
        op = settlement_op(message, "renew", self._key, self._closed)
        results = self._link.call("settle", self._target.entity, self._target.subq, None, [op],
                                      _OP_TIMEOUT_S, timeout=_OP_TIMEOUT_S)
        until = apply_settlement(message, "renew", results[0])
        assert until is not None
        return until
