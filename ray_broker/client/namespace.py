"""Deploying and attaching to a namespace, and the `Namespace` handle with queue management."""
from __future__ import annotations

import os
import weakref
from datetime import timedelta
from typing import Any

from ..config import NamespaceConfig
from ..entities import QueueProperties, QueueRuntimeProperties, check_entity_name, normalize_queue_options
from ..errors import InvalidArgumentError, MessagingEntityNotFoundError
from ..sku import Sku, get_sku
from .core import DEFAULT_TIMEOUT_S, ReceiveMode, receive_target
from .lifecycle import connect_namespace, start_namespace, stop_namespace
from .direct import DirectLink
from .link import GatewayLink
from .receiver import Receiver
from .sender import Sender

_MANAGEMENT_TIMEOUT_S = 60.0


def start(name: str, *, sku: str = "standard", partitions: int | None = None, data_dir: str | None = None,
          gateways: int = 1, durability: str = "normal", address: str | None = None) -> Namespace:
    """Start a namespace (or return the running one of that name): its partitions and gateways.

    Joins the Ray cluster that `address`, `RAY_ADDRESS` or this machine's `ray start` head names,
    else starts an embedded local Ray that lives as long as this process. Raises `StoreLockedError`
    before creating anything when another process (another Ray cluster) holds the stores.
    """
    return Namespace(start_namespace(name, sku=sku, partitions=partitions, data_dir=data_dir, gateways=gateways,
                                     durability=durability, address=address))


def connect(name: str, *, address: str | None = None) -> Namespace:
    """Attach to a running namespace from any driver, task or actor (`NamespaceNotRunningError` if none)."""
    return Namespace(connect_namespace(name, address, how_to_start=f"ray_broker.start({name!r})"))


def stop(name: str, *, delete_data: bool = False) -> None:
    """Stop a namespace's actors; with `delete_data`, remove its stores too."""
    stop_namespace(name, delete_data=delete_data)


