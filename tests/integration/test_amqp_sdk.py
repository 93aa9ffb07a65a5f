"""The official azure-servicebus SDK (sync and async), unmodified, against a namespace's AMQP 1.0
front end: connection string, claims-based auth, sends (single and batched), peek-lock receives and
every outcome, receive-and-delete, sessions, the `$management` operations, and the errors the SDK
maps.

All tests share one namespace that serves AMQP on a free port."""
from __future__ import annotations

import functools
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from azure.servicebus._common import mgmt_handlers
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

import ray_broker as rb
from ray_broker.amqp.connection_string import connection_string
from ray_broker.keys.sas import ROOT_KEY_NAME, make_token

WAIT_S = 5
SETTLED_WITHIN_S = 5.0
"""Time a settlement the front end answered has to reach the partition on a loaded machine."""


@pytest.fixture
def queue(amqp_namespace: rb.Namespace) -> Iterator[str]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(name, max_delivery_count=5)
    yield name
    amqp_namespace.delete_queue(name)


def assert_emptied(ns: rb.Namespace, queue: str) -> None:
    """The queue holds nothing once the SDK's last settlements reach its partitions (the front end
    answers a settlement once its receiver holds it; it reaches the partition within 50 ms)."""
    deadline = time.monotonic() + SETTLED_WITHIN_S
    while (left := ns.get_queue_runtime_properties(queue).total_message_count) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == 0, f"{left} message(s) still in {queue} {SETTLED_WITHIN_S} s after their settlement"


def receive(receiver, count: int) -> list:  # type: ignore[no-untyped-def]
    """Exactly `count` messages, in as many receive calls as it takes."""
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got.extend(receiver.receive_messages(max_message_count=count - len(got), max_wait_time=WAIT_S))
    assert len(got) == count, f"only {len(got)} of {count} messages arrived"
    return got


def test_send_one_and_a_batch_then_receive_every_field_and_complete(
        amqp_namespace: rb.Namespace, conn_str: str, queue: str) -> None:
    ttl = timedelta(minutes=7)
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(
                "first", message_id="m-1", correlation_id="c-1", content_type="text/plain", subject="greeting",
                to="someone", reply_to="back", partition_key="key-1", time_to_live=ttl,
                application_properties={"n": 7, "s": "text", "f": 1.5, "b": True}))
            batch = sender.create_message_batch()
            for i in range(5):
                batch.add_message(ServiceBusMessage(f"batched {i}", message_id=f"b-{i}"))
            sender.send_messages(batch)
            sender.send_messages([ServiceBusMessage(f"listed {i}") for i in range(3)])
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            messages = receive(receiver, 9)
            first = next(m for m in messages if m.message_id == "m-1")
            assert str(first) == "first"
            assert (first.correlation_id, first.content_type, first.subject, first.to, first.reply_to) == \
                ("c-1", "text/plain", "greeting", "someone", "back")
            assert first.partition_key == "key-1"
            assert first.time_to_live == ttl
            assert first.application_properties == {b"n": 7, b"s": b"text", b"f": 1.5, b"b": True}
            assert first.delivery_count == 0
            assert first.sequence_number >= 1 and first.enqueued_time_utc is not None
            assert first.locked_until_utc > datetime.now(timezone.utc)
            assert first.lock_token is not None
            assert sorted(str(m) for m in messages if m.message_id and m.message_id.startswith("b-")) == \
                [f"batched {i}" for i in range(5)]
            for message in messages:
                receiver.complete_message(message)
    assert amqp_namespace.get_queue_runtime_properties(queue).active_message_count == 0


