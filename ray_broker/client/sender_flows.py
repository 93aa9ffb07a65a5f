"""What a sender is without I/O: its entity, tier and state, batches, and its operations as flows.

The sync `Sender` and the async one (`ray_broker.aio`) run these flows; imports no Ray.
"""
from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any

from ..errors import InvalidArgumentError, InvalidOperationError
from ..protocol import NAMED_PRODUCER_PREFIX
from ..message import ReceivedMessage
from ..router_requests import (
    CancelScheduledRequest,
    SendBatchesRequest,
    SendPeekSessionRequest,
    SendRequest,
    SentAndPeeked,
)
from ..routing.planner import batch_number, check_sticky_batches, next_run
from ..sku import Sku
from .core import (
    DEFAULT_TIMEOUT_S,
    MAX_RECEIVE_COUNT,
    MessageBatch,
    envelopes_for_send,
    new_batch,
    schedule_epoch,
    sequence_list,
    wait_seconds,
)
from .flow import Flow, Link, Route, route
from .transacting import check_transaction


class SenderBase:
    """A sender's state and flows; its subclasses add the calls.

    Args:
        link: the namespace link the subclass calls through.
        sku: the namespace's tier (size limits).
        entity: the queue (or topic) sent to.
        sticky_batches: how many consecutive batches of this sender send their unkeyed messages to
            one partition before moving to the next; 1 (the default) is round robin, each batch to
            the next partition. `InvalidArgumentError` unless an int >= 1.
        partition_count: the namespace's partition count (numbers the batches of a sender with
            `sticky_batches` > 1).
    """

    def __init__(self, link: Link, sku: Sku, entity: str, *, sticky_batches: int = 1,
                 partition_count: int = 1) -> None:
        self._link = link
        self._sku = sku
        self._producer = uuid.uuid4().hex
        self._sticky_batches = check_sticky_batches(sticky_batches)
        self._partition_count = partition_count
        self._next_call = 0
        self._in_flight = 0
        self._tags = threading.Lock()
        self.entity_name = entity
        self._closed = False

    def _tag(self) -> tuple[str, int]:
        """The next batch's producer tag: every retry of one call repeats it, and a partition that
        already stored the batch answers with the first reply instead of storing it again.
        Successive batches take successive numbers, so their unkeyed messages go round the
        partitions one batch at a time (`planner.spread_start`), or a run of `sticky_batches` at a
        time (`planner.batch_number`); a batch sent while another send of this sender is still in
        flight starts a new run, so that concurrent sends go to different partitions."""
        with self._tags:
            call = next_run(self._next_call, self._sticky_batches) if self._in_flight else self._next_call
            self._next_call = call + 1
        return self._producer, batch_number(call, self._sticky_batches, self._partition_count)

    def _sending(self, send: Route) -> Flow[Any]:
        """Make a send, counted as in flight (see `_tag`) until it answers or fails."""
        with self._tags:
            self._in_flight += 1
        try:
            return (yield send)
        finally:
            with self._tags:
                self._in_flight -= 1

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidOperationError(f"the sender for {self.entity_name!r} is closed; create a new one")

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> MessageBatch:
        """An empty batch, bounded by the tier's batch size (or a smaller `max_size_in_bytes`)."""
        self._check_open()
        return new_batch(self._sku, max_size_in_bytes)

    def _send(self, message: Any, timeout: float | None, transaction: Any) -> Flow[None]:
        self._check_open()
        envelopes = envelopes_for_send(self._sku, message)
        if envelopes and transaction is not None:
            yield from check_transaction(transaction)._stage_send(self._link, self.entity_name, envelopes)
        elif envelopes:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            yield from self._sending(route(SendRequest(self.entity_name, envelopes, wait, self._tag()), timeout=wait))

    def _send_batches(self, batches: Any, timeout: float | None) -> Flow[None]:
        self._check_open()
        if isinstance(batches, MessageBatch) or not isinstance(batches, (list, tuple)):
            raise InvalidArgumentError(
                f"send_message_batches takes a list of batches, got {type(batches).__name__}; "
                "send one batch with send_messages")
        parts = [(envelopes, self._tag()) for envelopes in (envelopes_for_send(self._sku, b) for b in batches)
                 if envelopes]
        if parts:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            yield from self._sending(route(SendBatchesRequest(self.entity_name, parts, wait), timeout=wait))

    def _send_idempotent(self, message: Any, producer_id: str, batch_number: int,
                         timeout: float | None) -> Flow[None]:
        self._check_open()
        if not isinstance(producer_id, str) or not producer_id:
            raise InvalidArgumentError(f"producer_id must be a non-empty string, got {producer_id!r}")
        if not isinstance(batch_number, int) or isinstance(batch_number, bool) or batch_number < 0:
            raise InvalidArgumentError(f"batch_number must be an int >= 0, got {batch_number!r}")
        envelopes = envelopes_for_send(self._sku, message)
        if envelopes:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            tag = (NAMED_PRODUCER_PREFIX + producer_id, batch_number)
            yield from self._sending(route(SendRequest(self.entity_name, envelopes, wait, tag), timeout=wait))

    def _send_peek_session(self, message: Any, timeout: float | None) -> Flow[list[ReceivedMessage]]:
        self._check_open()
        envelopes = envelopes_for_send(self._sku, message)
        if not envelopes:
            raise InvalidArgumentError("send_and_peek_session needs at least one message to send")
        wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
        send = SendPeekSessionRequest(self.entity_name, envelopes, wait, self._tag(), MAX_RECEIVE_COUNT)
        reply: SentAndPeeked = yield from self._sending(route(send, timeout=wait))
        return [ReceivedMessage(record, peeked=True) for record in reply.records]

    def _schedule(self, messages: Any, schedule_time_utc: datetime, timeout: float | None) -> Flow[list[int]]:
        self._check_open()
        envelopes = envelopes_for_send(self._sku, messages, schedule_at=schedule_epoch(schedule_time_utc))
        if not envelopes:
            return []
        wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
        seqs = yield from self._sending(route(SendRequest(self.entity_name, envelopes, wait, self._tag()), timeout=wait))
        return [int(s) for s in seqs if s is not None]

    def _cancel_scheduled(self, sequence_numbers: int | list[int], timeout: float | None) -> Flow[None]:
        self._check_open()
        seqs = sequence_list(sequence_numbers)
        if seqs:
            wait = wait_seconds(timeout, DEFAULT_TIMEOUT_S)
            yield route(CancelScheduledRequest(self.entity_name, seqs, wait), timeout=wait)
