"""Deploying and attaching to a namespace, and the `Namespace` handle with queue management."""
from __future__ import annotations

import os
import threading
import weakref
from datetime import timedelta
from types import TracebackType
from typing import Any

from ..config import NamespaceConfig
from ..entities import (
    FIXED_QUEUE_PROPERTIES,
    QueueProperties,
    QueueRuntimeProperties,
    check_entity_name,
    normalize_queue_options,
)
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ..sku import Sku, get_sku
from .core import DEFAULT_TIMEOUT_S, ReceiveMode, receive_target
from .direct import DirectLink
from .lifecycle import connect_namespace, start_namespace, stop_namespace
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

    Also a context manager: `close()` (or leaving `with`) closes the senders and receivers this
    handle made and leaves the namespace running (`rb.stop` stops it). A pickled handle arrives open.

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
        self._senders: weakref.WeakSet[Sender] = weakref.WeakSet()
        self._clients_lock = threading.Lock()
        self._closed = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_namespace, (self.config, self.relay))

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every sender and receiver this handle made (receivers first send their pending
        settlements and release what they hold); the namespace keeps running. Idempotent.

        Every client is closed even when one fails; the first failure is raised afterwards.
        """
        with self._clients_lock:
            self._closed = True
            clients: list[Sender | Receiver] = [*self._senders, *self._receivers]
            self._senders.clear()
            self._receivers.clear()
        first_error: Exception | None = None
        for client in clients:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - the other clients are still closed; raised below
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def _track(self, client: Sender | Receiver) -> None:
        """Remember a new sender or receiver for `close()`; refused once this handle is closed."""
        with self._clients_lock:
            if self._closed:
                raise InvalidOperationError(
                    f"this handle to namespace {self.name!r} is closed; get a new one with "
                    f"ray_broker.connect({self.name!r}) to make senders and receivers")
            if isinstance(client, Sender):
                self._senders.add(client)
            else:
                self._receivers.add(client)

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

    def _queue_properties(self, definition: dict[str, Any]) -> QueueProperties:
        return QueueProperties.from_definition(definition, sku=self.sku)

    def _queue_definition(self, name: str) -> dict[str, Any]:
        check_entity_name(name, "queue")
        definition = self._link.call("definition", name, True, timeout=_MANAGEMENT_TIMEOUT_S)
        if definition["kind"] != "queue":
            raise MessagingEntityNotFoundError(f"{name!r} is a {definition['kind']}, not a queue", entity=name)
        return definition  # type: ignore[no-any-return]

    def create_queue(self, queue_name: str, *, enable_partitioning: bool = False, requires_session: bool = False,
                     requires_duplicate_detection: bool = False,
                     duplicate_detection_history_time_window: timedelta = timedelta(minutes=10),
                     lock_duration: timedelta = timedelta(seconds=60), max_delivery_count: int = 10,
                     default_message_time_to_live: timedelta | None = None,
                     dead_lettering_on_message_expiration: bool = False, forward_to: str | None = None,
                     forward_dead_lettered_messages_to: str | None = None, max_size_in_megabytes: int = 1024,
                     status: str = "Active", user_metadata: str | None = None) -> QueueProperties:
        """Create a queue (partitioned over every partition, or whole on one).

        `user_metadata` is free text kept with the queue (at most 1024 characters).
        """
        check_entity_name(queue_name, "queue")
        options = normalize_queue_options({
            "enable_partitioning": enable_partitioning, "requires_session": requires_session,
            "requires_duplicate_detection": requires_duplicate_detection,
            "duplicate_detection_history_time_window": duplicate_detection_history_time_window,
            "lock_duration": lock_duration, "max_delivery_count": max_delivery_count,
            "default_message_time_to_live": default_message_time_to_live,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "forward_to": forward_to, "forward_dead_lettered_messages_to": forward_dead_lettered_messages_to,
            "max_size_in_megabytes": max_size_in_megabytes, "status": status, "user_metadata": user_metadata,
        })
        definition = self._link.call("create_entity", "queue", queue_name, options, _MANAGEMENT_TIMEOUT_S,
                                     timeout=_MANAGEMENT_TIMEOUT_S)
        return self._queue_properties(definition)

    def get_queue(self, queue_name: str) -> QueueProperties:
        """A queue's settings."""
        return self._queue_properties(self._queue_definition(queue_name))

    def update_queue(self, properties_or_name: QueueProperties | str, **changes: Any) -> QueueProperties:
        """Change a queue's settings (`enable_partitioning` and `requires_session` cannot change).

        Given a `QueueProperties` (as `get_queue` returns it, modified), the options that differ from
        the queue's are the changes; its fixed fields (`auto_delete_on_idle`,
        `max_message_size_in_kilobytes`, `enable_batched_operations`, `availability_status`) must
        keep the values the queue has here.
        """
        if isinstance(properties_or_name, QueueProperties):
            name = properties_or_name.name
            current = self._queue_properties(self._queue_definition(name))
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
            self._queue_definition(name)
        else:
            raise InvalidArgumentError("update_queue takes a QueueProperties or a queue name")
        normalize_queue_options(changes)
        definition = self._link.call("update_entity", name, changes, _MANAGEMENT_TIMEOUT_S,
                                     timeout=_MANAGEMENT_TIMEOUT_S)
        return self._queue_properties(definition)

    def delete_queue(self, queue_name: str) -> None:
        """Delete a queue and every message in it."""
        self._queue_definition(queue_name)
        self._link.call("delete_entity", queue_name, _MANAGEMENT_TIMEOUT_S, timeout=_MANAGEMENT_TIMEOUT_S)

    def list_queues(self) -> list[QueueProperties]:
        """Every queue, in name order."""
        return [self._queue_properties(d)
                for d in self._link.call("list_entities", "queue", timeout=_MANAGEMENT_TIMEOUT_S)]

    def get_queue_runtime_properties(self, queue_name: str) -> QueueRuntimeProperties:
        """A queue's message counts, summed over partitions (availability "Limited" if one did not answer).

        Settlements this handle's receivers still hold are sent first, so the counts include them.
        """
        self._flush_receivers()
        self._queue_definition(queue_name)
        reply = self._link.call("runtime", queue_name, timeout=_MANAGEMENT_TIMEOUT_S)
        return QueueRuntimeProperties.aggregate(reply["definition"]["name"], reply["partitions"], reply["definition"])

    def _flush_receivers(self) -> None:
        for receiver in list(self._receivers):
            if not receiver._closed:
                receiver._send_buffered()

    # ------------------------------------------------------------------ clients

    def get_queue_sender(self, queue_name: str) -> Sender:
        """A sender for a queue (`InvalidOperationError` once this handle is closed)."""
        check_entity_name(queue_name, "queue")
        sender = Sender(self._link, self.sku, queue_name)
        self._track(sender)
        return sender

    def get_queue_receiver(self, queue_name: str, *, receive_mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
                           sub_queue: Any = None, session_id: Any = None, prefetch_count: int = 0,
                           max_wait_time: float | None = None) -> Receiver:
        """A receiver for a queue or its dead-letter sub-queue (paths like "q/$deadletterqueue" work too);
        `InvalidOperationError` once this handle is closed."""
        target = receive_target(queue_name, receive_mode=receive_mode, sub_queue=sub_queue, session_id=session_id,
                                prefetch_count=prefetch_count, max_wait_time=max_wait_time)
        receiver = Receiver(self._link, self.sku, target)
        self._track(receiver)
        return receiver


def _rebuild_namespace(config: NamespaceConfig, relay: bool) -> Namespace:
    return Namespace(config, relay=relay)


__all__ = ["start", "connect", "stop", "Namespace", "DEFAULT_TIMEOUT_S"]
