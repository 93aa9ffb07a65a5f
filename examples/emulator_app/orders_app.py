"""A small order service written for Service Bus (the Azure SDK and a connection string), as an
application tested against Microsoft's emulator would be: it knows nothing of ray-broker."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage

QUEUE = "orders"


def place_order(connection_string: str, order: dict[str, Any], *, at: datetime | None = None) -> None:
    """Send `order` to the queue (scheduled for `at` when given)."""
    message = ServiceBusMessage(json.dumps(order), message_id=str(order["id"]), content_type="application/json")
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_sender(QUEUE) as sender:
        if at is None:
            sender.send_messages(message)
        else:
            sender.schedule_messages(message, at)


def take_order(connection_string: str, wait: float = 5.0) -> dict[str, Any] | None:
    """The next order, completed; None when none comes within `wait` seconds."""
    with ServiceBusClient.from_connection_string(connection_string) as client, \
            client.get_queue_receiver(QUEUE, max_wait_time=wait) as receiver:
        for message in receiver.receive_messages(max_message_count=1, max_wait_time=wait):
            receiver.complete_message(message)
            return json.loads(str(message))
    return None
