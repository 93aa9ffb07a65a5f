"""The order service's own tests, on the `servicebus` fixtures of ray-broker's pytest plugin."""
from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from azure.servicebus import ServiceBusClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orders_app import place_order, take_order  # noqa: E402


def test_an_order_placed_is_taken(servicebus_clean) -> None:  # type: ignore[no-untyped-def]
    place_order(servicebus_clean.connection_string, {"id": 1, "item": "tea"})
    place_order(servicebus_clean.connection_string, {"id": 2, "item": "cake"})  # left for the next test to not see
    assert take_order(servicebus_clean.connection_string) == {"id": 1, "item": "tea"}


def test_each_test_starts_with_empty_queues(servicebus_clean) -> None:  # type: ignore[no-untyped-def]
    assert take_order(servicebus_clean.connection_string, wait=1) is None


def test_an_order_scheduled_for_tomorrow_comes_tomorrow(servicebus_clean) -> None:  # type: ignore[no-untyped-def]
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)
    place_order(servicebus_clean.connection_string, {"id": 3, "item": "bread"}, at=tomorrow)
    assert take_order(servicebus_clean.connection_string, wait=1) is None
    servicebus_clean.advance_clock(timedelta(days=1, seconds=1))
    assert take_order(servicebus_clean.connection_string) == {"id": 3, "item": "bread"}


def test_the_administration_client_sees_the_config_files_queue(servicebus) -> None:  # type: ignore[no-untyped-def]
    from azure.servicebus.management import ServiceBusAdministrationClient

    admin = ServiceBusAdministrationClient.from_connection_string(servicebus.admin_connection_string,
                                                                  connection_verify=servicebus.certificate_path)
    queue = admin.get_queue("orders")
    assert queue.max_delivery_count == 3 and queue.lock_duration == timedelta(seconds=30)


def test_a_queue_of_the_tests_own(servicebus, servicebus_queue) -> None:  # type: ignore[no-untyped-def]
    with ServiceBusClient.from_connection_string(servicebus.connection_string) as client:
        with client.get_queue_sender(servicebus_queue) as sender:
            sender.send_messages([])
    assert servicebus.namespace.get_queue_runtime_properties(servicebus_queue).active_message_count == 0
