"""What one AMQP connection of the front end allows: frame size, message size and idle timeout by
tier, as Service Bus advertises them. Pure.

- The largest frame is 262,144 bytes on basic and standard, 1,048,576 bytes on premium (the
  connection's Open says so; a client splits larger transfers into frames of that size).
- The largest message is the tier's (`ray_broker.sku.Sku.max_message_bytes`); every link the
  client sends on advertises it as its `max-message-size` (the SDKs size their batches by it), and
  a transfer that grows past it is refused with `amqp:link:message-size-exceeded` (which the SDKs
  raise as `MessageSizeExceededError`) before the rest of it is read into memory.
- A connection that sends nothing at all (not even the empty frames the SDKs send as heartbeats)
  for `IDLE_TIMEOUT_S` is closed with `amqp:resource-limit-exceeded`; its Open advertises half
  that as its idle-time-out, so a client that heartbeats at the advertised pace has time to spare.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import MessageSizeExceededError
from ..sku import Sku

IDLE_TIMEOUT_S = 120.0
"""How long a connection may stay silent before the front end closes it."""
STANDARD_FRAME_BYTES = 256 * 1024
PREMIUM_FRAME_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits one connection is served with."""

    max_frame_bytes: int
    max_message_bytes: int
    idle_timeout_s: float
    tier: str

    def check_transfer(self, received_bytes: int) -> None:
        """Raise `MessageSizeExceededError` once a transfer has more bytes than a message may."""
        if received_bytes > self.max_message_bytes:
            raise MessageSizeExceededError(
                f"the transfer has at least {received_bytes} bytes; the {self.tier} tier allows "
                f"{self.max_message_bytes} bytes per message and per batch: send smaller messages or "
                "split the batch")


def limits_for(sku: Sku, idle_timeout_s: float = IDLE_TIMEOUT_S) -> ConnectionLimits:
    """The connection limits of a namespace of tier `sku`."""
    frame = PREMIUM_FRAME_BYTES if sku.name == "premium" else STANDARD_FRAME_BYTES
    return ConnectionLimits(frame, sku.max_message_bytes, idle_timeout_s, sku.name)
