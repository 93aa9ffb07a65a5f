"""The official azure-servicebus SDK's administration client (sync and async), unmodified, against
the management API a namespace serves on its AMQP port (ATOM over HTTPS, the namespace's
self-signed certificate trusted through the environment): every kind of entity created, read,
updated, listed and deleted, runtime properties after real sends, rules, the errors the SDK maps,
and the same connection string serving AMQP afterwards.

All tests share one namespace that serves AMQP on a free port."""
from __future__ import annotations

import base64
import json
import re
import time
import uuid
from datetime import timedelta
from typing import Iterator

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusAuthorizationError
from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdministrationClient
from azure.servicebus.management import (
    AccessRights,
    AuthorizationRule,
    CorrelationRuleFilter,
    FalseRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

import ray_broker as rb
from ray_broker.amqp.connection_string import connection_string
from ray_broker.keys.sas import SasKey, make_token
from ray_broker.management_http.certificate import certificate_path

from .helpers import free_port

WAIT_S = 5


@pytest.fixture
def ca_file(amqp_namespace: rb.Namespace, monkeypatch: pytest.MonkeyPatch) -> str:
    """The namespace's certificate, trusted by the sync client (requests reads REQUESTS_CA_BUNDLE)
    for this test only."""
    path = certificate_path(amqp_namespace.config.name, amqp_namespace.config.data_dir)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", path)
    return path


@pytest.fixture
def admin(conn_str: str, ca_file: str) -> Iterator[ServiceBusAdministrationClient]:
    with ServiceBusAdministrationClient.from_connection_string(conn_str) as client:
        yield client


def unique(prefix: str) -> str:
    """A fresh entity name."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sas_connection_string(port: int, audience: str, key: SasKey, expiry: int) -> str:
    """A connection string that carries a ready-made SAS token instead of a key."""
    token = make_token(audience, key.name, key.key, expiry)
    return f"Endpoint=sb://localhost:{port};SharedAccessSignature={token};UseDevelopmentEmulator=true"


def test_namespace_properties(admin: ServiceBusAdministrationClient, amqp_namespace: rb.Namespace) -> None:
    properties = admin.get_namespace_properties()
    assert properties.name == amqp_namespace.config.name
    assert properties.messaging_sku == "Standard"
    assert properties.namespace_type == "Messaging"


def test_queue_create_get_update_list_runtime_and_delete(admin: ServiceBusAdministrationClient, conn_str: str,
                                                         amqp_namespace: rb.Namespace) -> None:
    name, target = unique("q"), unique("fwd")
    admin.create_queue(target)
    created = admin.create_queue(name, lock_duration=timedelta(seconds=30), max_delivery_count=7,
                                 enable_partitioning=True, max_size_in_megabytes=2048,
                                 default_message_time_to_live=timedelta(hours=1), requires_duplicate_detection=True,
                                 duplicate_detection_history_time_window=timedelta(minutes=2), user_metadata="meta")
    assert (created.lock_duration, created.max_delivery_count, created.enable_partitioning) == \
        (timedelta(seconds=30), 7, True)
    assert (created.max_size_in_megabytes, created.default_message_time_to_live) == (16 * 2048, timedelta(hours=1))
    assert created.requires_duplicate_detection and created.user_metadata == "meta"
    assert created.duplicate_detection_history_time_window == timedelta(minutes=2)
    assert created.enable_batched_operations is True and created.enable_express is False
    broker_view = amqp_namespace.get_queue(name)
    assert (broker_view.lock_duration, broker_view.max_delivery_count, broker_view.enable_partitioning) == \
        (timedelta(seconds=30), 7, True)
    assert broker_view.max_size_in_megabytes == 2048  # per partition; Service Bus shows the 16 partitions' total

    queue = admin.get_queue(name)
    queue.max_delivery_count = 3
    queue.dead_lettering_on_message_expiration = True
    admin.update_queue(queue, forward_dead_lettered_messages_to=target)
    updated = admin.get_queue(name)
    assert updated.max_delivery_count == 3 and updated.dead_lettering_on_message_expiration
    assert updated.forward_dead_lettered_messages_to.endswith(f"/{target}")
    assert amqp_namespace.get_queue(name).forward_dead_lettered_messages_to == target
    assert amqp_namespace.get_queue(name).max_size_in_megabytes == 2048  # the shown total came back unchanged
    admin.update_queue(admin.get_queue(name), forward_dead_lettered_messages_to=None)
    assert amqp_namespace.get_queue(name).forward_dead_lettered_messages_to is None
    everything = [q.name for q in admin.list_queues()]
    assert {name, target} <= set(everything)
    assert [q.name for q in admin.list_queues(max_page_size=1)] == everything  # one page at a time, by next links

    with ServiceBusClient.from_connection_string(conn_str) as client, client.get_queue_sender(name) as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}", message_id=f"m{i}") for i in range(3)])
    runtime = admin.get_queue_runtime_properties(name)
    assert (runtime.active_message_count, runtime.total_message_count) == (3, 3)
    assert runtime.size_in_bytes > 0
    listed = {r.name: r for r in admin.list_queues_runtime_properties()}
    assert listed[name].active_message_count == 3

    admin.delete_queue(name)
    admin.delete_queue(target)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(name)
    assert name not in {q.name for q in admin.list_queues()}


def test_topic_subscription_and_rules(admin: ServiceBusAdministrationClient, conn_str: str) -> None:
    topic, sub = unique("t"), "sub"
    created = admin.create_topic(topic, max_size_in_megabytes=3072, default_message_time_to_live=timedelta(days=1))
    assert created.max_size_in_megabytes == 3072 and created.default_message_time_to_live == timedelta(days=1)
    admin.update_topic(admin.get_topic(topic), user_metadata="topic meta")
    assert admin.get_topic(topic).user_metadata == "topic meta"
    assert topic in {t.name for t in admin.list_topics()}

    subscription = admin.create_subscription(topic, sub, max_delivery_count=4, lock_duration=timedelta(seconds=45))
    assert (subscription.max_delivery_count, subscription.lock_duration) == (4, timedelta(seconds=45))
    subscription.max_delivery_count = 6
    admin.update_subscription(topic, subscription)
    assert admin.get_subscription(topic, sub).max_delivery_count == 6
    assert [s.name for s in admin.list_subscriptions(topic)] == [sub]

    admin.delete_rule(topic, sub, "$Default")
    admin.create_rule(topic, sub, "sql", filter=SqlRuleFilter("priority > @low", parameters={"@low": 3}),
                      action=SqlRuleAction("SET lane = 'fast'"))
    admin.create_rule(topic, sub, "corr", filter=CorrelationRuleFilter(label="urgent", properties={"region": "eu"}))
    sql = admin.get_rule(topic, sub, "sql")
    assert isinstance(sql.filter, SqlRuleFilter) and sql.filter.sql_expression == "priority > @low"
    assert sql.filter.parameters == {"@low": 3}
    assert isinstance(sql.action, SqlRuleAction) and sql.action.sql_expression == "SET lane = 'fast'"
    corr = admin.get_rule(topic, sub, "corr")
    assert isinstance(corr.filter, CorrelationRuleFilter)
    assert (corr.filter.label, corr.filter.properties) == ("urgent", {"region": "eu"})
    corr.filter = FalseRuleFilter()
    admin.update_rule(topic, sub, corr)
    assert isinstance(admin.get_rule(topic, sub, "corr").filter, FalseRuleFilter)
    assert sorted(r.name for r in admin.list_rules(topic, sub)) == ["corr", "sql"]

    with ServiceBusClient.from_connection_string(conn_str) as client, client.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage("high", application_properties={"priority": 5}),
                              ServiceBusMessage("low", application_properties={"priority": 1})])
    runtime = admin.get_subscription_runtime_properties(topic, sub)
    assert runtime.active_message_count == 1
    counted = admin.get_topic_runtime_properties(topic)
    assert (counted.subscription_count, counted.sql_filter_count, counted.correlation_filter_count) == (1, 2, 0)
    assert [r.active_message_count for r in admin.list_subscriptions_runtime_properties(topic)] == [1]
    assert topic in {t.name for t in admin.list_topics_runtime_properties()}
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_subscription_receiver(topic, sub, max_wait_time=WAIT_S) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            assert str(message) == "high" and message.application_properties[b"lane"] == b"fast"
            receiver.complete_message(message)

    admin.delete_rule(topic, sub, "sql")
    assert [r.name for r in admin.list_rules(topic, sub)] == ["corr"]
    admin.delete_subscription(topic, sub)
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, sub)
    admin.delete_topic(topic)
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic(topic)


def test_errors_the_sdk_maps(admin: ServiceBusAdministrationClient, conn_str: str, amqp_namespace: rb.Namespace,
                             ca_file: str) -> None:
    name = unique("q")
    with pytest.raises(ResourceNotFoundError, match="does not exist"):
        admin.get_queue(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule(unique("t"), "s", "r")
    admin.create_queue(name)
    with pytest.raises(ResourceExistsError):
        admin.create_queue(name)
    with pytest.raises(HttpResponseError, match="lock_duration"):
        admin.create_queue(unique("q"), lock_duration=timedelta(minutes=20))
    with pytest.raises(HttpResponseError, match="auto_delete_on_idle must be from 0:05:00"):
        admin.create_queue(unique("q"), auto_delete_on_idle=timedelta(minutes=4))
    created = admin.create_topic(topic := unique("t"), enable_batched_operations=False, support_ordering=False)
    assert (created.enable_batched_operations, created.support_ordering) == (False, False)
    admin.delete_topic(topic)
    with pytest.raises(HttpResponseError, match="requires_session"):
        admin.update_queue(admin.get_queue(name), requires_session=True)
    topic = unique("t")
    admin.create_topic(topic)
    admin.create_subscription(topic, "s")
    with pytest.raises(HttpResponseError, match="priority >"):
        admin.create_rule(topic, "s", "bad", filter=SqlRuleFilter("priority >"))
    admin.delete_topic(topic)

    config = amqp_namespace.config
    key = config.shared_access_keys()[0]
    wrong = conn_str.replace(key.key, "A" * 43 + "=")
    expired = sas_connection_string(config.amqp_port, f"https://localhost:{config.amqp_port}", key,
                                    int(time.time()) - 60)
    elsewhere = sas_connection_string(config.amqp_port, f"https://localhost:{config.amqp_port}/{name}",
                                      key, int(time.time()) + 3600)
    for bad in (wrong, expired, elsewhere):
        with ServiceBusAdministrationClient.from_connection_string(bad) as client:
            with pytest.raises(ClientAuthenticationError):
                list(client.list_queues())
    admin.delete_queue(name)


async def test_async_client(conn_str: str, amqp_namespace: rb.Namespace) -> None:
    ca = certificate_path(amqp_namespace.config.name, amqp_namespace.config.data_dir)
    name, topic = unique("q"), unique("t")
    async with AsyncAdministrationClient.from_connection_string(conn_str, connection_verify=ca) as admin:
        assert (await admin.get_namespace_properties()).name == amqp_namespace.config.name
        await admin.create_queue(name, max_delivery_count=5)
        queue = await admin.get_queue(name)
        queue.max_delivery_count = 8
        await admin.update_queue(queue)
        assert (await admin.get_queue(name)).max_delivery_count == 8
        assert name in [q.name async for q in admin.list_queues()]
        assert (await admin.get_queue_runtime_properties(name)).active_message_count == 0
        with pytest.raises(ResourceExistsError):
            await admin.create_queue(name)
        await admin.create_topic(topic)
        await admin.create_subscription(topic, "s")
        await admin.create_rule(topic, "s", "all", filter=TrueRuleFilter())
        assert sorted([r.name async for r in admin.list_rules(topic, "s")]) == ["$Default", "all"]
        assert (await admin.get_subscription_runtime_properties(topic, "s")).active_message_count == 0
        await admin.delete_topic(topic)
        await admin.delete_queue(name)
        with pytest.raises(ResourceNotFoundError):
            await admin.get_queue(name)


def test_auto_delete_on_idle_is_kept_shown_and_an_idle_entity_deleted(admin: ServiceBusAdministrationClient,
                                                                      conn_str: str, amqp_namespace: rb.Namespace) -> None:
    """The first gateway deletes, every 30 s, the entities idle for their `auto_delete_on_idle`:
    no send, receive or settlement on any partition and no update for that long (asked here as of
    a later time; a topic with its subscriptions); `enable_express` is kept and shown."""
    import ray

    idle, used, kept, topic = unique("idle"), unique("used"), unique("kept"), unique("t")
    before = time.time()
    admin.create_queue(idle, auto_delete_on_idle=timedelta(minutes=10), enable_express=True)
    admin.create_queue(used, auto_delete_on_idle=timedelta(minutes=10))
    admin.create_queue(kept)
    admin.create_topic(topic, auto_delete_on_idle=timedelta(minutes=10))
    admin.create_subscription(topic, "s", auto_delete_on_idle=timedelta(minutes=20))
    shown = admin.get_queue(idle)
    assert (shown.auto_delete_on_idle, shown.enable_express) == (timedelta(minutes=10), True)
    assert admin.get_queue(kept).auto_delete_on_idle == timedelta(days=10_675_199, seconds=10_085,
                                                                  microseconds=477_581)  # never, as .NET writes it
    assert admin.get_subscription(topic, "s").auto_delete_on_idle == timedelta(minutes=20)
    assert amqp_namespace.get_queue(idle).auto_delete_on_idle == timedelta(minutes=10)

    gateway = ray.get_actor(amqp_namespace.config.gateway_name(0), namespace="ray_broker")
    sweep = lambda now: sorted(ray.get(gateway.call.remote("delete_idle_entities", now)))  # noqa: E731
    assert sweep(before + 590) == []
    time.sleep(3)
    used_at = time.time()
    with ServiceBusClient.from_connection_string(conn_str) as client, client.get_queue_sender(used) as sender:
        sender.send_messages(ServiceBusMessage("keeps it"))
    assert sweep(used_at + 599) == sorted([idle, topic])
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(idle)
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "s")
    assert {used, kept} <= {q.name for q in admin.list_queues()}
    assert sweep(time.time() + 700) == [used]
    admin.delete_queue(kept)


def test_the_same_connection_string_serves_amqp_after_management(admin: ServiceBusAdministrationClient,
                                                                 conn_str: str) -> None:
    name = unique("q")
    admin.create_queue(name)
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("after management"))
        with client.get_queue_receiver(name, max_wait_time=WAIT_S) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            assert str(message) == "after management"
            receiver.complete_message(message)
    assert admin.get_queue_runtime_properties(name).total_message_count == 0
    admin.delete_queue(name)


def raw_request(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"",
                ca: str | None = None) -> tuple[int, bytes]:
    """One request over HTTPS (trusting `ca`) or, without `ca`, plain HTTP on the same port."""
    import http.client
    import ssl

    connection = (http.client.HTTPSConnection("localhost", port, context=ssl.create_default_context(cafile=ca),
                                              timeout=30)
                  if ca else http.client.HTTPConnection("localhost", port, timeout=30))
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_raw_requests_bad_xml_missing_tokens_plain_http_and_a_first_rule(amqp_namespace: rb.Namespace, ca_file: str) -> None:
    config = amqp_namespace.config
    key = config.shared_access_keys()[0]
    auth = {"Authorization": make_token(f"https://localhost:{config.amqp_port}", key.name, key.key,
                                        int(time.time()) + 600)}
    status, body = raw_request(config.amqp_port, "PUT", f"/{unique('q')}", auth, b"<entry><content>", ca_file)
    assert status == 400 and b"not well-formed XML" in body
    status, body = raw_request(config.amqp_port, "GET", "/$Resources/queues", {}, ca=ca_file)
    assert status == 401 and b"no Authorization header" in body
    status, body = raw_request(config.amqp_port, "GET", "/$namespaceinfo", auth)
    assert status == 200 and config.name.encode() in body

    topic = unique("t")
    amqp_namespace.create_topic(topic)
    first_rule = (b'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
                  b'<SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"'
                  b' xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><MaxDeliveryCount>3</MaxDeliveryCount>'
                  b'<DefaultRuleDescription><Filter i:type="CorrelationFilter"><CorrelationId>c-1</CorrelationId>'
                  b'</Filter></DefaultRuleDescription></SubscriptionDescription></content></entry>')
    status, body = raw_request(config.amqp_port, "PUT", f"/{topic}/subscriptions/s", auth, first_rule, ca_file)
    assert status == 201 and b"MaxDeliveryCount>3</" in body
    assert amqp_namespace.get_rule(topic, "s", "$Default").filter.correlation_id == "c-1"
    amqp_namespace.delete_topic(topic)


def test_the_cli_prints_where_the_certificate_is(amqp_namespace: rb.Namespace, ca_file: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    from ray_broker.cli import main

    target = ["-n", amqp_namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]
    assert main(["connection-string", *target, "--ca-file"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == ca_file and open(printed).read().startswith("-----BEGIN CERTIFICATE-----")


def test_named_keys_count_at_once_for_the_management_api(amqp_namespace: rb.Namespace, ca_file: str) -> None:
    """The management API checks tokens against the namespace's keys as they are now, as the AMQP
    port does: a new key with Manage works at once, one with Listen only is refused, a removed one too."""
    port = amqp_namespace.config.amqp_port
    assert port is not None
    manager = amqp_namespace.add_shared_access_key(unique("manager"), ["Manage"])
    listener = amqp_namespace.add_shared_access_key(unique("listener"), ["Listen"])
    try:
        with ServiceBusAdministrationClient.from_connection_string(connection_string("localhost", port, manager)) \
                as client:
            assert isinstance(list(client.list_queues()), list)
        with ServiceBusAdministrationClient.from_connection_string(connection_string("localhost", port, listener)) \
                as client:
            with pytest.raises(ClientAuthenticationError):
                list(client.list_queues())
        amqp_namespace.remove_shared_access_key(manager.name)
        with ServiceBusAdministrationClient.from_connection_string(connection_string("localhost", port, manager)) \
                as client:
            with pytest.raises(ClientAuthenticationError):
                list(client.list_queues())
    finally:
        for key in (manager, listener):
            if key.name in {k.name for k in amqp_namespace.list_shared_access_keys()}:
                amqp_namespace.remove_shared_access_key(key.name)


QUEUE_ENTRY = (b'<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription '
               b'xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"/></content></entry>')


def test_forwarding_targets_name_the_amqp_address_whichever_port_is_asked(ray_instance: None) -> None:
    """A forwarding target shows as `sb://<host>:<AMQP port>/<entity>`, the namespace's address as
    its connection string names it, also when the management port answers (not its own port)."""
    name, target, source = unique("fwd"), unique("target"), unique("source")
    amqp_port = free_port()
    management_port = next(port for port in iter(free_port, None) if port != amqp_port)
    ns = rb.start(name, sku="premium", partitions=1, durability="memory", amqp_port=amqp_port,
                  management_port=management_port)
    try:
        key = ns.config.shared_access_keys()[0]
        auth = {"Authorization": make_token(f"http://localhost:{management_port}", key.name, key.key,
                                            int(time.time()) + 600)}
        assert raw_request(management_port, "PUT", f"/{target}", auth, QUEUE_ENTRY)[0] == 201
        forwarding = QUEUE_ENTRY.replace(b'connect"/>', b'connect"><ForwardTo>' + target.encode()
                                         + b"</ForwardTo></QueueDescription>")
        status, body = raw_request(management_port, "PUT", f"/{source}", auth, forwarding)
        assert status == 201, body
        expected = re.compile(f"ForwardTo>sb://localhost:{amqp_port}/{target}</".encode())
        assert expected.search(body), body
        assert expected.search(raw_request(management_port, "GET", f"/{source}", auth)[1])
    finally:
        rb.stop(name)


def test_a_management_port_serves_the_api_over_plain_http_and_https(ray_instance: None,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`management_port`: the management API over plain HTTP on a port of its own (where
    applications written for Microsoft's emulator send it) and over HTTPS (where the Python
    administration client sends it), the AMQP port unchanged; the CLI prints its connection string; a health
    probe (`GET /health` without a token) on either port says whether every partition answers."""
    import ray

    from ray_broker.cli import main
    from ray_broker.cli.namespaces import status_document

    name, queue = unique("mgmt"), unique("q")
    amqp_port = free_port()
    management_port = next(port for port in iter(free_port, None) if port != amqp_port)
    ns = rb.start(name, sku="premium", partitions=1, durability="memory", amqp_port=amqp_port,
                  management_port=management_port)
    try:
        assert ns.config.management_port == management_port
        key = ns.config.shared_access_keys()[0]
        auth = {"Authorization": make_token(f"http://localhost:{management_port}", key.name, key.key,
                                            int(time.time()) + 600)}
        status, body = raw_request(management_port, "PUT", f"/{queue}", auth, QUEUE_ENTRY)
        assert status == 201 and queue.encode() in body
        status, body = raw_request(management_port, "GET", "/$Resources/queues", auth)
        assert status == 200 and queue.encode() in body
        assert raw_request(management_port, "GET", "/$Resources/queues", {})[0] == 401
        status, body = raw_request(management_port, "GET", "/$namespaceinfo", auth,
                                   ca=certificate_path(ns.config.name, ns.config.data_dir))
        assert status == 200 and name.encode() in body, "HTTPS too, as the Python administration client speaks it"
        target = ["-n", name, "--address", str(ray.get_runtime_context().gcs_address)]
        assert main(["connection-string", *target, "--management"]) == 0
        printed = capsys.readouterr().out.strip().splitlines()[-1]  # after any line Ray's log monitor printed
        assert printed == connection_string("localhost", management_port, key)
        assert main(["status", *target]) == 0
        assert f"AMQP on port {amqp_port}" in capsys.readouterr().out
        shown = status_document(ns)
        assert (shown["amqp_port"], shown["management_port"]) == (amqp_port, management_port)
        with ServiceBusClient.from_connection_string(connection_string("localhost", amqp_port, key)) as client:
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("created over plain HTTP"))
        status, body = raw_request(management_port, "GET", f"/{queue}", auth)
        assert status == 200 and b"<MessageCount>1</MessageCount>" in body

        busy = unique("busy")
        with pytest.raises(rb.errors.InvalidOperationError,
                           match=f"port {management_port} \\(the management port\\) cannot be listened on"):
            rb.start(busy, sku="premium", partitions=1, durability="memory", amqp_port=free_port(),
                     management_port=management_port)
        with pytest.raises(rb.errors.NamespaceNotRunningError):
            rb.connect(busy)

        for port in (management_port, amqp_port):
            status, body = raw_request(port, "GET", "/health", {})
            assert (status, json.loads(body)) == (200, {"status": "healthy", "namespace": name, "partitions": 1,
                                                        "partitions_down": []})
        assert raw_request(management_port, "GET", "/health", auth)[0] == 404, "with a token: the entity 'health'"
        ray.kill(ray.get_actor(f"{name}.partition.0", namespace="ray_broker"), no_restart=True)
        status, body = raw_request(management_port, "GET", "/health", {})
        assert status == 503 and json.loads(body)["partitions_down"] == [0]
    finally:
        rb.stop(name)


