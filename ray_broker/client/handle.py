"""What a namespace handle is without I/O: its configuration, its link, and the senders and
receivers it made. The sync `Namespace` and the async one (`ray_broker.aio`) add the calls;
imports no Ray.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, ClassVar, Generic, Iterable, TypeVar

from ..config import NamespaceConfig
from ..entities import check_entity_name, check_subscription_name, subscription_path
from ..protocol import ReceiveMode
from ..sku import Sku, get_sku
from .core import receive_target
from .flow import Link
from .receiver_flows import ReceiverBase
from .renewing import check_auto_lock_renewer
from .sender_flows import SenderBase
from .transacting import TransactionBase

S = TypeVar("S", bound=SenderBase)
R = TypeVar("R", bound=ReceiverBase)
X = TypeVar("X", bound=TransactionBase)


class NamespaceBase(Generic[S, R, X]):
    """A handle's state and the clients it makes; subclasses name their sender and receiver
    classes and add the calls.

    Args:
        config: the namespace.
        link: how the handle reaches the namespace.
        relay: whether every call goes through the gateway (kept when the handle is pickled).
    """

    sender_class: ClassVar[type[SenderBase]]
    receiver_class: ClassVar[type[ReceiverBase]]
    transaction_class: ClassVar[type[TransactionBase]]

    def __init__(self, config: NamespaceConfig, link: Link, *, relay: bool) -> None:
        self.config = config
        self.relay = relay
        self._link = link
        self._receivers: weakref.WeakSet[R] = weakref.WeakSet()
        self._senders: weakref.WeakSet[S] = weakref.WeakSet()
        self._clients_lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.config, self.relay))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, sku={self.config.sku!r}, partitions={self.partition_count})"

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

    def _take_clients(self) -> list[S | R]:
        """Hand over the clients this handle made, to be closed; the handle itself stays usable
        (a closed handle opens again on its next use, as the SDK's client does)."""
        with self._clients_lock:
            clients: list[S | R] = [*self._senders, *self._receivers]
            self._senders.clear()
            self._receivers.clear()
        return clients

    def _open_receivers(self) -> list[R]:
        """The receivers this handle made that are still open."""
        return [r for r in list(self._receivers) if not r._closed]

    def _track(self, client: S | R) -> None:
        """Remember a new sender or receiver for `close()`."""
        with self._clients_lock:
            if isinstance(client, SenderBase):
                self._senders.add(client)
            else:
                self._receivers.add(client)

    def transaction(self) -> X:
        """A new transaction (see `Transaction`); `InvalidOperationError` on the basic tier."""
        self.sku.require("transactions")
        return self.transaction_class(self._link, self.sku, self.partition_count)  # type: ignore[return-value]

    def get_queue_sender(self, queue_name: str, *, sticky_batches: int = 1) -> S:
        """A sender for a queue.

        Unkeyed messages go round robin: each batch (a send call, or each batch of
        `send_message_batches`) to the next partition that is up. `sticky_batches=n` keeps n
        consecutive batches of this sender on one partition before moving to the next (fewer,
        warmer partitions for one fast sender, fewer receivers reading its messages in parallel);
        `InvalidArgumentError` unless an int >= 1.
        """
        check_entity_name(queue_name, "queue")
        sender: S = self.sender_class(self._link, self.sku, queue_name,  # type: ignore[assignment]
                                      sticky_batches=sticky_batches, partition_count=self.partition_count)
        self._track(sender)
        return sender

    def get_queue_receiver(self, queue_name: str, *, receive_mode: ReceiveMode = ReceiveMode.PEEK_LOCK,
                           sub_queue: Any = None, session_id: Any = None, prefetch_count: int = 0,
                           max_wait_time: float | None = None, partitions: Iterable[int] | None = None,
                           auto_lock_renewer: Any = None) -> R:
        """A receiver for a queue or its dead-letter sub-queue (paths like "q/$deadletterqueue" work too).

        `auto_lock_renewer` (an `AutoLockRenewer` of this client, sync or async as the handle)
        registers every message the receiver locks as it receives it, or the session of a session
        receiver when it is locked, as `renewer.register` would.

        `partitions` is for readers that share an entity out among themselves (the Spark bridge's
        read tasks): the partition indexes, as sequence numbers name them (`rb.partition_of`; a
        non-partitioned entity's are all 0), whose messages this receiver takes; None takes them
        from every partition, as a receiver unaware of partitions does.
        """
        target = receive_target(queue_name, receive_mode=receive_mode, sub_queue=sub_queue, session_id=session_id,
                                prefetch_count=prefetch_count, max_wait_time=max_wait_time, partitions=partitions,
                                partition_count=self.partition_count)
        renewer = check_auto_lock_renewer(auto_lock_renewer, self.receiver_class)
        receiver: R = self.receiver_class(self._link, self.sku, target)  # type: ignore[assignment]
        receiver._auto_lock_renewer = renewer
        self._track(receiver)
        return receiver

    def get_topic_sender(self, topic_name: str, *, sticky_batches: int = 1) -> S:
        """A sender for a topic.

        Unkeyed messages go round robin: each batch (a send call, or each batch of
        `send_message_batches`) to the next partition that is up. `sticky_batches=n` keeps n
        consecutive batches of this sender on one partition before moving to the next (fewer,
        warmer partitions for one fast sender, fewer receivers reading its messages in parallel);
        `InvalidArgumentError` unless an int >= 1.
        """
        check_entity_name(topic_name, "topic")
        sender: S = self.sender_class(self._link, self.sku, topic_name,  # type: ignore[assignment]
                                      sticky_batches=sticky_batches, partition_count=self.partition_count)
        self._track(sender)
        return sender

    def get_subscription_receiver(self, topic_name: str, subscription_name: str, *,
                                  receive_mode: ReceiveMode = ReceiveMode.PEEK_LOCK, sub_queue: Any = None,
                                  session_id: Any = None, prefetch_count: int = 0,
                                  max_wait_time: float | None = None, partitions: Iterable[int] | None = None,
                                  auto_lock_renewer: Any = None) -> R:
        """A receiver for a subscription or its dead-letter sub-queue; everything a queue receiver
        does."""
        check_entity_name(topic_name, "topic")
        path = subscription_path(topic_name, check_subscription_name(subscription_name))
        return self.get_queue_receiver(path, receive_mode=receive_mode, sub_queue=sub_queue, session_id=session_id,
                                       prefetch_count=prefetch_count, max_wait_time=max_wait_time,
                                       partitions=partitions, auto_lock_renewer=auto_lock_renewer)


def _rebuild(cls: type[NamespaceBase[Any, Any, Any]], config: NamespaceConfig,
             relay: bool) -> NamespaceBase[Any, Any, Any]:
    return cls(config, relay=relay)  # type: ignore[call-arg]
