"""Async receivers: receive, settle, defer, peek, and sessions, on the caller's event loop."""
from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, AsyncIterator, TypeVar

from ..clock import to_datetime
from ..client.core import FLUSH_DELAY_S, Flush, ReceiveTarget
from ..client.flow import Flow, Link, run_async
from ..client.receiver_flows import ReceiverBase, Renewable, SessionBase
from ..message import ReceivedMessage
from ..sku import Sku
from .closing import Closing

T = TypeVar("T")


class ReceiverSession(SessionBase):
    """The session a session receiver holds: its id, lock expiry and state, awaited.

    Its calls lock the session first if the receiver has not yet (`async with receiver` does).

    Example:
        async with ns.get_queue_receiver("orders", session_id="s1") as receiver:
            await receiver.session.set_state(b"step 2")
            print(receiver.session.session_id, await receiver.session.get_state())
    """

    _receiver: Receiver

    async def get_state(self) -> bytes | None:
        """The session's state (None if it was never set)."""
        return await self._receiver._run(self._receiver._session_call("get_session_state"))  # type: ignore[no-any-return]

    async def set_state(self, state: bytes | str | None) -> None:
        """Replace the session's state; None clears it."""
        await self._receiver._run(self._receiver._set_session_state(state))

    async def renew_lock(self) -> datetime:
        """Extend the session lock (and the locks of its messages) by the entity's lock duration."""
        return to_datetime(await self._receiver._run(self._receiver._renew_session(send_buffered=True)))  # type: ignore[return-value]


class Receiver(ReceiverBase, Closing):
    """Receives from one queue or dead-letter sub-queue on an event loop; `rb.Receiver`'s methods,
    awaited, and `async for`. It belongs to the loop it is first used on.

    Settlements are buffered and travel with the next receive (or are sent on their own within
    50 ms, by a task on this loop); `await flush()` sends them at once.

    Example:
        async with ns.get_queue_receiver("orders", max_wait_time=5) as receiver:
            async for message in receiver:
                await receiver.complete_message(message)
    """

    def __init__(self, link: Link, sku: Sku, target: ReceiveTarget) -> None:
        super().__init__(link, sku, target)
        self._flush_lock = asyncio.Lock()
        self._session_handle = None if target.session_id is None else ReceiverSession(self)
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        """Whether the receiver was closed."""
        return self._closed

    def adopt(self, message: ReceivedMessage) -> ReceivedMessage:
        """`message`, locked by another receiver of this receiver's entity, as this receiver's: it
        settles and renews here by its lock token, as Service Bus takes a lock token on any
        receiver of the entity (used by the AMQP front end's `$management` node)."""
        return message.bound_to(self._key)

    async def _run(self, flow: Flow[T]) -> T:
        """Run one of the receiver's flows, one at a time (buffered settlements go out in order)."""
        async with self._flush_lock:
            return await run_async(self._link, flow)

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> Receiver:
        await self._run(self._open())
        self._registered([])
        return self

    async def close(self) -> None:
        """Send pending settlements, then release messages held but never handed out (no delivery
        counted) and the session lock."""
        await self._run(self._close())

    @property
    def session(self) -> ReceiverSession | None:
        """The session of a session receiver (its calls lock it first if need be), else None."""
        return self._session_handle

    # ------------------------------------------------------------------ buffered settlements

    async def flush(self) -> None:
        """Send buffered settlements now and raise the first error any buffered settlement met."""
        await self._run(self._flush())

    async def _flush_pending(self) -> None:
        """Send buffered settlements, keeping any error for the receiver's next operation."""
        await self._run(self._send_buffered())

    def _flush_later(self) -> None:
        if not self._closed:
            task = asyncio.ensure_future(self._flush_pending())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _after_settle(self, when: Flush) -> None:
        if when is Flush.LATER:
            asyncio.get_running_loop().call_later(FLUSH_DELAY_S, self._flush_later)
        elif when is Flush.NOW:
            await self.flush()

    # ------------------------------------------------------------------ receiving

    async def receive_messages(self, max_message_count: int | None = 1,
                               max_wait_time: float | None = None) -> list[ReceivedMessage]:
        """Up to `max_message_count` messages, waiting up to `max_wait_time` seconds for the first."""
        self._check_renewer()
        return self._registered(await self._run(self._receive(max_message_count, max_wait_time)))

    async def __aiter__(self) -> AsyncIterator[ReceivedMessage]:
        """Messages one by one; stops after `max_wait_time` without a message."""
        while batch := await self.receive_messages(self._iteration_batch):
            for message in batch:
                yield message

    async def receive_deferred_messages(self, sequence_numbers: int | list[int]) -> list[ReceivedMessage]:
        """Receive deferred messages by their sequence numbers."""
        self._check_renewer()
        return self._registered(await self._run(self._receive_deferred(sequence_numbers)))

    async def peek_messages(self, max_message_count: int = 1, *, sequence_number: int = 0,
                            end_sequence_number: int | None = None) -> list[ReceivedMessage]:
        """Browse messages without locking them, in sequence-number order; with `sequence_number=0`
        browsing continues after the last message this receiver peeked; with `end_sequence_number`
        it stops before that sequence number (see the sync receiver)."""
        return await self._run(self._peek(max_message_count, sequence_number, end_sequence_number))

    # ------------------------------------------------------------------ settling

    async def complete_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Remove the message from the entity (when `transaction` commits, if one is given)."""
        await self._settlement(message, "complete", transaction)

    async def abandon_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Release the lock at once; the message can be received again (its delivery counted)."""
        await self._settlement(message, "abandon", transaction)

    async def defer_message(self, message: ReceivedMessage, *, transaction: Any = None) -> None:
        """Set the message aside; only `receive_deferred_messages` can get it again."""
        await self._settlement(message, "defer", transaction)

    async def release_message(self, message: ReceivedMessage) -> None:
        """Unlock a message that was never handed on (the AMQP `released` outcome, which the Azure
        SDKs send for prefetched messages when a receiver closes): it can be received again at
        once, and this delivery does not count."""
        await self._settlement(message, "release", None)

    async def dead_letter_message(self, message: ReceivedMessage, reason: str | None = None,
                                  error_description: str | None = None, *, transaction: Any = None) -> None:
        """Move the message to the dead-letter sub-queue with a reason and description."""
        await self._settlement(message, "dead_letter", transaction, reason, error_description)

    async def renew_message_lock(self, message: ReceivedMessage, *, transaction: Any = None) -> datetime:
        """Extend the message's lock by the entity's lock duration; returns the new expiry (UTC).

        In a transaction the lock is extended when it commits; until then this returns the
        current expiry.
        """
        if transaction is not None:
            await self._run(self._settle_in(transaction, message, "renew"))
            return message.locked_until_utc  # type: ignore[return-value]
        return to_datetime(await self._run(self._renew_message_lock(message, send_buffered=True)))  # type: ignore[return-value]

    async def _settlement(self, message: ReceivedMessage, action: str, transaction: Any, reason: str | None = None,
                          description: str | None = None) -> None:
        """Buffer a settlement, or add it to `transaction`."""
        if transaction is None:
            await self._after_settle(self._settle(message, action, reason, description))
        else:
            await self._run(self._settle_in(transaction, message, action, reason, description))

    async def _renew_lock(self, renewable: Renewable) -> float:
        """A lock renewer's renewal: never waits behind a receive, leaves buffered settlements alone."""
        return await run_async(self._link, self._renewal(renewable))
