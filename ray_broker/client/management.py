"""Queue management as flows (see `flow.py`): the requests a `Namespace` makes and what their replies
become. Shared by the sync and async namespaces; imports no Ray.

    properties = run(link, create_queue(sku, "orders", {"enable_partitioning": True}))
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Mapping, TypedDict

from ..entities import (
    FIXED_QUEUE_PROPERTIES,
    QueueProperties,
    QueueRuntimeProperties,
    check_entity_name,
    normalize_queue_options,
)
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ..sku import Sku
from .flow import Flow, request

MANAGEMENT_TIMEOUT_S = 60.0
"""How long a management call waits."""


class QueueOptions(TypedDict, total=False):
    """The keywords of `create_queue`; a missing one takes its default (`entities.QUEUE_DEFAULTS`)."""

    enable_partitioning: bool
    requires_session: bool
    requires_duplicate_detection: bool
    duplicate_detection_history_time_window: timedelta
    lock_duration: timedelta
    max_delivery_count: int
    default_message_time_to_live: timedelta | None
    dead_lettering_on_message_expiration: bool
    forward_to: str | None
    forward_dead_lettered_messages_to: str | None
    max_size_in_megabytes: int
    status: str
    user_metadata: str | None


def queue_definition(name: str) -> Flow[dict[str, Any]]:
    """A queue's definition, fresh from the namespace (`MessagingEntityNotFoundError` for another kind)."""
    check_entity_name(name, "queue")
    definition = yield request("definition", name, True, timeout=MANAGEMENT_TIMEOUT_S)
    if definition["kind"] != "queue":
        raise MessagingEntityNotFoundError(f"{name!r} is a {definition['kind']}, not a queue", entity=name)
    return definition  # type: ignore[no-any-return]


def create_queue(sku: Sku, queue_name: str, options: Mapping[str, Any]) -> Flow[QueueProperties]:
    """Create a queue with `options` (`Namespace.create_queue`'s keywords; missing ones take their defaults)."""
    check_entity_name(queue_name, "queue")
    wire = normalize_queue_options(options)
    definition = yield request("create_entity", "queue", queue_name, wire, MANAGEMENT_TIMEOUT_S,
                               timeout=MANAGEMENT_TIMEOUT_S)
    return QueueProperties.from_definition(definition, sku=sku)


def get_queue(sku: Sku, queue_name: str) -> Flow[QueueProperties]:
    """A queue's settings."""
    return QueueProperties.from_definition((yield from queue_definition(queue_name)), sku=sku)


def update_queue(sku: Sku, properties_or_name: QueueProperties | str, changes: dict[str, Any]) -> Flow[QueueProperties]:
    """Change a queue's settings (`Namespace.update_queue`)."""
    if isinstance(properties_or_name, QueueProperties):
        name = properties_or_name.name
        current = QueueProperties.from_definition((yield from queue_definition(name)), sku=sku)
        for key in FIXED_QUEUE_PROPERTIES:
            if getattr(properties_or_name, key) != getattr(current, key):
                raise InvalidOperationError(
                    f"{key} of queue {name!r} is fixed at {getattr(current, key)!r} in this broker and cannot "
                    f"be changed to {getattr(properties_or_name, key)!r}; leave it as get_queue returns it",
                    entity=name)
        current_options = current.changes()
        wanted = {k: v for k, v in properties_or_name.changes().items() if v != current_options.get(k)}
        changes = {**wanted, **changes}
    elif isinstance(properties_or_name, str):
        name = properties_or_name
        yield from queue_definition(name)
    else:
        raise InvalidArgumentError("update_queue takes a QueueProperties or a queue name")
    normalize_queue_options(changes)
    definition = yield request("update_entity", name, changes, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)
    return QueueProperties.from_definition(definition, sku=sku)


def delete_queue(queue_name: str) -> Flow[None]:
    """Delete a queue and every message in it."""
    yield from queue_definition(queue_name)
    yield request("delete_entity", queue_name, MANAGEMENT_TIMEOUT_S, timeout=MANAGEMENT_TIMEOUT_S)


def list_queues(sku: Sku) -> Flow[list[QueueProperties]]:
    """Every queue, in name order."""
    definitions = yield request("list_entities", "queue", timeout=MANAGEMENT_TIMEOUT_S)
    return [QueueProperties.from_definition(d, sku=sku) for d in definitions]


def queue_runtime_properties(queue_name: str) -> Flow[QueueRuntimeProperties]:
    """A queue's message counts, summed over partitions."""
    yield from queue_definition(queue_name)
    reply = yield request("runtime", queue_name, timeout=MANAGEMENT_TIMEOUT_S)
    return QueueRuntimeProperties.aggregate(reply["definition"]["name"], reply["partitions"], reply["definition"])
