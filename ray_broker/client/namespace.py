"""Deploying and attaching to a namespace, and the `Namespace` handle with its management calls."""
from __future__ import annotations

from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Iterable, Iterator, Mapping, TypeVar

from ..config import NamespaceConfig
from ..entities import (
    DEFAULT_DUPLICATE_WINDOW,
    DEFAULT_LOCK_DURATION,
    DEFAULT_MAX_DELIVERY_COUNT,
    DEFAULT_MAX_SIZE_IN_MEGABYTES,
    DEFAULT_STATUS,
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    SubscriptionRuntimeProperties,
    TopicProperties,
    TopicRuntimeProperties,
    check_entity_name,
)
from ..filters import RuleProperties, TrueFilter
from ..keys.sas import SasKey
from ..message import ReceivedMessage
from ..protocol import SubQueue
from . import management, operating
from .core import DEFAULT_TIMEOUT_S
from .direct import open_link
from .flow import Flow, run
from .handle import NamespaceBase
from .lifecycle import connect_namespace, ensure_ray, start_namespace, stop_namespace
from .receiver import Receiver, abandon_held
from .sender import Sender
from .transaction import Transaction

T = TypeVar("T")


def start(name: str, *, sku: str = "standard", partitions: int | None = None, data_dir: str | None = None,
          gateways: int = 1, durability: str = "normal", address: str | None = None,
          auth_token: str | None = None, replicas: int = 1, amqp_port: int | None = None,
          management_port: int | None = None, min_in_sync: int | None = None) -> Namespace:
    """Start a namespace (or return the running one of that name): its partitions and gateways.

    Joins the Ray cluster that `address`, `RAY_ADDRESS` or this machine's `ray start` head names,
    else starts an embedded local Ray that lives as long as this process. Raises `StoreLockedError`
    before creating anything when another process (another Ray cluster) holds the stores. With
    `auth_token` (or `$RAY_BROKER_AUTH_TOKEN`), every client must present that token to connect
    (`UnauthorizedError` otherwise), a later `start` of the running namespace included. With
    `replicas` > 1, every partition is that many copies on distinct nodes, and an acknowledged
    operation survives the loss of a node (README, "Replication"); `min_in_sync` sets how many
    of them must hold a change before it is acknowledged (a majority when None; 1 of 2 lets
    `replicas=2` fail over, as `min.insync.replicas=1` does in Kafka). With `amqp_port`, the namespace
    also serves AMQP 1.0 on that port of this node, so the Azure Service Bus SDKs reach it with a
    connection string (README, "Use the Azure SDKs"; needs the `amqp` extra); the management API
    of their administration clients is on that port too, and with `management_port` also on a
    port of its own over plain HTTP, as Microsoft's emulator serves it on 5300.
    """
    return Namespace(start_namespace(name, sku=sku, partitions=partitions, data_dir=data_dir, gateways=gateways,
                                     durability=durability, address=address, auth_token=auth_token,
                                     replicas=replicas, amqp_port=amqp_port, management_port=management_port,
                                     min_in_sync=min_in_sync))


def connect(name: str, *, address: str | None = None, auth_token: str | None = None) -> Namespace:
    """Attach to a running namespace from any driver, task or actor (`NamespaceNotRunningError` if none;
    `UnauthorizedError` unless `auth_token`, else `$RAY_BROKER_AUTH_TOKEN`, is its token, if it has one)."""
    return Namespace(connect_namespace(name, address, how_to_start=f"ray_broker.start({name!r})",
                                       auth_token=auth_token))


def stop(name: str, *, delete_data: bool = False) -> None:
    """Stop a namespace's actors; with `delete_data`, remove its stores too."""
    stop_namespace(name, delete_data=delete_data)


