"""Async senders: `send_messages`, batches, and scheduled messages."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from ..client.core import DEFAULT_TIMEOUT_S, MessageBatch
from ..client.flow import run_async
from ..client.sender_flows import SenderBase
from ..message import ReceivedMessage
from .closing import Closing


class Sender(SenderBase, Closing):
    """Sends messages to one queue (or topic) from an event loop; `rb.Sender`'s methods, awaited.

    Example:
        async with ns.get_queue_sender("orders") as sender:
            await sender.send_messages([rb.Message("a"), rb.Message("b")])
    """

    async def close(self) -> None:
        """Close the sender (it holds no broker resources)."""
        self._closed = True

    async def create_message_batch(self, max_size_in_bytes: int | None = None) -> MessageBatch:  # type: ignore[override]
        """An empty batch, bounded by the tier's batch size (or a smaller `max_size_in_bytes`);
        awaited, as the SDK's async sender makes it."""
        return super().create_message_batch(max_size_in_bytes)

    async def send_messages(self, message: Any, *, timeout: float | None = DEFAULT_TIMEOUT_S,
                            transaction: Any = None) -> None:
        """Send a message, a list of messages or a `MessageBatch` in one call."""
        await run_async(self._link, self._send(message, timeout, transaction))

    async def send_and_peek_session(self, message: Any, *,
                                    timeout: float | None = DEFAULT_TIMEOUT_S) -> list[ReceivedMessage]:
        """Send messages of one session and browse that session right after them, in one call to
        its partition, as `rb.Sender.send_and_peek_session` does."""
        return await run_async(self._link, self._send_peek_session(message, timeout))

    async def send_message_batches(self, batches: list[Any], *, timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Send several batches in as few calls as routing allows: each a `MessageBatch` (or a
        message, or a list of messages, as `send_messages` takes), each stored whole on each
        partition it reaches and retried under its own producer tag, so nothing is stored twice.
        The batches' messages bound for one partition go in one call there and one store commit;
        unkeyed messages go round robin, each batch's to the partition after the last batch's (or
        a run of `sticky_batches` batches to one partition, when the sender was made with it).
        Every batch is checked before any is sent; a failure may leave earlier batches sent.
        Bulk writers (the Spark sink) use it to cut the calls per message.
        """
        await run_async(self._link, self._send_batches(batches, timeout))

    async def send_idempotent(self, message: Any, *, producer_id: str, batch_number: int,
                              timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Send messages as batch `batch_number` of the idempotent producer `producer_id`.

        Every partition the call reaches stores the tag in the same store transaction as the
        messages, and a later call with the same producer id and batch number stores nothing again
        where it was stored (a partition remembers a named producer's last 32 batch numbers per
        entity, for 30 days). Unkeyed messages go to the partition the tag hashes to, so a replay
        goes where the first attempt went. Stream sinks use it to write each micro-batch once.
        """
        await run_async(self._link, self._send_idempotent(message, producer_id, batch_number, timeout))

    async def schedule_messages(self, messages: Any, schedule_time_utc: datetime, *,
                                timeout: float | None = DEFAULT_TIMEOUT_S) -> list[int]:
        """Schedule messages for `schedule_time_utc`; returns their sequence numbers, for cancelling."""
        return await run_async(self._link, self._schedule(messages, schedule_time_utc, timeout))

    async def cancel_scheduled_messages(self, sequence_numbers: int | list[int], *,
                                        timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Cancel scheduled messages by the sequence numbers `schedule_messages` returned."""
        await run_async(self._link, self._cancel_scheduled(sequence_numbers, timeout))
