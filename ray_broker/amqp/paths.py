"""AMQP link addresses as the Azure SDKs write them, parsed into what the broker names. Pure.

    orders                                    queue (or topic) "orders"
    orders/$DeadLetterQueue                   its dead-letter sub-queue
    orders/$Transfer/$DeadLetterQueue         its transfer dead-letter sub-queue
    events/Subscriptions/audit                subscription "audit" of topic "events"
    events/Subscriptions/audit/$management    that subscription's management node
    $cbs                                      the claims-based security node

An address may also be a whole URI (`amqp://host:port/orders`, `sb://host/orders`); only its path counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ..entities import SUBSCRIPTIONS_SEGMENT
from ..errors import InvalidArgumentError

CBS_NODE = "$cbs"
MANAGEMENT_SUFFIX = "/$management"
DEAD_LETTER_SUFFIX = "/$deadletterqueue"
TRANSFER_DEAD_LETTER_SUFFIX = "/$transfer/$deadletterqueue"


@dataclass(frozen=True)
class EntityAddress:
    """A parsed link address.

    Attributes:
        entity: the queue or topic, or `topic/subscriptions/sub` (the form the client takes).
        topic: the topic of a subscription address, else None.
        subscription: the subscription's name, else None.
        sub_queue: "deadletter", "transferdeadletter" or None (the entity itself).
        management: whether the address is the entity's `$management` node.
    """

    entity: str
    topic: str | None = None
    subscription: str | None = None
    sub_queue: str | None = None
    management: bool = False

    @property
    def receive_path(self) -> str:
        """The path a receiver opens: the entity with its sub-queue suffix."""
        suffix = {"deadletter": DEAD_LETTER_SUFFIX, "transferdeadletter": TRANSFER_DEAD_LETTER_SUFFIX}
        return self.entity + suffix.get(self.sub_queue or "", "")

    @property
    def auth_path(self) -> str:
        """The path a token must cover: the entity with its sub-queue (a token for the entity, or
        the namespace, covers its sub-queues; the management node shares its entity's path)."""
        return self.receive_path


def address_path(address: str) -> str:
    """The path of an address (a URI's path, or the address itself), without slashes at either end."""
    if "://" in address:
        address = urlsplit(address).path
    return address.strip("/")


def is_cbs(address: str | None) -> bool:
    """Whether `address` is the claims-based security node."""
    return address is not None and address_path(address).lower() == CBS_NODE


def parse_address(address: str | None) -> EntityAddress:
    """Parse a link address into an `EntityAddress`; `InvalidArgumentError` when it names no entity."""
    if not address:
        raise InvalidArgumentError("the link has no address: attach to a queue, topic or subscription path")
    path = address_path(address)
    lowered = path.lower()
    management = lowered.endswith(MANAGEMENT_SUFFIX)
    if management:
        path, lowered = path[: -len(MANAGEMENT_SUFFIX)], lowered[: -len(MANAGEMENT_SUFFIX)]
    sub_queue = None
    for suffix, name in ((TRANSFER_DEAD_LETTER_SUFFIX, "transferdeadletter"), (DEAD_LETTER_SUFFIX, "deadletter")):
        if lowered.endswith(suffix):
            path, lowered, sub_queue = path[: -len(suffix)], lowered[: -len(suffix)], name
            break
    topic = subscription = None
    marker = lowered.find(SUBSCRIPTIONS_SEGMENT)
    if marker >= 0:
        topic, subscription = path[:marker], path[marker + len(SUBSCRIPTIONS_SEGMENT):]
        path = f"{topic}{SUBSCRIPTIONS_SEGMENT}{subscription}"
    if not path or "$" in path or (topic is not None and (not topic or not subscription or "/" in subscription)):
        raise InvalidArgumentError(f"address {address!r} names no queue, topic or subscription")
    return EntityAddress(path, topic, subscription, sub_queue, management)
