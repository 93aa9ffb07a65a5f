"""Senders: `send_messages`, batches, and scheduled messages."""
from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import InvalidOperationError
from .core import DEFAULT_TIMEOUT_S, MessageBatch, envelopes_for_send, new_batch, schedule_epoch, sequence_list, wait_seconds

if TYPE_CHECKING:
    from ..sku import Sku
    from .direct import DirectLink
    from .link import GatewayLink


class Sender:
    """Sends messages to one queue (or topic)."""

    def __init__(self, link: GatewayLink | DirectLink, sku: Sku, entity: str) -> None:
        self._link = link
        self._sku = sku
        self._producer = uuid.uuid4().hex
        self._batches = itertools.count()
        self.entity_name = entity
        self._closed = False

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the sender (it holds no broker resources)."""
        self._closed = True

    def _tag(self) -> tuple[str, int]:
        """The next batch's producer tag: every retry of one call repeats it, and a partition that
        already stored the batch answers with the first reply instead of storing it again."""
        return self._producer, next(self._batches)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOperationError(f"the sender for {self.entity_name!r} is closed; create a new one")

    def send_messages(self, message: Any, *, timeout: float | None = DEFAULT_TIMEOUT_S, transaction: Any = None) -> None:
        """Send a message, a list of messages or a `MessageBatch` in one call."""
        self._check_open()
        if transaction is not None:
            raise InvalidOperationError("transactions are not available in this version; send without transaction=")
        envelopes = envelopes_for_send(self._sku, message)
        if envelopes:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            self._link.call("send", self.entity_name, envelopes, wait, self._tag(), timeout=wait)

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> MessageBatch:
        """An empty batch, bounded by the tier's batch size (or a smaller `max_size_in_bytes`)."""
        self._check_open()
        return new_batch(self._sku, max_size_in_bytes)

    def schedule_messages(self, messages: Any, schedule_time_utc: datetime, *,
                          timeout: float | None = DEFAULT_TIMEOUT_S) -> list[int]:
        """Schedule messages for `schedule_time_utc`; returns their sequence numbers, for cancelling."""
        self._check_open()
        envelopes = envelopes_for_send(self._sku, messages, schedule_at=schedule_epoch(schedule_time_utc))
        if not envelopes:
            return []
        wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
        seqs = self._link.call("send", self.entity_name, envelopes, wait, self._tag(), timeout=wait)
        return [int(s) for s in seqs if s is not None]

    def cancel_scheduled_messages(self, sequence_numbers: int | list[int], *,
                                  timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Cancel scheduled messages by the sequence numbers `schedule_messages` returned."""
        self._check_open()
        seqs = sequence_list(sequence_numbers)
        if seqs:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            self._link.call("cancel_scheduled", self.entity_name, seqs, wait, timeout=wait)
