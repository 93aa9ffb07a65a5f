"""What a receiver is without I/O: its state (session lock, peek position, buffered settlements)
and its operations as flows (see `flow.py`).

The sync `Receiver` and the async one (`ray_broker.aio`) run these flows, each with its own lock
around them and its own timer for buffered settlements; imports no Ray.
"""
from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any, Union

from ..clock import to_datetime
from ..errors import InvalidOperationError, MessageAlreadySettled
from ..message import ReceivedMessage
from ..router_requests import (
    AcceptSessionRequest,
    CloseReceiverRequest,
    PeekRequest,
    ReceiveDeferredRequest,
    ReceiveReply,
    ReceiveRequest,
    SessionCallRequest,
    SettleRequest,
)
from ..sku import Sku
from ..wire import HeldSession, SessionRef
from .core import (
    NEXT_AVAILABLE_SESSION,
    Flush,
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
from .flow import Flow, Link, route
from .renewal import LockView, Registration
from .transacting import check_transaction

OP_TIMEOUT_S = 60.0
"""How long a receiver's calls (other than receives) wait."""


class ReceiverBase:
    """A receiver's state and flows; its subclasses add the calls.

    Args:
        link: the namespace link the subclass calls through.
        sku: the namespace's tier (size limits of session state).
        target: what it receives from, as `receive_target` checked it.
    """

    _auto_lock_renewer: Any = None
    """The lock renewer that registers what this receiver locks (`auto_lock_renewer=`), if any."""

    def __init__(self, link: Link, sku: Sku, target: ReceiveTarget) -> None:
        self._link = link
        self._sku = sku
        self._target = target
        self._key = uuid.uuid4().hex
        self._closed = False
        self._session: HeldSession | None = None
        """The session lock held, as the broker granted it and renewed it, with the highest
        sequence number received in it (`seen`); it travels with the receiver's calls."""
        self._peek_from = 0
        self._settlements = SettlementBuffer()
        self.entity_path = target.entity
        self.receive_mode = target.mode
        self.max_wait_time = target.max_wait_time

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOperationError(f"the receiver for {self._target.entity!r} is closed; create a new one")

    @property
    def _iteration_batch(self) -> int:
        """How many messages each step of iterating over the receiver asks for."""
        return max(1, self._target.prefetch_count)

    def _check_renewer(self) -> None:
        """Before receiving: refuse when the `auto_lock_renewer` is closed (nothing is received)."""
        if self._auto_lock_renewer is not None:
            self._auto_lock_renewer._check_not_closed()

    def _registered(self, messages: list[ReceivedMessage]) -> list[ReceivedMessage]:
        """Register what this receiver just locked (its session, or `messages`) with its
        `auto_lock_renewer`, if it has one."""
        renewer = self._auto_lock_renewer
        if renewer is not None:
            session = self.session if self._session is not None else None  # type: ignore[attr-defined]
            for renewable in renewer._to_register(self, session, messages):
                renewer.register(self, renewable)
        return messages

    def _session_ref(self) -> SessionRef | None:
        return None if self._session is None else self._session.ref

    # ------------------------------------------------------------------ lifetime

    def _open(self) -> Flow[None]:
        """Lock the session of a session receiver (once)."""
        self._check_open()
        target = self._target
        if target.session_id is None or self._session is not None:
            return
        wanted = None if target.session_id is NEXT_AVAILABLE_SESSION else target.session_id
        self._session = yield route(AcceptSessionRequest(target.entity, wanted, target.max_wait_time),
                                    timeout=target.max_wait_time)

    def _close(self) -> Flow[None]:
        """Send pending settlements, then release what the receiver holds and its session lock."""
        if self._closed:
            return
        yield from self._send_buffered()
        self._closed = True
        yield route(CloseReceiverRequest(self._key), timeout=OP_TIMEOUT_S)
        if self._session is not None:
            yield route(SessionCallRequest(self._target.entity, self._session, "release_session"), timeout=OP_TIMEOUT_S)
        self._settlements.raise_deferred()

    # ------------------------------------------------------------------ buffered settlements

    def _send_buffered(self) -> Flow[None]:
        """Send buffered settlements, keeping any error for the receiver's next operation."""
        ops = self._settlements.drain()
        if not ops:
            return
        try:
            results = yield route(SettleRequest(self._target.entity, self._target.subq, self._session, ops,
                                                OP_TIMEOUT_S), timeout=OP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - kept and raised by the receiver's next operation
            self._settlements.fail(exc, len(ops))
            return
        except BaseException as exc:
            self._settlements.fail(exc, len(ops))
            raise
        self._settlements.record(results)

    def _flush(self) -> Flow[None]:
        """Send buffered settlements now and raise the first error any buffered settlement met."""
        self._check_open()
        yield from self._send_buffered()
        self._settlements.raise_deferred()

    def _before_operation(self) -> Flow[None]:
        """Raise what a buffered settlement met, then send the rest before another kind of call."""
        self._check_open()
        self._settlements.raise_deferred()
        yield from self._flush()

    # ------------------------------------------------------------------ receiving

    def _received(self, records: list[dict[str, Any]]) -> list[ReceivedMessage]:
        return [ReceivedMessage(r, receiver_key=self._key) for r in records]

    def _receive(self, max_message_count: int | None, max_wait_time: float | None) -> Flow[list[ReceivedMessage]]:
        """Up to `max_message_count` messages, carrying the buffered settlements."""
        self._check_open()
        self._settlements.raise_deferred()
        count = check_count(max_message_count)
        target = self._target
        wait = wait_seconds(max_wait_time, target.max_wait_time)
        yield from self._open()
        session = self._session
        ops = self._settlements.drain()
        try:
            reply: ReceiveReply = yield route(ReceiveRequest(
                self._key, target.entity, target.subq, target.mode.value, session, count, wait, target.prefetch_count,
                ops, target.partitions), timeout=wait)
        except BaseException as exc:
            if ops:
                self._settlements.fail(exc, len(ops))
            raise
        self._settlements.record(reply.settled)
        messages = self._received(reply.messages)
        if messages and self._session is not None:
            self._session = self._session._replace(
                seen=max(self._session.seen, max(m.sequence_number for m in messages)))
        return messages

    def _receive_deferred(self, sequence_numbers: int | list[int]) -> Flow[list[ReceivedMessage]]:
        """Deferred messages by their sequence numbers."""
        yield from self._before_operation()
        seqs = sequence_list(sequence_numbers)
        if not seqs:
            return []
        yield from self._open()
        target = self._target
        records = yield route(ReceiveDeferredRequest(target.entity, target.subq, target.mode.value, self._session,
                                                     seqs, OP_TIMEOUT_S), timeout=OP_TIMEOUT_S)
        return self._received(records)

    def _peek(self, max_message_count: int, sequence_number: int,
              end_sequence_number: int | None = None) -> Flow[list[ReceivedMessage]]:
        """Messages browsed without locking them, continuing after the last peeked one unless told
        where, and stopping before `end_sequence_number` when given."""
        yield from self._before_operation()
        count = check_count(max_message_count)
        start = check_sequence_number(sequence_number) or self._peek_from
        end = None if end_sequence_number is None else check_sequence_number(end_sequence_number)
        yield from self._open()
        records = yield route(PeekRequest(self._target.entity, self._target.subq, self._session, start, count, end),
                              timeout=OP_TIMEOUT_S)
        messages = [ReceivedMessage(r, peeked=True) for r in records]
        if messages:
            self._peek_from = messages[-1].sequence_number + 1
        return messages

    # ------------------------------------------------------------------ settling

    def _settle(self, message: Any, action: str, reason: Any = None, description: Any = None) -> Flush:
        """Check a settlement here and buffer it; says when the buffer is to be sent (no I/O)."""
        self._settlements.raise_deferred()
        now = time.time()
        session_until = None if self._session is None else self._session.locked_until
        op = settlement_op(message, action, self._key, self._closed, reason, description, session_until, now)
        deadline = session_until if session_until is not None else message.locked_until
        return self._settlements.add(message, op, deadline, now)

    def _settle_in(self, transaction: Any, message: Any, action: str, reason: Any = None,
                   description: Any = None) -> Flow[None]:
        """Check a settlement here and add it to `transaction` (applied when it commits)."""
        transaction = check_transaction(transaction)
        self._settlements.raise_deferred()
        if action == "renew":
            self._check_message_locks()
        session_until = None if self._session is None else self._session.locked_until
        op = settlement_op(message, action, self._key, self._closed, reason, description, session_until, time.time())
        yield from transaction._stage_settlement(self._link, self._target.entity, self._target.subq,
                                                 self._session_ref(), message, op)

    def _check_message_locks(self) -> None:
        """Raise unless this receiver's messages have locks of their own to renew."""
        if self._target.session_id is not None:
            raise InvalidOperationError("messages of a session receiver are locked by the session: "
                                        "use receiver.session.renew_lock()")
        if self._target.mode is ReceiveMode.RECEIVE_AND_DELETE:
            raise InvalidOperationError("messages received in RECEIVE_AND_DELETE mode have no lock to renew")

    def _renew_message_lock(self, message: ReceivedMessage, *, send_buffered: bool) -> Flow[float]:
        """Renew one message lock; returns its new expiry (epoch seconds). Without `send_buffered`,
        buffered settlements and their errors are left to the receiver's next operation (lock
        renewers renew this way)."""
        self._check_message_locks()
        if send_buffered:
            yield from self._before_operation()
        op = settlement_op(message, "renew", self._key, self._closed)
        results = yield route(SettleRequest(self._target.entity, self._target.subq, None, [op], OP_TIMEOUT_S),
                              timeout=OP_TIMEOUT_S)
        apply_settlement(message, "renew", results[0])
        return float(results[0])

    # ------------------------------------------------------------------ sessions

    def _session_call(self, operation: str, *args: Any, send_buffered: bool = True) -> Flow[Any]:
        """A call on the held session (locked first if need be); without `send_buffered`, buffered
        settlements and their errors are left to the receiver's next operation."""
        if send_buffered:
            yield from self._before_operation()
        yield from self._open()
        assert self._session is not None, "only session receivers have a session"
        return (yield route(SessionCallRequest(self._target.entity, self._session, operation, args),
                            timeout=OP_TIMEOUT_S))

    def _set_session_state(self, state: bytes | str | None) -> Flow[None]:
        yield from self._session_call("set_session_state", session_state_bytes(state, self._sku))

    def _renew_session(self, *, send_buffered: bool) -> Flow[float]:
        """Extend the session lock; returns its new expiry (epoch seconds)."""
        until = float((yield from self._session_call("renew_session", send_buffered=send_buffered)))
        assert self._session is not None
        self._session = self._session._replace(locked_until=until)
        return until

    def _renewal(self, renewable: Renewable) -> Flow[float]:
        """A lock renewer's renewal of `renewable` (message or session): buffered settlements and
        their errors are left alone. Returns the new expiry (epoch seconds)."""
        if isinstance(renewable, SessionBase):
            return (yield from self._renew_session(send_buffered=False))
        return (yield from self._renew_message_lock(renewable, send_buffered=False))


class SessionBase:
    """The session a session receiver holds: its id and lock expiry (the subclasses add the calls).

    Before the receiver has locked its session, `session_id` is the one it asked for (None for the
    next available one) and `locked_until_utc` is None.
    """

    def __init__(self, receiver: ReceiverBase) -> None:
        self._receiver = receiver

    @property
    def session_id(self) -> str | None:
        """The session's id."""
        lock = self._receiver._session
        if lock is not None:
            return lock.session_id
        wanted = self._receiver._target.session_id
        return wanted if isinstance(wanted, str) else None

    @property
    def locked_until_utc(self) -> datetime | None:
        """When the session lock expires unless renewed (UTC)."""
        lock = self._receiver._session
        return None if lock is None else to_datetime(lock.locked_until)


Renewable = Union[ReceivedMessage, SessionBase]
"""What a lock renewer keeps locked: a received message or a receiver's session."""


def lock_view(registration: Registration[Renewable]) -> LockView:
    """The lock state of a registered message or session, read from the client objects (no I/O)."""
    renewable = registration.renewable
    receiver: ReceiverBase = registration.receiver
    if isinstance(renewable, SessionBase):
        assert receiver._session is not None
        return LockView(receiver._session.locked_until, False, receiver._closed)
    assert renewable.locked_until is not None
    return LockView(renewable.locked_until, renewable._settled, receiver._closed)


def check_renewable(receiver: ReceiverBase, renewable: Renewable) -> None:
    """Raise unless `receiver` holds the lock on `renewable` and can renew it."""
    receiver._check_open()
    if isinstance(renewable, SessionBase):
        if renewable._receiver is not receiver:
            raise InvalidOperationError(
                f"session {renewable.session_id!r} is held by another receiver; register it with that receiver")
        if receiver._session is None:
            raise InvalidOperationError(
                "the receiver has not locked its session yet; open the receiver (with / async with) before "
                "registering its session")
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
