"""ray_broker: Service Bus partitioned queues as a runtime of Ray actors.

    import ray_broker as rb
    ns = rb.start("demo")
    ns.create_queue("orders", enable_partitioning=True)
    with ns.get_queue_sender("orders") as sender:
        sender.send_messages(rb.Message("hello"))
"""
from . import errors
from .client.core import NEXT_AVAILABLE_SESSION, MessageBatch, ReceiveMode, SubQueue
from .client.namespace import Namespace, connect, start, stop
from .client.receiver import Receiver, ReceiverSession
from .client.sender import Sender
from .entities import PartitionRuntimeProperties, QueueProperties, QueueRuntimeProperties
from .errors import *  # noqa: F403 - the errors are part of the public namespace
from .message import Message, MessageState, ReceivedMessage
from .routing import partition_of

__all__ = [
    "start", "connect", "stop", "Namespace", "Sender", "Receiver", "ReceiverSession", "MessageBatch",
    "Message", "ReceivedMessage", "MessageState", "ReceiveMode", "SubQueue", "NEXT_AVAILABLE_SESSION",
    "QueueProperties", "QueueRuntimeProperties", "PartitionRuntimeProperties", "partition_of", "errors",
    *errors.__all__,
]