def test_abandon_raises_the_delivery_count(conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("again"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            [message] = receive(receiver, 1)
            receiver.abandon_message(message)
            [again] = receive(receiver, 1)
            assert (again.sequence_number, again.delivery_count) == (message.sequence_number, 1)
            receiver.complete_message(again)


def test_dead_letter_lands_on_the_dead_letter_queue_with_its_reason(conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("poison"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            [message] = receive(receiver, 1)
            receiver.dead_letter_message(message, reason="bad-format", error_description="not json")
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=WAIT_S) as dead_letters:
            [dead] = receive(dead_letters, 1)
            assert (str(dead), dead.dead_letter_reason, dead.dead_letter_error_description) == \
                ("poison", "bad-format", "not json")
            dead_letters.complete_message(dead)


def test_defer_then_receive_deferred_and_complete_it(amqp_namespace: rb.Namespace, conn_str: str,
                                                      queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("later"))
        with client.get_queue_receiver(queue, max_wait_time=1) as receiver:
            [message] = receive(receiver, 1)
            receiver.defer_message(message)
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
            [deferred] = receiver.receive_deferred_messages([message.sequence_number])
            assert (str(deferred), deferred.sequence_number) == ("later", message.sequence_number)
            receiver.complete_message(deferred)
    assert_emptied(amqp_namespace, queue)


def test_receive_and_delete_takes_messages_without_locks(amqp_namespace: rb.Namespace, conn_str: str,
                                                          queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"gone {i}") for i in range(3)])
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       max_wait_time=WAIT_S) as receiver:
            messages = receive(receiver, 3)
            assert sorted(str(m) for m in messages) == ["gone 0", "gone 1", "gone 2"]
            assert [m.message.delivery_tag for m in messages] == [None] * 3, "an empty tag, as Service Bus sends"
    assert_emptied(amqp_namespace, queue)