def init_ray(address: str | None = None, *, num_cpus: int | None = None,
             system_config: Mapping[str, Any] | None = None) -> None:
    """Connect this process to Ray as `start` and `connect` do, before either: for programs that
    run other Ray work beside the broker (Spark on Ray through RayDP, Ray Data) and want the Ray
    the broker would use, up first.

    Joins the cluster `address` names ("auto": this machine's `ray start` head; "local": none,
    start a new one), else `RAY_ADDRESS`'s, else this machine's `ray start` head; when there is
    none, starts an embedded local Ray in the Ray namespace "ray_broker" with the library's
    settings, which lives as long as this process. `num_cpus` (its logical CPUs; Ray's default is
    the machine's) and `system_config` (Ray system settings, added to the library's) apply to that
    local Ray only: a cluster keeps its own. Nothing when this process already joined Ray.
    `ClusterUnreachableError` for an address where no Ray head answers, `RayStartupError` when a
    local Ray does not come up.

    Example:
        rb.init_ray(num_cpus=4)        # or rb.init_ray("auto") to join this machine's cluster
        ns = rb.start("etl")
    """
    ensure_ray(address, num_cpus=num_cpus, system_config=system_config)


class Namespace(NamespaceBase[Sender, Receiver, Transaction]):
    """A handle to a running namespace; picklable, so it can travel into tasks and actors.

    Also a context manager: `close()` (or leaving `with`) closes the senders and receivers this
    handle made and leaves the namespace running (`rb.stop` stops it); the handle itself serves
    again on its next use, so one handle can serve several `with` blocks, as the SDK's client does.

    Senders and receivers send and receive straight from the partitions (the gateway hands out
    their handles); with `relay=True` every call goes through the gateway instead, for callers
    that should hold no partition handles.

    Example:
        ns = rb.connect("demo")
        ns.create_queue("orders", enable_partitioning=True)
        with ns.get_queue_sender("orders") as sender:
            sender.send_messages(rb.Message("hello"))
    """

    sender_class = Sender
    receiver_class = Receiver
    transaction_class = Transaction

    def __init__(self, config: NamespaceConfig, gateway_index: int | None = None, *, relay: bool = False) -> None:
        super().__init__(config, open_link(config, gateway_index, relay=relay), relay=relay)

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every sender and receiver this handle made (receivers first send their pending
        settlements and release what they hold); the namespace keeps running, and the handle makes
        new senders and receivers again when asked. Idempotent.

        Every client is closed even when one fails; the first failure is raised afterwards.
        """
        first_error: Exception | None = None
        for client in self._take_clients():
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - the other clients are still closed; raised below
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def _run(self, flow: Flow[T]) -> T:
        return run(self._link, flow)

    # ------------------------------------------------------------------ queues

    def create_queue(self, queue_name: str, *, enable_partitioning: bool = False, requires_session: bool = False,
                     requires_duplicate_detection: bool = False,
                     duplicate_detection_history_time_window: timedelta = DEFAULT_DUPLICATE_WINDOW,
                     lock_duration: timedelta = DEFAULT_LOCK_DURATION,
                     max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT,
                     default_message_time_to_live: timedelta | None = None,
                     dead_lettering_on_message_expiration: bool = False, forward_to: str | None = None,
                     forward_dead_lettered_messages_to: str | None = None,
                     max_size_in_megabytes: int = DEFAULT_MAX_SIZE_IN_MEGABYTES, status: str = DEFAULT_STATUS,
                     user_metadata: str | None = None, auto_delete_on_idle: timedelta | None = None,
                     enable_express: bool = False, enable_batched_operations: bool = True) -> QueueProperties:
        """Create a queue (partitioned over every partition, or whole on one).

        `user_metadata` is free text kept with the queue (at most 1024 characters).
        `auto_delete_on_idle` (at least 5 minutes; None: never) deletes the queue once it has been
        idle that long: no send, receive, settlement or update. `enable_express` and
        `enable_batched_operations` are kept and shown (messages are stored as the namespace stores
        every message, and a send is acknowledged once stored, either way).
        """
        options = {
            "enable_partitioning": enable_partitioning, "requires_session": requires_session,
            "requires_duplicate_detection": requires_duplicate_detection,
            "duplicate_detection_history_time_window": duplicate_detection_history_time_window,
            "lock_duration": lock_duration, "max_delivery_count": max_delivery_count,
            "default_message_time_to_live": default_message_time_to_live,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "forward_to": forward_to, "forward_dead_lettered_messages_to": forward_dead_lettered_messages_to,
            "max_size_in_megabytes": max_size_in_megabytes, "status": status, "user_metadata": user_metadata,
            "auto_delete_on_idle": auto_delete_on_idle, "enable_express": enable_express,
            "enable_batched_operations": enable_batched_operations,
        }
        return self._run(management.create_queue(self.sku, queue_name, options))

    def get_queue(self, queue_name: str) -> QueueProperties:
        """A queue's settings."""
        return self._run(management.get_queue(self.sku, queue_name))

    def update_queue(self, properties_or_name: QueueProperties | str, **changes: Any) -> QueueProperties:
        """Change a queue's settings (`enable_partitioning` and `requires_session` cannot change).

        Given a `QueueProperties` (as `get_queue` returns it, modified), the options that differ from
        the queue's are the changes; its fixed fields (`max_message_size_in_kilobytes`,
        `availability_status`) must keep the values the queue has here.
        """
        return self._run(management.update_queue(self.sku, properties_or_name, changes))

    def delete_queue(self, queue_name: str) -> None:
        """Delete a queue and every message in it."""
        self._run(management.delete_queue(queue_name))

    def list_queues(self) -> list[QueueProperties]:
        """Every queue, in name order."""
        return self._run(management.list_queues(self.sku))

    def get_queue_runtime_properties(self, queue_name: str) -> QueueRuntimeProperties:
        """A queue's message counts, summed over partitions (availability "Limited" if one did not answer).

        Settlements this handle's receivers still hold are sent first, so the counts include them.
        """
        for receiver in self._open_receivers():
            receiver._flush_pending()
        return self._run(management.queue_runtime_properties(queue_name))

    # ------------------------------------------------------------------ topics

    def create_topic(self, topic_name: str, *, enable_partitioning: bool = False,
                     requires_duplicate_detection: bool = False,
                     duplicate_detection_history_time_window: timedelta = DEFAULT_DUPLICATE_WINDOW,
                     default_message_time_to_live: timedelta | None = None,
                     max_size_in_megabytes: int = DEFAULT_MAX_SIZE_IN_MEGABYTES, status: str = DEFAULT_STATUS,
                     user_metadata: str | None = None, auto_delete_on_idle: timedelta | None = None,
                     enable_express: bool = False, enable_batched_operations: bool = True,
                     support_ordering: bool = True) -> TopicProperties:
        """Create a topic (partitioned over every partition, or whole on one); its subscriptions
        share its partitioning. `InvalidOperationError` on the basic tier. `auto_delete_on_idle`,
        `enable_express` and `enable_batched_operations` as for `create_queue` (a topic is idle
        while it gets no sends and no update); `support_ordering` is kept and shown (each
        partition keeps its messages in order either way)."""
        options = {
            "enable_partitioning": enable_partitioning, "requires_duplicate_detection": requires_duplicate_detection,
            "duplicate_detection_history_time_window": duplicate_detection_history_time_window,
            "default_message_time_to_live": default_message_time_to_live,
            "max_size_in_megabytes": max_size_in_megabytes, "status": status, "user_metadata": user_metadata,
            "auto_delete_on_idle": auto_delete_on_idle, "enable_express": enable_express,
            "enable_batched_operations": enable_batched_operations, "support_ordering": support_ordering,
        }
        return self._run(management.create_topic(self.sku, topic_name, options))

    def get_topic(self, topic_name: str) -> TopicProperties:
        """A topic's settings."""
        return self._run(management.get_topic(self.sku, topic_name))

    def update_topic(self, properties_or_name: TopicProperties | str, **changes: Any) -> TopicProperties:
        """Change a topic's settings (`enable_partitioning` and `requires_duplicate_detection`
        cannot change); given a `TopicProperties`, the options that differ are the changes."""
        return self._run(management.update_topic(self.sku, properties_or_name, changes))

    def delete_topic(self, topic_name: str) -> None:
        """Delete a topic, its subscriptions and every message in them."""
        check_entity_name(topic_name, "topic")
        self._run(management.delete_entity(topic_name, "topic"))

    def list_topics(self) -> list[TopicProperties]:
        """Every topic, in name order."""
        return self._run(management.list_topics(self.sku))

    def get_topic_runtime_properties(self, topic_name: str) -> TopicRuntimeProperties:
        """A topic's scheduled messages, stored bytes (each message once) and subscription count."""
        return self._run(management.topic_runtime_properties(topic_name))

    # ------------------------------------------------------------------ subscriptions

    def create_subscription(self, topic_name: str, subscription_name: str, *, requires_session: bool = False,
                            lock_duration: timedelta = DEFAULT_LOCK_DURATION,
                            max_delivery_count: int = DEFAULT_MAX_DELIVERY_COUNT,
                            default_message_time_to_live: timedelta | None = None,
                            dead_lettering_on_message_expiration: bool = False,
                            dead_lettering_on_filter_evaluation_exceptions: bool = True,
                            forward_to: str | None = None, forward_dead_lettered_messages_to: str | None = None,
                            status: str = DEFAULT_STATUS, user_metadata: str | None = None,
                            rule: Any = None, auto_delete_on_idle: timedelta | None = None,
                            enable_batched_operations: bool = True) -> SubscriptionProperties:
        """Create a subscription of a topic. `rule` is the filter of its "$Default" rule
        (`SqlFilter`, `CorrelationFilter`, `TrueFilter` or `FalseFilter`; None gives a TrueFilter).
        `auto_delete_on_idle` and `enable_batched_operations` as for `create_queue` (a subscription
        is idle while it gets no receive, settlement or update)."""
        options = {
            "requires_session": requires_session, "lock_duration": lock_duration,
            "max_delivery_count": max_delivery_count, "default_message_time_to_live": default_message_time_to_live,
            "dead_lettering_on_message_expiration": dead_lettering_on_message_expiration,
            "dead_lettering_on_filter_evaluation_exceptions": dead_lettering_on_filter_evaluation_exceptions,
            "forward_to": forward_to, "forward_dead_lettered_messages_to": forward_dead_lettered_messages_to,
            "status": status, "user_metadata": user_metadata, "auto_delete_on_idle": auto_delete_on_idle,
            "enable_batched_operations": enable_batched_operations,
        }
        return self._run(management.create_subscription(topic_name, subscription_name, options, rule))

    def get_subscription(self, topic_name: str, subscription_name: str) -> SubscriptionProperties:
        """A subscription's settings."""
        return self._run(management.get_subscription(topic_name, subscription_name))

    def update_subscription(self, topic_name: str, properties_or_name: SubscriptionProperties | str,
                            **changes: Any) -> SubscriptionProperties:
        """Change a subscription's settings (`requires_session` cannot change)."""
        return self._run(management.update_subscription(topic_name, properties_or_name, changes))

    def delete_subscription(self, topic_name: str, subscription_name: str) -> None:
        """Delete a subscription and every message in it."""
        self._run(management.delete_subscription(topic_name, subscription_name))

    def list_subscriptions(self, topic_name: str) -> list[SubscriptionProperties]:
        """Every subscription of a topic, in name order."""
        return self._run(management.list_subscriptions(topic_name))

    def get_subscription_runtime_properties(self, topic_name: str,
                                            subscription_name: str) -> SubscriptionRuntimeProperties:
        """A subscription's message counts, summed over partitions (settlements this handle's
        receivers still hold are sent first)."""
        for receiver in self._open_receivers():
            receiver._flush_pending()
        return self._run(management.subscription_runtime_properties(topic_name, subscription_name))

    # ------------------------------------------------------------------ rules

    def create_rule(self, topic_name: str, subscription_name: str, rule_name: str, *, filter: Any = None,
                    action: Any = None) -> RuleProperties:
        """Add a rule to a subscription (`filter` None is a `TrueFilter`); it selects the messages
        sent from then on. An unparsable SQL filter or action raises `RuleSyntaxError` where it is built."""
        return self._run(management.create_rule(topic_name, subscription_name, rule_name,
                                                 TrueFilter() if filter is None else filter, action))

    def get_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> RuleProperties:
        """One rule of a subscription."""
        return self._run(management.get_rule(topic_name, subscription_name, rule_name))

    def update_rule(self, topic_name: str, subscription_name: str, rule: RuleProperties) -> None:
        """Replace the filter and action of the subscription's rule named `rule.name` (a `RuleProperties`
        as `get_rule` returns it, with `filter` and `action` changed) on every partition at once; it
        selects the messages sent from then on. A bad filter or action raises `RuleSyntaxError` or
        `InvalidArgumentError` before anything changes; a missing rule `MessagingEntityNotFoundError`."""
        self._run(management.update_rule(topic_name, subscription_name, rule))

    def delete_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> None:
        """Remove a rule from a subscription."""
        self._run(management.delete_rule(topic_name, subscription_name, rule_name))

    def list_rules(self, topic_name: str, subscription_name: str) -> list[RuleProperties]:
        """A subscription's rules."""
        return self._run(management.list_rules(topic_name, subscription_name))


    # ------------------------------------------------------------------ operator actions

    def purge(self, entity: str, *, sub_queue: Any = None) -> int:
        """Remove every message of a queue or subscription (`TOPIC/Subscriptions/SUB`): active,
        deferred and scheduled ones, locked ones too (their settlement then fails with the lock
        lost); with `sub_queue=SubQueue.DEAD_LETTER`, those of its dead-letter queue instead. Runs
        in batches of `operating.PURGE_BATCH` per partition, so other traffic goes on meanwhile;
        returns how many messages it removed. Sessions' states, sequence numbers and other
        entities are untouched."""
        return sum(self.purge_batches(entity, sub_queue=sub_queue))

    def purge_batches(self, entity: str, *, sub_queue: Any = None) -> Iterator[int]:
        """`purge` one batch at a time: yields how many messages each batch removed (stop iterating
        to stop between batches)."""
        subq = operating.sub_queue_number(sub_queue)
        name = self._run(operating.holder(entity))["name"]
        while True:
            reply = self._run(operating.purge_batch(name, subq))
            yield reply.removed
            if not reply.more:
                return

    def resubmit_dead_letters(self, entity: str, *, sequence_numbers: Iterable[int] | None = None,
                              filter: Any = None, to: str | None = None) -> int:
        """Move dead letters of a queue or subscription (`TOPIC/Subscriptions/SUB`), all or those
        with `sequence_numbers`, and of those the ones `filter` selects (SQL over their properties
        as a subscription rule reads them, e.g. `"user.region = 'eu' AND sys.label = 'order'"`,
        or a `SqlFilter` or `CorrelationFilter`), back to their entity (a subscription's to its
        topic) or to `to` (a queue or topic), as new messages with the same body and properties
        but without the dead-letter reason and description. Each is removed from the dead-letter
        queue only once its copy is stored (an interruption leaves at worst a copy, never a
        loss). Returns how many moved (0 when none was there to move)."""
        return sum(self.resubmit_batches(entity, sequence_numbers=sequence_numbers, filter=filter, to=to))

    def resubmit_batches(self, entity: str, *, sequence_numbers: Iterable[int] | None = None,
                         filter: Any = None, to: str | None = None) -> Iterator[int]:
        """`resubmit_dead_letters` one batch at a time: yields how many each batch moved (stop
        iterating to stop between batches). Bad arguments raise before the first batch."""
        picking = operating.Picking(sequence_numbers, filter)
        definition = self._run(operating.holder(entity))
        target = self._run(operating.destination(to, definition))
        return self._resubmitting(definition["name"], target, picking)

    def _resubmitting(self, name: str, target: operating.Target, picking: operating.Picking) -> Iterator[int]:
        receiver = self.get_queue_receiver(name, sub_queue=SubQueue.DEAD_LETTER)
        sender = (self.get_queue_sender if target.kind == "queue" else self.get_topic_sender)(target.name)
        try:
            while picking.more:
                batch = receiver.receive_messages(operating.RESUBMIT_BATCH, max_wait_time=operating.RESUBMIT_WAIT_S)
                moving = picking.take(batch)
                if moving is None:
                    return
                if moving:
                    sender.send_messages([operating.resubmitted(m, target) for m in moving])
                    for message in moving:
                        receiver.complete_message(message)
                    yield len(moving)
        finally:
            abandon_held(receiver, picking.passed.values())
            receiver.close()
            sender.close()

    def peek_messages(self, entity: str, max_message_count: int = 10, *, sequence_number: int = 0,
                      sub_queue: Any = None, session_id: str | None = None, filter: Any = None,
                      partition: int | None = None) -> list[ReceivedMessage]:
        """Browse up to `max_message_count` messages of a queue or subscription
        (`TOPIC/Subscriptions/SUB`), or of its dead-letter queue with `sub_queue`, without locking
        them: from `sequence_number`, those of partition `partition` only when given (else every
        partition's, merged in sequence-number order), of session `session_id` when given (its
        lock is not taken: a receiver may hold the session meanwhile), and
        of those the ones `filter` selects (SQL over their properties as a subscription rule reads
        them, a `SqlFilter` or a `CorrelationFilter`; a filtered peek reads on until it has found
        enough or reached the end)."""
        return self._run(operating.peek(entity, max_message_count, sequence_number=sequence_number,
                                sub_queue=sub_queue, session_id=session_id, filter=filter,
                                partition=partition, partition_count=self.partition_count))

    # ------------------------------------------------------------------ sessions

    def list_queue_sessions(self, queue_name: str, *, state_updated_after: datetime | None = None) -> list[str]:
        """The ids of a session-enabled queue's sessions that have active messages or a stored
        state, in id order (the SDK's `ServiceBusClient.list_queue_sessions`); given
        `state_updated_after`, those whose state was set after that time instead."""
        return self._run(management.list_queue_sessions(queue_name, state_updated_after))

    def list_subscription_sessions(self, topic_name: str, subscription_name: str, *,
                                   state_updated_after: datetime | None = None) -> list[str]:
        """The ids of a session-enabled subscription's sessions that have active messages or a
        stored state, in id order; given `state_updated_after`, those whose state was set after
        that time instead."""
        return self._run(management.list_subscription_sessions(topic_name, subscription_name, state_updated_after))

    # ------------------------------------------------------------------ shared access keys

    def list_shared_access_keys(self) -> list[SasKey]:
        """The namespace's shared access keys (name, key, rights), which sign the tokens of the
        Azure SDKs' connection strings; every namespace starts with `RootManageSharedAccessKey`."""
        return self._run(management.shared_access_keys())

    def add_shared_access_key(self, name: str, rights: Iterable[str] | str) -> SasKey:
        """Make a new random shared access key named `name` with `rights` (any of "Manage", "Send",
        "Listen"; Manage implies the others). A link the AMQP front end opens with a token it
        signed may do what the rights allow: sending needs Send, receiving Listen.

        Example:
            key = ns.add_shared_access_key("orders-sender", ["Send"])
        """
        return self._run(management.add_shared_access_key(name, rights))

    def remove_shared_access_key(self, name: str) -> None:
        """Remove a shared access key: the tokens it signed are refused from then on. The last key
        with the Manage right stays."""
        self._run(management.remove_shared_access_key(name))

__all__ = ["start", "connect", "stop", "Namespace", "DEFAULT_TIMEOUT_S"]