class Namespace:
    """A handle to a running namespace; picklable, so it can travel into tasks and actors.

    Senders and receivers send and receive straight from the partitions (the gateway hands out
    their handles); with `relay=True` every call goes through the gateway instead, for callers
    that should hold no partition handles.
    """

    def __init__(self, config: NamespaceConfig, gateway_index: int | None = None, *, relay: bool = False) -> None:
        self.config = config
        self.relay = relay
        index = gateway_index if gateway_index is not None else os.getpid() % config.gateways
        gateway = GatewayLink(config, index)
        self._link: GatewayLink | DirectLink = gateway if relay else DirectLink(config, gateway)
        self._receivers: weakref.WeakSet[Receiver] = weakref.WeakSet()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_namespace, (self.config, self.relay))

    def __repr__(self) -> str:
        return f"Namespace(name={self.name!r}, sku={self.config.sku!r}, partitions={self.partition_count})"

    @property
    def name(self) -> str:
        """The namespace's name."""
        return self.config.name

    @property
    def partition_count(self) -> int:
        """How many partitions the namespace has (fixed at creation)."""
        return self.config.partition_count

    @property
    def sku(self) -> Sku:
        """The namespace's tier."""
        return get_sku(self.config.sku)

    # ------------------------------------------------------------------ queues

    def _queue_definition(self, name: str) -> dict[str, Any]:
        check_entity_name(name, "queue")
        definition = self._link.call("definition", name, True, timeout=_MANAGEMENT_TIMEOUT_S)
        if definition["kind"] != "queue":
            raise MessagingEntityNotFoundError(f"{name!r} is a {definition['kind']}, not a queue", entity=name)
        return definition  # type: ignore[no-any-return]

    def create_queue(self, name: str, *, enable_partitioning: bool = False, requires_session: bool = False,
                     requires_duplicate_detection: bool = False,
                     duplicate_detection_history_time_window: timedelta = timedelta(minutes=10),
                     lock_duration: timedelta = timedelta(seconds=60), max_delivery_count: int = 10,
                     default_message_time_to_live: timedelta | None = None,
                     dead_lettering_on_message_expiration: bool = False, forward_to: str | None = None,
                     forward_dead_lettered_messages_to: str | None = None, max_size_in_megabytes: int = 1024,
                     status: str = "Active") -> QueueProperties:
        """Create a queue (partitioned over every partition, or whole on one)."""
        check_entity_name(name, "queue")
        options = normalize_queue_options({
            "enable_partitioning": enable_partitioning, "requires_session": requires_session,
            "requires_duplicate_detection": requires_duplicate_detection,
            "duplicate_detection_history_time_window": duplicate_detection_history_time_window,
            "lock_duration": lock_duration, "max_delivery_count": max_delivery_count,
            "default_message_time_to_live": default_message_time_to_live,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "forward_to": forward_to, "forward_dead_lettered_messages_to": forward_dead_lettered_messages_to,
            "max_size_in_megabytes": max_size_in_megabytes, "status": status,
        })
        definition = self._link.call("create_entity", "queue", name, options, _MANAGEMENT_TIMEOUT_S,
                                     timeout=_MANAGEMENT_TIMEOUT_S)
        return QueueProperties.from_definition(definition)

    def get_queue(self, name: str) -> QueueProperties:
        """A queue's settings."""
        return QueueProperties.from_definition(self._queue_definition(name))

    def update_queue(self, properties_or_name: QueueProperties | str, **changes: Any) -> QueueProperties:
        """Change a queue's settings (`enable_partitioning` and `requires_session` cannot change)."""
        if isinstance(properties_or_name, QueueProperties):
            name = properties_or_name.name
            current = QueueProperties.from_definition(self._queue_definition(name)).changes()
            wanted = {k: v for k, v in properties_or_name.changes().items() if v != current.get(k)}
            changes = {**wanted, **changes}
        elif isinstance(properties_or_name, str):
            name = properties_or_name
            self._queue_definition(name)
        else:
            raise InvalidArgumentError("update_queue takes a QueueProperties or a queue name")
        normalize_queue_options(changes)
        definition = self._link.call("update_entity", name, changes, _MANAGEMENT_TIMEOUT_S,
                                     timeout=_MANAGEMENT_TIMEOUT_S)
        return QueueProperties.from_definition(definition)

    def delete_queue(self, name: str) -> None:
        """Delete a queue and every message in it."""
        self._queue_definition(name)
        self._link.call("delete_entity", name, _MANAGEMENT_TIMEOUT_S, timeout=_MANAGEMENT_TIMEOUT_S)

    def list_queues(self) -> list[QueueProperties]:
        """Every queue, in name order."""
        return [QueueProperties.from_definition(d)
                for d in self._link.call("list_entities", "queue", timeout=_MANAGEMENT_TIMEOUT_S)]

    def get_queue_runtime_properties(self, name: str) -> QueueRuntimeProperties:
        """A queue's message counts, summed over partitions (availability "Limited" if one did not answer).

        Settlements this handle's receivers still hold are sent first, so the counts include them.
        """
        self._flush_receivers()
        self._queue_definition(name)
        reply = self._link.call("runtime", name, timeout=_MANAGEMENT_TIMEOUT_S)
        return QueueRuntimeProperties.aggregate(reply["definition"]["name"], reply["partitions"], reply["definition"])

    def _flush_receivers(self) -> None:
        for receiver in list(self._receivers):
            if not receiver._closed:
                receiver._send_buffered()

    # ------------------------------------------------------------------ clients

    def get_queue_sender(self, queue: str) -> Sender:
        """A sender for a queue."""
        check_entity_name(queue, "queue")
        return Sender(self._link, self.sku, queue)

    def get_queue_receiver(self, queue: str, *, receive_mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
                           sub_queue: Any = None, session_id: Any = None, prefetch_count: int = 0,
                           max_wait_time: float | None = None) -> Receiver:
        """A receiver for a queue or its dead-letter sub-queue (paths like "q/$deadletterqueue" work too)."""
        target = receive_target(queue, receive_mode=receive_mode, sub_queue=sub_queue, session_id=session_id,
                                prefetch_count=prefetch_count, max_wait_time=max_wait_time)
        receiver = Receiver(self._link, self.sku, target)
        self._receivers.add(receiver)
        return receiver


def _rebuild_namespace(config: NamespaceConfig, relay: bool) -> Namespace:
    return Namespace(config, relay=relay)


__all__ = ["start", "connect", "stop", "Namespace", "DEFAULT_TIMEOUT_S"]