def test_peek_schedule_cancel_and_renew_through_management(amqp_namespace: rb.Namespace, conn_str: str,
                                                           queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            [scheduled] = sender.schedule_messages(ServiceBusMessage("in an hour"),
                                                   datetime.now(timezone.utc) + timedelta(hours=1))
            sender.send_messages(ServiceBusMessage("now"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            peeked = receiver.peek_messages(max_message_count=5)
            assert [str(m) for m in peeked] == ["in an hour", "now"]
            assert peeked[0].sequence_number == scheduled and peeked[0].scheduled_enqueue_time_utc is not None
            [message] = receive(receiver, 1)
            before = message.locked_until_utc
            time.sleep(0.05)
            assert receiver.renew_message_lock(message) > before
            receiver.complete_message(message)
        with client.get_queue_sender(queue) as sender:
            sender.cancel_scheduled_messages(scheduled)
    assert_emptied(amqp_namespace, queue)


def test_topic_subscription_receive(amqp_namespace: rb.Namespace, conn_str: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_topic(topic)
    amqp_namespace.create_subscription(topic, "audit")
    try:
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_topic_sender(topic) as sender:
                sender.send_messages(ServiceBusMessage("event"))
            with client.get_subscription_receiver(topic, "audit", max_wait_time=WAIT_S) as receiver:
                [message] = receive(receiver, 1)
                assert str(message) == "event"
                receiver.complete_message(message)
    finally:
        amqp_namespace.delete_topic(topic)


def test_value_and_sequence_bodies_round_trip(conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(AmqpAnnotatedMessage(value_body={"k": [1, 2]}))
            sender.send_messages(AmqpAnnotatedMessage(sequence_body=[[1, "two"]]))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            messages = sorted(receive(receiver, 2), key=lambda m: m.sequence_number)
            assert messages[0].body_type == AmqpMessageBodyType.VALUE
            assert messages[0].body == {b"k": [1, 2]}
            assert messages[1].body_type == AmqpMessageBodyType.SEQUENCE
            assert list(messages[1].body) == [[1, b"two"]]
            for message in messages:
                receiver.complete_message(message)


def test_a_token_for_an_unknown_entity_is_refused_as_service_bus_refuses_it(amqp_namespace: rb.Namespace,
                                                                          conn_str: str) -> None:
    topic, port = f"t-{uuid.uuid4().hex[:10]}", amqp_namespace.config.amqp_port
    key = amqp_namespace.list_shared_access_keys()[0]
    amqp_namespace.create_topic(topic)
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with pytest.raises(ServiceBusAuthenticationError):  # put-token answered 404, as Service Bus does
                with client.get_queue_sender("no-such-queue") as sender:
                    sender.send_messages(ServiceBusMessage("lost"))
            with pytest.raises(ServiceBusAuthenticationError):
                with client.get_subscription_receiver(topic, "no-such-subscription") as receiver:
                    receiver.receive_messages(max_wait_time=1)
            with pytest.raises(MessagingEntityNotFoundError):  # a token for the namespace: the attach refuses
                token = make_token(f"sb://localhost:{port}", key.name, key.key, int(time.time()) + 300)
                with ServiceBusClient.from_connection_string(
                        f"Endpoint=sb://localhost:{port};SharedAccessSignature={token};UseDevelopmentEmulator=true",
                        retry_total=0) as namespace_wide, namespace_wide.get_queue_sender("no-such-queue") as sender:
                    sender.send_messages(ServiceBusMessage("lost"))
        wrong = conn_str.replace(key.key, "A" * len(key.key))
        with ServiceBusClient.from_connection_string(wrong, retry_total=0) as client:
            with pytest.raises(ServiceBusAuthenticationError):
                with client.get_queue_sender("no-such-queue") as sender:
                    sender.send_messages(ServiceBusMessage("lost"))
    finally:
        amqp_namespace.delete_topic(topic)


def test_a_wrong_key_or_expired_token_is_refused(amqp_namespace: rb.Namespace, conn_str: str, queue: str) -> None:
    key = amqp_namespace.list_shared_access_keys()[0]
    wrong = conn_str.replace(key.key, "A" * len(key.key))
    with ServiceBusClient.from_connection_string(wrong, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("refused"))
    port = amqp_namespace.config.amqp_port
    expired = make_token(f"sb://localhost:{port}/{queue}", key.name, key.key, int(time.time()) - 60)
    with ServiceBusClient.from_connection_string(
            f"Endpoint=sb://localhost:{port};SharedAccessSignature={expired};UseDevelopmentEmulator=true",
            retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("refused"))
    assert_emptied(amqp_namespace, queue)


def test_garbage_bytes_or_a_client_gone_mid_frame_close_that_connection_only(amqp_namespace: rb.Namespace, conn_str: str, queue: str) -> None:
    with socket.create_connection(("127.0.0.1", amqp_namespace.config.amqp_port), timeout=5) as garbage:
        garbage.sendall(b"NOT AMQP\r\n" + bytes(range(256)))  # no HTTP method, no TLS: the AMQP engine's
        received = b""
        while chunk := garbage.recv(4096):
            received += chunk
        assert received.startswith(b"AMQP")  # the protocol header proton answers with, then it closes
    with socket.create_connection(("127.0.0.1", amqp_namespace.config.amqp_port), timeout=5) as vanishing:
        vanishing.sendall(b"AMQP\x03\x01\x00\x00\x00\x00\x00\x40")  # a SASL frame cut short, then gone
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("still served"))
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       max_wait_time=WAIT_S) as receiver:
            assert [str(m) for m in receive(receiver, 1)] == ["still served"]


async def test_the_async_sdk_sends_receives_and_settles(amqp_namespace: rb.Namespace, conn_str: str,
                                                        queue: str) -> None:
    async with AsyncServiceBusClient.from_connection_string(conn_str) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"async {i}") for i in range(3)])
        async with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            got: list = []
            while len(got) < 3:
                batch = await receiver.receive_messages(max_message_count=3 - len(got), max_wait_time=WAIT_S)
                assert batch
                got.extend(batch)
            await receiver.abandon_message(got[0])
            for message in got[1:]:
                await receiver.complete_message(message)
            [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            assert again.delivery_count == 1
            await receiver.complete_message(again)
    assert_emptied(amqp_namespace, queue)


def test_a_topic_is_no_receive_source_and_an_oversized_message_is_refused(
        amqp_namespace: rb.Namespace, conn_str: str, queue: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_topic(topic)
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with pytest.raises(ServiceBusError, match="is a topic"):
                with client.get_queue_receiver(topic, max_wait_time=1) as receiver:
                    receiver.receive_messages(max_wait_time=1)
            with client.get_queue_sender(queue) as sender:
                with pytest.raises(MessageSizeExceededError):
                    sender.send_messages(ServiceBusMessage(b"x" * (300 * 1024)))
    finally:
        amqp_namespace.delete_topic(topic)
    assert_emptied(amqp_namespace, queue)


def test_the_cli_prints_the_connection_string_and_keeps_the_port(amqp_namespace: rb.Namespace, conn_str: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    from ray_broker.cli import main

    target = ["-n", amqp_namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]
    assert main(["connection-string", *target]) == 0
    assert capsys.readouterr().out.strip() == conn_str
    port = amqp_namespace.config.amqp_port
    assert main(["start", *target, "--durability", "memory", "--amqp-port", str(port)]) == 0
    assert "already running" in capsys.readouterr().out
    assert main(["start", *target, "--durability", "memory", "--amqp"]) == 1
    assert f"--amqp-port 5672 (it runs with {port})" in capsys.readouterr().err


def test_session_receivers_lock_a_session_keep_its_state_and_renew_it(amqp_namespace: rb.Namespace,
                                                                      conn_str: str) -> None:
    queue = f"s-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(queue, requires_session=True)
    try:
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_queue_sender(queue) as sender:
                sender.send_messages([ServiceBusMessage(f"{s}-{i}", session_id=s) for s in ("a", "b")
                                      for i in range(3)])
            with client.get_queue_receiver(queue, session_id="b", max_wait_time=WAIT_S) as receiver:
                assert receiver.session.session_id == "b"
                assert receiver.session.locked_until_utc > datetime.now(timezone.utc)
                messages = receive(receiver, 3)
                assert [str(m) for m in messages] == ["b-0", "b-1", "b-2"]
                assert {m.session_id for m in messages} == {"b"}
                for message in messages:
                    receiver.complete_message(message)
                receiver.session.set_state(b"step 2")
                assert receiver.session.get_state() == b"step 2"
                assert receiver.session.renew_lock() > datetime.now(timezone.utc)
            with client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION,
                                           max_wait_time=WAIT_S) as receiver:
                assert receiver.session.session_id == "a"
                for message in receive(receiver, 3):
                    receiver.complete_message(message)
        assert_emptied(amqp_namespace, queue)
    finally:
        amqp_namespace.delete_queue(queue)


def test_a_port_in_use_fails_the_start_and_leaves_nothing_running(amqp_namespace: rb.Namespace) -> None:
    name = f"amqp-busy-{uuid.uuid4().hex[:6]}"
    with pytest.raises(rb.errors.InvalidOperationError, match="cannot be listened on") as refused:
        rb.start(name, sku="premium", partitions=1, durability="memory", amqp_port=amqp_namespace.config.amqp_port)
    assert "Address already in use" in str(refused.value) and "\n" not in str(refused.value), \
        "the socket's error in one line, without Ray's report of the actor call"
    with pytest.raises(rb.errors.NamespaceNotRunningError):
        rb.connect(name)


async def test_a_released_message_comes_back_without_counting_a_delivery(amqp_namespace: rb.Namespace,
                                                                         queue: str) -> None:
    import ray_broker.aio as rba

    async with rba.Namespace(amqp_namespace.config) as ns:
        async with ns.get_queue_sender(queue) as sender:
            await sender.send_messages(rb.Message("prefetched"))
        async with ns.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            [message] = await receiver.receive_messages(1)
            await receiver.release_message(message)
            [again] = await receiver.receive_messages(1)
            assert (again.sequence_number, again.delivery_count) == (message.sequence_number, message.delivery_count)
            await receiver.complete_message(again)


def test_the_sdk_lists_the_sessions_with_messages_or_state(amqp_namespace: rb.Namespace, conn_str: str) -> None:
    queue = f"s-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(queue, requires_session=True)
    topic = f"t-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_topic(topic)
    amqp_namespace.create_subscription(topic, "sessions", requires_session=True)
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            assert list(client.list_queue_sessions(queue)) == []
            with client.get_queue_sender(queue) as sender:
                sender.send_messages([ServiceBusMessage(s, session_id=s) for s in ("b", "a", "c")])
            with client.get_queue_receiver(queue, session_id="c", max_wait_time=WAIT_S) as receiver:
                receiver.complete_message(receive(receiver, 1)[0])
                receiver.session.set_state(b"kept")
            with client.get_queue_receiver(queue, session_id="b", max_wait_time=WAIT_S) as receiver:
                receiver.complete_message(receive(receiver, 1)[0])
            assert sorted(client.list_queue_sessions(queue)) == ["a", "c"]  # "b": no message, no state
            with client.get_topic_sender(topic) as sender:
                sender.send_messages(ServiceBusMessage("x", session_id="s-1"))
            assert list(client.list_subscription_sessions(topic, "sessions")) == ["s-1"]
        assert amqp_namespace.list_queue_sessions(queue) == ["a", "c"]
    finally:
        amqp_namespace.delete_queue(queue)
        amqp_namespace.delete_topic(topic)


def management_call(receiver, operation: str, body: dict):  # type: ignore[no-untyped-def]
    """A `$management` request through the SDK's own request/response path (the Python SDK has no
    rule manager; the other SDKs send these operations as here)."""
    return receiver._mgmt_request_response_with_retry(  # noqa: SLF001
        f"com.microsoft:{operation}".encode(), body,
        functools.partial(mgmt_handlers.default, amqp_transport=receiver._amqp_transport))  # noqa: SLF001


def test_rules_are_added_enumerated_and_removed_through_management(amqp_namespace: rb.Namespace,
                                                                   conn_str: str) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_topic(topic)
    amqp_namespace.create_subscription(topic, "red")
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with client.get_subscription_receiver(topic, "red", max_wait_time=WAIT_S) as receiver:
                management_call(receiver, "remove-rule", {"rule-name": "$Default"})
                management_call(receiver, "add-rule", {"rule-name": "red", "rule-description": {
                    "sql-filter": {"expression": "Color = 'Red'"},
                    "sql-rule-action": {"expression": "SET Seen = 'yes'"}}})
                management_call(receiver, "add-rule", {"rule-name": "important", "rule-description": {
                    "correlation-filter": {"correlation-id": "important"}}})
                listed = management_call(receiver, "enumerate-rules", {"top": 10, "skip": 0})
                with pytest.raises(ServiceBusError, match="cannot parse the SQL filter"):
                    management_call(receiver, "add-rule", {"rule-name": "bad", "rule-description": {
                        "sql-filter": {"expression": "Color ="}}})
            with client.get_topic_sender(topic) as sender:
                sender.send_messages([ServiceBusMessage(c, application_properties={"Color": c}) for c in
                                      ("Red", "Blue")] + [ServiceBusMessage("vip", correlation_id="important")])
            with client.get_subscription_receiver(topic, "red", max_wait_time=WAIT_S) as receiver:
                got = receive(receiver, 2)
                assert sorted(str(m) for m in got) == ["Red", "vip"]
                assert next(m for m in got if str(m) == "Red").application_properties[b"Seen"] == b"yes"
                for message in got:
                    receiver.complete_message(message)
        names = sorted(r.name for r in amqp_namespace.list_rules(topic, "red"))
        assert names == ["important", "red"]
        assert len(listed[b"rules"]) == 2
    finally:
        amqp_namespace.delete_topic(topic)


def test_named_keys_grant_their_rights_only(amqp_namespace: rb.Namespace, queue: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    from ray_broker.cli import main

    port = amqp_namespace.config.amqp_port
    assert port is not None
    target = ["-n", amqp_namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]
    name = f"sender-{uuid.uuid4().hex[:6]}"
    assert main(["keys", "add", *target, name, "--rights", "send"]) == 0
    assert f"key {name!r} added (Send)" in capsys.readouterr().out
    assert main(["keys", "list", *target]) == 0
    assert name in capsys.readouterr().out
    assert main(["connection-string", *target, "--key", name]) == 0
    sender_conn = capsys.readouterr().out.strip()
    assert f"SharedAccessKeyName={name};" in sender_conn
    reader = amqp_namespace.add_shared_access_key(f"reader-{uuid.uuid4().hex[:6]}", ["listen"])
    reader_conn = connection_string("localhost", port, reader)
    with ServiceBusClient.from_connection_string(sender_conn, retry_total=0) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("sent with Send"))
        with pytest.raises(ServiceBusAuthorizationError):
            with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
                receiver.receive_messages(max_wait_time=WAIT_S)
    with ServiceBusClient.from_connection_string(reader_conn, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthorizationError):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("refused"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            [message] = receive(receiver, 1)
            assert str(message) == "sent with Send"
            receiver.complete_message(message)
    assert main(["keys", "remove", *target, name]) == 0
    assert main(["keys", "remove", *target, name]) == 1
    assert f"no key named {name!r}" in capsys.readouterr().err
    with ServiceBusClient.from_connection_string(sender_conn, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("its key is gone"))
    amqp_namespace.remove_shared_access_key(reader.name)
    assert main(["keys", "add", *target, "x", "--rights", "admin"]) == 1
    assert "rights among Manage, Send, Listen" in capsys.readouterr().err
    assert [k.name for k in amqp_namespace.list_shared_access_keys()] == [ROOT_KEY_NAME]


def test_a_front_end_whose_process_dies_is_restarted_and_listens_again(amqp_namespace: rb.Namespace, conn_str: str,
                                                                       queue: str) -> None:
    import os
    import signal

    import ray

    frontend = ray.get_actor(amqp_namespace.config.amqp_frontend_name(0), namespace="ray_broker")
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("sent before the crash"))
    os.kill(ray.get(frontend.pid.remote(), timeout=30), signal.SIGKILL)
    deadline, got, failures = time.monotonic() + 60, [], []
    while not got and time.monotonic() < deadline:
        try:
            with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
                with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
                    got = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
                    for message in got:
                        receiver.complete_message(message)
        except ServiceBusError as exc:
            failures.append(type(exc).__name__)
            time.sleep(0.5)
    assert [str(m) for m in got] == ["sent before the crash"], failures
    assert_emptied(amqp_namespace, queue)


def test_ids_keep_their_amqp_type_through_receive_peek_deferral_and_scheduling(amqp_namespace: rb.Namespace,
                                                                              conn_str: str) -> None:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(queue, requires_duplicate_detection=True)
    ids = [uuid.uuid4(), 42, b"binary-id", "text-id"]
    try:
        with ServiceBusClient.from_connection_string(conn_str) as client:
            with client.get_queue_sender(queue) as sender:
                for i in ids:
                    sender.send_messages(ServiceBusMessage(repr(i), message_id=i, correlation_id=i))
                sender.send_messages(ServiceBusMessage("again", message_id=ids[0]))  # a duplicate by its uuid
                [scheduled] = sender.schedule_messages(ServiceBusMessage("later", message_id=uuid.UUID(int=9)),
                                                       datetime.now(timezone.utc) + timedelta(hours=1))
            expected = [i.decode() if isinstance(i, bytes) else i for i in ids]  # the SDK decodes binary ids
            with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
                peeked = receiver.peek_messages(max_message_count=10)
                assert [m.message_id for m in peeked] == expected + [uuid.UUID(int=9)]
                assert [m.correlation_id for m in peeked[:4]] == expected
                assert peeked[-1].sequence_number == scheduled
                got = sorted(receive(receiver, 4), key=lambda m: m.sequence_number)
                assert [m.message_id for m in got] == [m.correlation_id for m in got] == expected
                assert [type(m.raw_amqp_message.properties.message_id) for m in got] == [uuid.UUID, int, bytes, bytes]
                receiver.defer_message(got[0])
                for message in got[1:]:
                    receiver.complete_message(message)
                [deferred] = receiver.receive_deferred_messages([got[0].sequence_number])
                assert deferred.message_id == ids[0]
                receiver.complete_message(deferred)
            with client.get_queue_sender(queue) as sender:
                sender.cancel_scheduled_messages(scheduled)
        assert_emptied(amqp_namespace, queue)
    finally:
        amqp_namespace.delete_queue(queue)


def test_delivery_annotations_data_sections_and_no_body_as_service_bus_sends_them(conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(AmqpAnnotatedMessage(data_body=[b"aa", b"bb", b"cc"]))
            sender.send_messages(ServiceBusMessage(None))
            sender.send_messages(ServiceBusMessage("deleted"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            sections, empty = receive(receiver, 2)
            assert list(sections.body) == [b"aa", b"bb", b"cc"]
            assert empty.body is None
            for message in (sections, empty):
                assert message.raw_amqp_message.delivery_annotations[b"x-opt-lock-token"] == message.lock_token
                receiver.complete_message(message)
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       max_wait_time=WAIT_S) as receiver:
            [deleted] = receive(receiver, 1)
            assert str(deleted) == "deleted" and deleted.raw_amqp_message.delivery_annotations == {}


def test_management_requests_from_many_threads_at_once_share_one_connection(conn_str: str, queue: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from azure.servicebus import AutoLockRenewer

    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(10)])
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            with ThreadPoolExecutor(10) as pool:  # the SDK's threads put their transfers out of delivery-id order
                peeks = list(pool.map(lambda _: receiver.peek_messages(max_message_count=10, sequence_number=1),
                                      range(10)))
            assert [len(p) for p in peeks] == [10] * 10
            messages = receive(receiver, 10)
            with ThreadPoolExecutor(10) as pool:
                renewed = list(pool.map(receiver.renew_message_lock, messages))
            assert all(r > datetime.now(timezone.utc) for r in renewed)
            renewer = AutoLockRenewer(max_workers=10)
            for message in messages:
                renewer.register(receiver, message, max_lock_renewal_duration=30)
            time.sleep(1)
            renewer.close()
            for message in messages:
                receiver.complete_message(message)


async def test_the_async_sdk_gathers_management_requests_on_one_connection(conn_str: str, queue: str) -> None:
    import asyncio

    async with AsyncServiceBusClient.from_connection_string(conn_str) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        async with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            peeks = await asyncio.gather(*(receiver.peek_messages(max_message_count=3, sequence_number=1)
                                           for _ in range(10)))
            assert [len(p) for p in peeks] == [3] * 10
            got: list = []
            while len(got) < 3:
                got.extend(await receiver.receive_messages(max_message_count=3 - len(got), max_wait_time=WAIT_S))
            await asyncio.gather(*(receiver.renew_message_lock(m) for m in got))
            for message in got:
                await receiver.complete_message(message)


def test_a_lock_token_settles_on_any_receiver_of_the_entity(amqp_namespace: rb.Namespace, conn_str: str,
                                                            queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(4)])
        first, second = (client.get_queue_receiver(queue, max_wait_time=WAIT_S) for _ in range(2))
        with first, second:
            got = receive(first, 3)
            started = time.monotonic()
            second.complete_message(got[0])  # through the second receiver's link, then its $management
            assert time.monotonic() - started < 90
            second._settle_message_via_mgmt_link("abandoned", [got[1].lock_token])  # noqa: SLF001
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as third:
            # the first receiver's link is gone: its lock still settles by its token
            third._settle_message_via_mgmt_link("completed", [got[2].lock_token])  # noqa: SLF001
            again = receive(third, 2)
            assert sorted(str(m) for m in again) == sorted(["m3", str(got[1])])
            for message in again:
                third.complete_message(message)
    assert_emptied(amqp_namespace, queue)


def test_session_receivers_peek_their_session_and_receive_its_deferred_messages(amqp_namespace: rb.Namespace,
                                                                                conn_str: str) -> None:
    queue = f"s-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(queue, requires_session=True)
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with client.get_queue_sender(queue) as sender:
                sender.send_messages([ServiceBusMessage(f"{s}-{i}", session_id=s) for s in ("a", "b") for i in range(2)])
            with pytest.raises(ServiceBusError, match="requires sessions to create a non-sessionful"):
                with client.get_queue_receiver(queue, max_wait_time=1) as receiver:
                    receiver.receive_messages(max_wait_time=1)
            with client.get_queue_receiver(queue, session_id="b", max_wait_time=WAIT_S) as receiver:
                assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["b-0", "b-1"]
                first, second = receive(receiver, 2)
                receiver.defer_message(first)
                receiver.complete_message(second)
                [deferred] = receiver.receive_deferred_messages([first.sequence_number])
                assert (str(deferred), deferred.session_id) == ("b-0", "b")
                receiver.complete_message(deferred)
            with client.get_queue_receiver(queue, session_id="a", max_wait_time=WAIT_S) as receiver:
                for message in receive(receiver, 2):
                    receiver.complete_message(message)
        assert_emptied(amqp_namespace, queue)
    finally:
        amqp_namespace.delete_queue(queue)


def test_decimal_properties_reach_a_python_client_as_decimals(amqp_namespace: rb.Namespace, conn_str: str,
                                                              queue: str) -> None:
    from decimal import Decimal

    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("priced", application_properties={"price": Decimal("12.50")}))
    with amqp_namespace.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
        [message] = receiver.receive_messages(1)
        assert message.application_properties == {"price": Decimal("12.50")}
        receiver.complete_message(message)


def test_the_python_client_gives_every_message_sent_without_an_id_one(amqp_namespace: rb.Namespace, conn_str: str,
                                                                      queue: str) -> None:
    with amqp_namespace.get_queue_sender(queue) as sender:
        sender.send_messages([rb.Message("a"), rb.Message("b")])
        [scheduled] = sender.schedule_messages(rb.Message("later"), datetime.now(timezone.utc) + timedelta(hours=1))
    with amqp_namespace.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
        peeked = receiver.peek_messages(3)
    ids = [m.message_id for m in peeked]
    assert len(set(ids)) == 3 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            assert [m.message_id for m in receiver.peek_messages(max_message_count=3)] == ids
            for message in receive(receiver, 2):
                receiver.complete_message(message)
    with amqp_namespace.get_queue_sender(queue) as sender:
        sender.cancel_scheduled_messages(scheduled)


def test_a_receive_and_delete_receiver_takes_deferred_messages_for_good(amqp_namespace: rb.Namespace,
                                                                         conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"d{i}") for i in range(2)])
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            seqs = []
            for message in receive(receiver, 2):
                seqs.append(message.sequence_number)
                receiver.defer_message(message)
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                       max_wait_time=WAIT_S) as receiver:
            deferred = receiver.receive_deferred_messages(seqs)
            assert sorted(str(m) for m in deferred) == ["d0", "d1"] and {m.lock_token for m in deferred} == {None}
            with pytest.raises(ServiceBusError):
                receiver.receive_deferred_messages(seqs)
    assert_emptied(amqp_namespace, queue)


