"""The async `Namespace` handle: management calls and the senders and receivers it makes."""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, TypeVar

from ..client import management, operating
from ..client.direct import open_link
from ..client.flow import Flow, route, run_async
from ..client.management import MANAGEMENT_TIMEOUT_S
from ..client.handle import NamespaceBase
from ..config import NamespaceConfig
from ..entities import (
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    SubscriptionRuntimeProperties,
    TopicProperties,
    TopicRuntimeProperties,
    check_entity_name,
    check_subscription_name,
)
from ..errors import InvalidArgumentError, MessageLockLostError
from ..filters import RuleProperties, TrueFilter
from ..keys.sas import SasKey
from ..message import ReceivedMessage
from ..protocol import SubQueue
from ..router_requests import PurgeReply, PurgeRequest
from .closing import Closing
from .paging import ItemList
from .receiver import Receiver
from .sender import Sender
from .transaction import Transaction

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..client.management import QueueOptions, SubscriptionOptions, TopicOptions

T = TypeVar("T")
MAX_DELETE_BATCH = 4000
"""The most messages one `delete_messages` call takes (Service Bus's limit of a batch delete)."""


def _delete_batch(entity: str, subq: int, max_count: int, before: float | None) -> Flow[PurgeReply]:
    """One purge batch of about `max_count` messages over all of `entity`'s partitions, enqueued
    before `before` when given."""
    return (yield route(PurgeRequest(entity, subq, max_count, MANAGEMENT_TIMEOUT_S, before, True),
                        timeout=MANAGEMENT_TIMEOUT_S))


