"""Senders: `send_messages`, batches, and scheduled messages."""
from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import Any

from ..message import ReceivedMessage
from .core import DEFAULT_TIMEOUT_S
from .flow import run
from .sender_flows import SenderBase


class Sender(SenderBase):
    """Sends messages to one queue (or topic).

    Example:
        with ns.get_queue_sender("orders") as sender:
            sender.send_messages([rb.Message("a"), rb.Message("b")])
    """

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the sender (it holds no broker resources)."""
        self._closed = True

    def send_messages(self, message: Any, *, timeout: float | None = DEFAULT_TIMEOUT_S, transaction: Any = None) -> None:
        """Send a message, a list of messages or a `MessageBatch` in one call."""
        run(self._link, self._send(message, timeout, transaction))

    def send_and_peek_session(self, message: Any, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> list[ReceivedMessage]:
        """Send messages of one session (a message, or a list of them with one `session_id`) to a
        session-enabled queue and browse that session as it stands right after them, in one call
        to the session's partition and one store commit, so that nothing comes between the two:
        the session's messages in sequence order (up to 10,000), the new ones last, without
        taking the session's lock. An ordered log per key with read-your-write: a writer learns
        what was stored before its record (the Ray Serve result store decides races this way).
        `InvalidOperationError` for an entity without sessions or messages of several sessions."""
        return run(self._link, self._send_peek_session(message, timeout))

    def send_message_batches(self, batches: list[Any], *, timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Send several batches in as few calls as routing allows: each a `MessageBatch` (or a
        message, or a list of messages, as `send_messages` takes), each stored whole on each
        partition it reaches and retried under its own producer tag, so nothing is stored twice.
        The batches' messages bound for one partition go in one call there and one store commit;
        unkeyed messages go round robin, each batch's to the partition after the last batch's (or
        a run of `sticky_batches` batches to one partition, when the sender was made with it).
        Every batch is checked before any is sent; a failure may leave earlier batches sent.
        Bulk writers (the Spark sink) use it to cut the calls per message.
        """
        run(self._link, self._send_batches(batches, timeout))

    def send_idempotent(self, message: Any, *, producer_id: str, batch_number: int,
                        timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Send messages as batch `batch_number` of the idempotent producer `producer_id`.

        Every partition the call reaches stores the tag in the same store transaction as the
        messages, and a later call with the same producer id and batch number stores nothing again
        where it was stored (a partition remembers a named producer's last 32 batch numbers per
        entity, for 30 days). Unkeyed messages go to the partition the tag hashes to, so a replay
        goes where the first attempt went. Stream sinks use it to write each micro-batch once.
        """
        run(self._link, self._send_idempotent(message, producer_id, batch_number, timeout))

    def schedule_messages(self, messages: Any, schedule_time_utc: datetime, *,
                          timeout: float | None = DEFAULT_TIMEOUT_S) -> list[int]:
        """Schedule messages for `schedule_time_utc`; returns their sequence numbers, for cancelling."""
        return run(self._link, self._schedule(messages, schedule_time_utc, timeout))

    def cancel_scheduled_messages(self, sequence_numbers: int | list[int], *,
                                  timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Cancel scheduled messages by the sequence numbers `schedule_messages` returned."""
        run(self._link, self._cancel_scheduled(sequence_numbers, timeout))