def test_batch_delete_removes_the_oldest_messages_enqueued_before_its_cutoff(amqp_namespace: rb.Namespace,
                                                                          conn_str: str, queue: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"old-{i}") for i in range(3)])
            time.sleep(0.3)
            cutoff = datetime.now(timezone.utc)
            time.sleep(0.3)
            sender.send_messages(ServiceBusMessage("new"))
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            first = management_call(receiver, "batch-delete-messages",
                                    {"message-count": 2, "enqueued-time-utc": cutoff})
            rest = [management_call(receiver, "batch-delete-messages", {"message-count": 4000,
                                                                         "enqueued-time-utc": cutoff})
                    for _ in range(2)]
            assert (first[b"message-count"], *(r[b"message-count"] for r in rest)) == (2, 1, 0)
            assert [str(m) for m in receiver.peek_messages(10)] == ["new"]
            with pytest.raises(ServiceBusError, match="from 1 to 4000"):
                management_call(receiver, "batch-delete-messages", {"message-count": 4001})
            assert management_call(receiver, "batch-delete-messages", {"message-count": 10})[b"message-count"] == 1
        with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("dead"))
            [message] = receive(receiver, 1)
            receiver.dead_letter_message(message, reason="r")
        deadline = time.monotonic() + SETTLED_WITHIN_S
        while amqp_namespace.get_queue_runtime_properties(queue).dead_letter_message_count == 0 and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=WAIT_S) as dead_letters:
            assert management_call(dead_letters, "batch-delete-messages", {"message-count": 5})[b"message-count"] == 1
    assert amqp_namespace.get_queue_runtime_properties(queue).total_message_count == 0


