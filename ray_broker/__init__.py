"""ray_broker: Service Bus partitioned queues and topics as a runtime of Ray actors.

    import ray_broker as rb
    ns = rb.start("demo")
    ns.create_queue("orders", enable_partitioning=True)
    with ns.get_queue_sender("orders") as sender:
        sender.send_messages(rb.Message("hello"))

The message model, errors, entities and partitioning import without Ray; the client names (`start`,
`connect`, `init_ray`, `Namespace`, senders, receivers and the lock renewer) load Ray on first use, so
that the engine and everything it needs can be imported, and tested, where Ray is absent.
"""
from __future__ import annotations

from typing import Any

from . import errors
from .access_rules import AuthorizationRule
from .client.core import MessageBatch
from .entities import (
    PartitionRuntimeProperties,
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    SubscriptionRuntimeProperties,
    TopicProperties,
    TopicRuntimeProperties,
)
from .errors import *  # noqa: F403 - the errors are part of the public namespace
from .filters import CorrelationFilter, FalseFilter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter
from .message import Message, MessageBody, ReceivedMessage, encode_messages
from .partitioning import partition_for_key, partition_key_of, partition_of, sequence_number
from .protocol import NEXT_AVAILABLE_SESSION, MessageState, ReceiveMode, SubQueue

_CLIENT_NAMES = ("start", "connect", "stop", "init_ray", "Namespace", "Sender", "Receiver", "ReceiverSession",
                 "AutoLockRenewer", "Transaction")
"""Public names that need Ray: loaded on first use."""


def __getattr__(name: str) -> Any:
    if name not in _CLIENT_NAMES:
        raise AttributeError(f"module 'ray_broker' has no attribute {name!r}")
    from .client import autolock, namespace, receiver, sender, transaction

    value = getattr(next(m for m in (namespace, sender, receiver, autolock, transaction) if hasattr(m, name)), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CLIENT_NAMES))


__all__ = [
    "start", "connect", "stop", "init_ray", "Namespace", "Sender", "Receiver", "ReceiverSession", "AutoLockRenewer",
    "Transaction", "MessageBatch",
    "Message", "MessageBody", "ReceivedMessage", "encode_messages", "MessageState", "ReceiveMode", "SubQueue",
    "NEXT_AVAILABLE_SESSION",
    "QueueProperties", "QueueRuntimeProperties", "PartitionRuntimeProperties", "TopicProperties",
    "TopicRuntimeProperties", "SubscriptionProperties", "SubscriptionRuntimeProperties", "RuleProperties",
    "SqlFilter", "CorrelationFilter", "TrueFilter", "FalseFilter", "SqlRuleAction", "AuthorizationRule",
    "partition_of", "sequence_number", "partition_key_of", "partition_for_key", "errors",
    *errors.__all__,
]