class Namespace(NamespaceBase[Sender, Receiver, Transaction], Closing):
    """A handle to a running namespace for asyncio code; picklable, and interchangeable with a
    `ray_broker.Namespace` of the same name (`rba.Namespace(sync_ns.config)` and back).

    Its calls run on the caller's event loop (the data path through a router of that loop);
    `async with ns` / `await ns.close()` closes the senders and receivers it made.

    Example:
        ns = await rba.connect("demo")
        await ns.create_queue("orders", enable_partitioning=True)
        async with ns.get_queue_sender("orders") as sender:
            await sender.send_messages(rb.Message("hello"))
    """

    sender_class = Sender
    receiver_class = Receiver
    transaction_class = Transaction

    def __init__(self, config: NamespaceConfig, gateway_index: int | None = None, *, relay: bool = False) -> None:
        super().__init__(config, open_link(config, gateway_index, relay=relay), relay=relay)

    async def close(self) -> None:
        """Close every sender and receiver this handle made; the namespace keeps running, and the
        handle makes new senders and receivers again when asked. Idempotent.

        Every client is closed even when one fails; the first failure is raised afterwards.
        """
        first_error: Exception | None = None
        for client in self._take_clients():
            try:
                await client.close()
            except Exception as exc:  # noqa: BLE001 - the other clients are still closed; raised below
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    async def _run(self, flow: Flow[T]) -> T:
        return await run_async(self._link, flow)

    # ------------------------------------------------------------------ queues

    async def create_queue(self, queue_name: str, **options: Unpack[QueueOptions]) -> QueueProperties:
        """Create a queue; the keywords, their defaults and checks are those of `rb.Namespace.create_queue`."""
        return await self._run(management.create_queue(self.sku, queue_name, options))

    async def get_queue(self, queue_name: str) -> QueueProperties:
        """A queue's settings."""
        return await self._run(management.get_queue(self.sku, queue_name))

    async def update_queue(self, properties_or_name: QueueProperties | str, **changes: Any) -> QueueProperties:
        """Change a queue's settings, as `rb.Namespace.update_queue` does."""
        return await self._run(management.update_queue(self.sku, properties_or_name, changes))

    async def delete_queue(self, queue_name: str) -> None:
        """Delete a queue and every message in it."""
        await self._run(management.delete_queue(queue_name))

    def list_queues(self) -> ItemList[QueueProperties]:
        """Every queue, in name order: `async for q in ns.list_queues()`, or `await` it for a list."""
        return ItemList(lambda: self._run(management.list_queues(self.sku)))

    async def get_queue_runtime_properties(self, queue_name: str) -> QueueRuntimeProperties:
        """A queue's message counts, summed over partitions, including the settlements this
        handle's receivers still hold (sent first)."""
        for receiver in self._open_receivers():
            await receiver._flush_pending()
        return await self._run(management.queue_runtime_properties(queue_name))

    # ------------------------------------------------------------------ topics

    async def create_topic(self, topic_name: str, **options: Unpack[TopicOptions]) -> TopicProperties:
        """Create a topic; the keywords, their defaults and checks are those of `rb.Namespace.create_topic`."""
        return await self._run(management.create_topic(self.sku, topic_name, options))

    async def get_topic(self, topic_name: str) -> TopicProperties:
        """A topic's settings."""
        return await self._run(management.get_topic(self.sku, topic_name))

    async def update_topic(self, properties_or_name: TopicProperties | str, **changes: Any) -> TopicProperties:
        """Change a topic's settings, as `rb.Namespace.update_topic` does."""
        return await self._run(management.update_topic(self.sku, properties_or_name, changes))

    async def delete_topic(self, topic_name: str) -> None:
        """Delete a topic, its subscriptions and every message in them."""
        check_entity_name(topic_name, "topic")
        await self._run(management.delete_entity(topic_name, "topic"))

    def list_topics(self) -> ItemList[TopicProperties]:
        """Every topic, in name order: `async for`, or `await` it for a list."""
        return ItemList(lambda: self._run(management.list_topics(self.sku)))

    async def get_topic_runtime_properties(self, topic_name: str) -> TopicRuntimeProperties:
        """A topic's scheduled messages, stored bytes (each message once) and subscription count."""
        return await self._run(management.topic_runtime_properties(topic_name))

    # ------------------------------------------------------------------ subscriptions

    async def create_subscription(self, topic_name: str, subscription_name: str, *, rule: Any = None,
                                  **options: Unpack[SubscriptionOptions]) -> SubscriptionProperties:
        """Create a subscription; the keywords are those of `rb.Namespace.create_subscription`."""
        return await self._run(management.create_subscription(topic_name, subscription_name, options, rule))

    async def get_subscription(self, topic_name: str, subscription_name: str) -> SubscriptionProperties:
        """A subscription's settings."""
        return await self._run(management.get_subscription(topic_name, subscription_name))

    async def update_subscription(self, topic_name: str, properties_or_name: SubscriptionProperties | str,
                                  **changes: Any) -> SubscriptionProperties:
        """Change a subscription's settings (`requires_session` cannot change)."""
        return await self._run(management.update_subscription(topic_name, properties_or_name, changes))

    async def delete_subscription(self, topic_name: str, subscription_name: str) -> None:
        """Delete a subscription and every message in it."""
        await self._run(management.delete_subscription(topic_name, subscription_name))

    def list_subscriptions(self, topic_name: str) -> ItemList[SubscriptionProperties]:
        """Every subscription of a topic, in name order: `async for`, or `await` it for a list."""
        check_entity_name(topic_name, "topic")
        return ItemList(lambda: self._run(management.list_subscriptions(topic_name)))

    async def get_subscription_runtime_properties(self, topic_name: str,
                                                  subscription_name: str) -> SubscriptionRuntimeProperties:
        """A subscription's message counts, summed over partitions, including the settlements this
        handle's receivers still hold (sent first)."""
        for receiver in self._open_receivers():
            await receiver._flush_pending()
        return await self._run(management.subscription_runtime_properties(topic_name, subscription_name))

    # ------------------------------------------------------------------ rules

    async def create_rule(self, topic_name: str, subscription_name: str, rule_name: str, *, filter: Any = None,
                          action: Any = None) -> RuleProperties:
        """Add a rule to a subscription, as `rb.Namespace.create_rule` does."""
        return await self._run(management.create_rule(topic_name, subscription_name, rule_name,
                                                       TrueFilter() if filter is None else filter, action))

    async def get_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> RuleProperties:
        """One rule of a subscription."""
        return await self._run(management.get_rule(topic_name, subscription_name, rule_name))

    async def update_rule(self, topic_name: str, subscription_name: str, rule: RuleProperties) -> None:
        """Replace the filter and action of a subscription's rule, as `rb.Namespace.update_rule` does."""
        await self._run(management.update_rule(topic_name, subscription_name, rule))

    async def delete_rule(self, topic_name: str, subscription_name: str, rule_name: str) -> None:
        """Remove a rule from a subscription."""
        await self._run(management.delete_rule(topic_name, subscription_name, rule_name))

    def list_rules(self, topic_name: str, subscription_name: str) -> ItemList[RuleProperties]:
        """A subscription's rules: `async for`, or `await` it for a list."""
        check_entity_name(topic_name, "topic")
        check_subscription_name(subscription_name)
        return ItemList(lambda: self._run(management.list_rules(topic_name, subscription_name)))

    # ------------------------------------------------------------------ operator actions

    async def purge(self, entity: str, *, sub_queue: Any = None) -> int:
        """Remove every message of a queue or subscription (or of its dead-letter queue), as
        `rb.Namespace.purge` does; how many it removed."""
        removed = 0
        async for count in self.purge_batches(entity, sub_queue=sub_queue):
            removed += count
        return removed

    async def purge_batches(self, entity: str, *, sub_queue: Any = None) -> AsyncIterator[int]:
        """`purge` one batch at a time: yields how many messages each batch removed."""
        subq = operating.sub_queue_number(sub_queue)
        name = (await self._run(operating.holder(entity)))["name"]
        while True:
            reply = await self._run(operating.purge_batch(name, subq))
            yield reply.removed
            if not reply.more:
                return

    async def delete_messages(self, entity: str, max_message_count: int, *, before: datetime | None = None,
                              sub_queue: Any = None) -> int:
        """Remove about `max_message_count` of the oldest messages of a queue or subscription (or
        of its dead-letter queue), shared out over its partitions, only those enqueued before
        `before` when given: one batch of `purge` (Service Bus's batch delete, which clients repeat
        until it removes none); how many it removed."""
        if isinstance(max_message_count, bool) or not isinstance(max_message_count, int) or \
                not 0 < max_message_count <= MAX_DELETE_BATCH:
            raise InvalidArgumentError(f"max_message_count must be an int from 1 to {MAX_DELETE_BATCH}, "
                                       f"got {max_message_count!r}")
        subq = operating.sub_queue_number(sub_queue)
        name = (await self._run(operating.holder(entity)))["name"]
        cutoff = None if before is None else before.timestamp()
        reply = await self._run(_delete_batch(name, subq, max_message_count, cutoff))
        return reply.removed

    async def resubmit_dead_letters(self, entity: str, *, sequence_numbers: Iterable[int] | None = None,
                                    filter: Any = None, to: str | None = None) -> int:
        """Move dead letters back to their entity or to `to` (all, those with `sequence_numbers`,
        those `filter` selects), as `rb.Namespace.resubmit_dead_letters` does; how many moved."""
        moved = 0
        async for count in self.resubmit_batches(entity, sequence_numbers=sequence_numbers, filter=filter, to=to):
            moved += count
        return moved

    async def resubmit_batches(self, entity: str, *, sequence_numbers: Iterable[int] | None = None,
                               filter: Any = None, to: str | None = None) -> AsyncIterator[int]:
        """`resubmit_dead_letters` one batch at a time: yields how many each batch moved (bad
        arguments raise at the first step, before anything moves)."""
        picking = operating.Picking(sequence_numbers, filter)
        definition = await self._run(operating.holder(entity))
        target = await self._run(operating.destination(to, definition))
        receiver = self.get_queue_receiver(definition["name"], sub_queue=SubQueue.DEAD_LETTER)
        sender = (self.get_queue_sender if target.kind == "queue" else self.get_topic_sender)(target.name)
        try:
            while picking.more:
                batch = await receiver.receive_messages(operating.RESUBMIT_BATCH,
                                                        max_wait_time=operating.RESUBMIT_WAIT_S)
                moving = picking.take(batch)
                if moving is None:
                    return
                if moving:
                    await sender.send_messages([operating.resubmitted(m, target) for m in moving])
                    for message in moving:
                        await receiver.complete_message(message)
                    yield len(moving)
        finally:
            for message in picking.passed.values():
                try:
                    await receiver.abandon_message(message)
                except MessageLockLostError:
                    pass  # its lock lapsed: it is back in the dead-letter queue already
            try:
                await receiver.flush()
            except MessageLockLostError:
                pass
            await receiver.close()
            await sender.close()

    async def peek_messages(self, entity: str, max_message_count: int = 10, *, sequence_number: int = 0,
                            sub_queue: Any = None, session_id: str | None = None, filter: Any = None,
                            partition: int | None = None) -> list[ReceivedMessage]:
        """Browse messages of a queue or subscription without locking them (from a sequence number,
        of one partition, of one session without taking its lock, selected by a filter), as
        `rb.Namespace.peek_messages` does."""
        return await self._run(operating.peek(entity, max_message_count, sequence_number=sequence_number,
                                      sub_queue=sub_queue, session_id=session_id, filter=filter,
                                      partition=partition, partition_count=self.partition_count))

    # ------------------------------------------------------------------ sessions

    async def list_queue_sessions(self, queue_name: str, *, state_updated_after: datetime | None = None) -> list[str]:
        """The ids of a session-enabled queue's sessions with active messages or a stored state, in
        id order; given `state_updated_after`, those whose state was set after that time instead."""
        return await self._run(management.list_queue_sessions(queue_name, state_updated_after))

    async def list_subscription_sessions(self, topic_name: str, subscription_name: str, *,
                                         state_updated_after: datetime | None = None) -> list[str]:
        """The ids of a session-enabled subscription's sessions with active messages or a stored
        state, in id order; given `state_updated_after`, those whose state was set after that time instead."""
        return await self._run(management.list_subscription_sessions(topic_name, subscription_name,
                                                                     state_updated_after))

    # ------------------------------------------------------------------ shared access keys

    async def list_shared_access_keys(self) -> list[SasKey]:
        """The namespace's shared access keys, as `rb.Namespace.list_shared_access_keys` gives them."""
        return await self._run(management.shared_access_keys())

    async def add_shared_access_key(self, name: str, rights: Iterable[str] | str) -> SasKey:
        """Make a shared access key, as `rb.Namespace.add_shared_access_key` does."""
        return await self._run(management.add_shared_access_key(name, rights))

    async def remove_shared_access_key(self, name: str) -> None:
        """Remove a shared access key, as `rb.Namespace.remove_shared_access_key` does."""
        await self._run(management.remove_shared_access_key(name))
