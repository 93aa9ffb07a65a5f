"""Auto-forwarding from one partition: its outbox's batches sent on through the router.

Each batch goes to its destination as an idempotent send tagged with the batch's id (the same id
after a restart), so a destination partition that already stored it answers with the first reply
and stores nothing twice; only then is the batch removed at the source. A keyed message lands on
the destination partition its key selects. While the destination cannot be reached the batch
waits (and counts as transfer messages); a batch that can never arrive (no such destination, a
disabled one, a full one, or messages it refuses) goes to the transfer dead-letter queue.
"""
from __future__ import annotations

from typing import Any, Protocol

from ..errors import (
    InvalidOperationError,
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    QuotaExceededError,
)
from ..router_requests import SendRequest
from .router import Router

FORWARD_BATCH = 256
"""How many messages one forwarded batch holds at most."""
FORWARD_TIMEOUT_S = 10.0
"""How long one batch waits for its destination before the forwarder backs off."""
NEVER_DELIVERABLE = (MessagingEntityNotFoundError, MessagingEntityDisabledError, QuotaExceededError,
                     InvalidOperationError, MessageSizeExceededError)
"""What a destination answers when a batch can never reach it."""


class Outbox(Protocol):
    """What the forwarder needs of its partition's engine."""

    def forwards(self) -> bool:
        """Whether any entity hosted here auto-forwards."""
        ...

    def take_transfer(self, limit: int) -> dict[str, Any] | None:
        """The next batch to forward, or None."""
        ...

    def transfer_done(self, transfer_id: int) -> None:
        """The destination stored the batch."""
        ...

    def transfer_failed(self, transfer_id: int, reason: str, description: str) -> None:
        """The batch can never reach its destination."""
        ...


class Forwarder:
    """Forwards the outbox of partition `index` through `router`.

    Example:
        moved = await Forwarder(3, engine, router).forward_pending()
    """

    def __init__(self, index: int, outbox: Outbox, router: Router) -> None:
        self.index = index
        self.outbox = outbox
        self.router = router

    async def forward_pending(self) -> int:
        """Forward batches until none is left; how many messages reached their destinations.

        Raises what stopped a batch that may still arrive later (its destination partition is
        unavailable, say); the batch stays in the outbox for the next round.
        """
        moved = 0
        while self.outbox.forwards():
            transfer = self.outbox.take_transfer(FORWARD_BATCH)
            if transfer is None:
                break
            try:
                await self.router.run(SendRequest(transfer["destination"], transfer["envelopes"], FORWARD_TIMEOUT_S,
                                                  (f"forwarder:{self.index}", transfer["id"])))
            except NEVER_DELIVERABLE as exc:
                reason = type(exc).__name__.removesuffix("Error")
                self.outbox.transfer_failed(transfer["id"], reason,
                                            f"auto-forwarding from {transfer['source']!r} failed: {exc}")
                continue
            self.outbox.transfer_done(transfer["id"])
            moved += len(transfer["envelopes"])
        return moved