def test_the_empty_session_id_is_a_session_of_its_own(amqp_namespace: rb.Namespace, conn_str: str) -> None:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    amqp_namespace.create_queue(queue, requires_session=True)
    try:
        with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
            with client.get_queue_sender(queue) as sender:
                for session_id, body in (("", "empty-1"), ("s1", "other"), ("", "empty-2")):
                    message = ServiceBusMessage(body, session_id=session_id)
                    message.partition_key = session_id
                    sender.send_messages(message)
            with client.get_queue_receiver(queue, session_id="", max_wait_time=WAIT_S) as receiver:
                got = receive(receiver, 2)
                assert [str(m) for m in got] == ["empty-1", "empty-2"]
                assert {(m.session_id, m.partition_key) for m in got} == {("", "")}
                assert receiver.session.session_id == ""
                for message in got:
                    receiver.complete_message(message)
            with client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=WAIT_S) as receiver:
                [message] = receive(receiver, 1)
                assert (str(message), receiver.session.session_id) == ("other", "s1")
                receiver.complete_message(message)
            with pytest.raises(ServiceBusError, match="a session by its id, a string"):
                with client.get_queue_receiver(queue, session_id=1, max_wait_time=WAIT_S):  # type: ignore[arg-type]
                    pass
    finally:
        amqp_namespace.delete_queue(queue)