def test_entity_authorization_rules_are_kept_and_their_keys_sign_for_that_entity_only(
        admin: ServiceBusAdministrationClient, conn_str: str, amqp_namespace: rb.Namespace) -> None:
    port = amqp_namespace.config.amqp_port
    queue, other, topic = unique("q"), unique("q"), unique("t")
    key, topic_key = base64.b64encode(b"k" * 32).decode(), base64.b64encode(b"t" * 32).decode()
    rule = AuthorizationRule(claim_type="SharedAccessKey", claim_value="None", key_name="app",
                             rights=[AccessRights.SEND, AccessRights.LISTEN], primary_key=key,
                             secondary_key=base64.b64encode(b"s" * 32).decode())
    created = admin.create_queue(queue, authorization_rules=[rule])
    assert [(r.key_name, r.rights, r.primary_key) for r in created.authorization_rules] == \
        [("app", ["Send", "Listen"], key)]
    admin.create_queue(other)
    admin.create_topic(topic)
    admin.create_subscription(topic, "s")
    described = admin.get_topic(topic)
    described.authorization_rules = [AuthorizationRule(key_name="reader", rights=[AccessRights.LISTEN],
                                                       primary_key=topic_key, secondary_key=topic_key)]
    admin.update_topic(described)
    assert [r.key_name for r in amqp_namespace.get_topic(topic).authorization_rules] == ["reader"]
    assert amqp_namespace.get_queue(queue).authorization_rules[0].rights == ("Send", "Listen")

    entity_conn = f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName=app;SharedAccessKey={key};EntityPath={queue}"
    with ServiceBusClient.from_connection_string(entity_conn + ";UseDevelopmentEmulator=true", retry_total=0) as c:
        with c.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("with the queue's key"))
        with c.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            assert str(message) == "with the queue's key"
            receiver.complete_message(message)
        with pytest.raises(ValueError):  # the SDK's own check: EntityPath names another queue
            c.get_queue_sender(other)
    namespace_wide = f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName=app;SharedAccessKey={key};" \
                     "UseDevelopmentEmulator=true"
    with ServiceBusClient.from_connection_string(namespace_wide, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):
            with client.get_queue_sender(other) as sender:
                sender.send_messages(ServiceBusMessage("refused: the key is the other queue's"))
    reader = f"Endpoint=sb://localhost:{port}/;SharedAccessKeyName=reader;SharedAccessKey={topic_key};" \
             "UseDevelopmentEmulator=true"
    with ServiceBusClient.from_connection_string(conn_str) as client, client.get_topic_sender(topic) as sender:
        sender.send_messages(ServiceBusMessage("to the topic"))
    with ServiceBusClient.from_connection_string(reader, retry_total=0) as client:
        with client.get_subscription_receiver(topic, "s", max_wait_time=WAIT_S) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            receiver.complete_message(message)
        with pytest.raises(ServiceBusAuthorizationError):  # the rule grants Listen only
            with client.get_topic_sender(topic) as sender:
                sender.send_messages(ServiceBusMessage("refused: no Send right"))

    admin.update_queue(admin.get_queue(queue), authorization_rules=[])
    assert not admin.get_queue(queue).authorization_rules and not amqp_namespace.get_queue(queue).authorization_rules
    with ServiceBusClient.from_connection_string(entity_conn + ";UseDevelopmentEmulator=true", retry_total=0) as c:
        with pytest.raises(ServiceBusAuthenticationError):
            with c.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage("refused: the rule is gone"))
    for name in (queue, other):
        admin.delete_queue(name)
    admin.delete_topic(topic)
