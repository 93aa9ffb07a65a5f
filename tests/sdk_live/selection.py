"""Which of the SDK's tests the runner runs. Ids are pytest node ids relative to the SDK's `tests/`
directory; an entry names a test (with or without its `[parameters]`), a class, a file, or a
directory (ending with '/')."""
from __future__ import annotations

NOT_LIVE: dict[str, str] = {
    "unittests/": "the SDK's offline unit tests: its own code against mocks, never a broker",
    "perf_tests/": "performance scenarios for Azure's perf framework, no tests",
    "test_batch_sizing.py": "offline: batch size limits from mocked link properties",
    "test_connection_string_parser.py": "offline: parses connection strings",
    "test_dictmixin_amqp.py": "offline: a model base class",
    "test_mgmt_client_kwargs.py": "offline: the arguments the administration client hands its transport",
    "test_tracing.py": "offline: tracing spans with a fake namespace",
    "mgmt_tests/test_mgmt_dictmixin.py": "offline: a model base class",
    "mgmt_tests/test_topic_filter_counts.py": "offline: parses topic entries (the live twin runs)",
}
"""Not live tests: they reach no Service Bus, so they say nothing about the broker."""

_WEBSOCKETS = ("AMQP over WebSockets (TransportType.AmqpOverWebsocket) with no custom_endpoint_address: the SDK opens "
               "its WebSocket on port 443 (the sync client without TLS: 80), not on the port of the connection string, "
               "where the front end serves it")
_TLS = ("AMQP over TLS (the SDK's ssl_context, connection_verify) on Service Bus's port 5671 with a certificate a public "
        "authority signed (the tests trust certifi's bundle): the front end serves TLS on its AMQP port, with a "
        "certificate of its own")

NEEDS_AZURE: dict[str, str] = {
    "test_queues.py::TestServiceBusQueue::test_queue_message_amqp_over_websocket": _WEBSOCKETS,
    "test_queues.py::TestServiceBusQueue::test_queue_send_twice": _WEBSOCKETS,
    "test_queues.py::TestServiceBusQueue::test_queue_send_timeout": _WEBSOCKETS,
    "test_queues.py::TestServiceBusQueue::test_queue_send_large_message_receive": _WEBSOCKETS,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_queue_message_amqp_over_websocket": _WEBSOCKETS,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_async_queue_send_twice": _WEBSOCKETS,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_async_queue_send_timeout": _WEBSOCKETS,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_async_queue_send_large_message_receive":
        _WEBSOCKETS,
    "test_sb_client.py::TestServiceBusClient::test_sb_client_with_ssl_context[ws-pyamqp]": _WEBSOCKETS,
    "async_tests/test_sb_client_async.py::TestServiceBusClientAsync::test_sb_client_with_ssl_context_async"
    "[ws-pyamqp]": _WEBSOCKETS,
    "test_sb_client.py::TestServiceBusClient::test_sb_client_with_ssl_context[amqp-pyamqp]":
        _TLS + " (an SSL context that trusts nothing must fail the connection)",
    "async_tests/test_sb_client_async.py::TestServiceBusClientAsync::test_sb_client_with_ssl_context_async"
    "[amqp-pyamqp]": _TLS + " (an SSL context that trusts nothing must fail the connection)",
    "test_sb_client.py::TestServiceBusClient::test_custom_endpoint_connection_verify_exception":
        _TLS + " (a CA file that does not sign the server's certificate must fail the connection)",
}
"""Live tests that need real Azure (Resource Manager, Azure AD, a public host name, TLS on the
AMQP port, WebSockets) and cannot pass against a local broker, each with its reason."""

SLOW: dict[str, int] = {
    "test_queues.py::TestServiceBusQueue::test_queue_receive_keep_conn_alive": 600,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_queue_receive_keep_conn_alive_async": 600,
    "test_queues.py::TestServiceBusQueue::test_queue_receiver_sender_resume_after_link_timeout": 600,
    "test_queues.py::TestServiceBusQueue::test_github_issue_6178": 400,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_github_issue_6178_async": 400,
    "test_sessions.py::TestServiceBusSession::test_session_cancel_scheduled_messages": 400,
    "async_tests/test_sessions_async.py::TestServiceBusAsyncSession::test_async_session_cancel_scheduled_messages":
        400,
    "test_topic.py::TestServiceBusTopics::test_topic_by_servicebus_client_send_large_messages_w_sleep": 400,
}
"""Live tests that take longer than a run's timeout per test by design (they sleep past Service
Bus's 4-minute idle timeout, or wait out several receives of a minute), with the seconds they get."""

GROUPS: tuple[tuple[str, ...], ...] = (
    ("async_tests/test_queues_async.py",),
    ("test_queues.py",),
    ("async_tests/test_list_sessions_async.py", "async_tests/test_sb_client_async.py",
     "async_tests/test_sessions_async.py", "async_tests/test_subscriptions_async.py",
     "async_tests/test_topic_async.py", "mgmt_tests/"),
    ("test_list_sessions.py", "test_message.py", "test_sb_client.py", "test_sessions.py", "test_subscriptions.py",
     "test_topic.py"),
)
"""How a full run splits the live tests into groups run at once, each against a namespace of its
own (most tests wait more than they work). A group runs its tests one at a time, so the
management tests, which delete every queue and topic of their namespace, disturb no other test."""

FAST: tuple[str, ...] = (
    "mgmt_tests/test_mgmt_namespaces.py::TestServiceBusManagementClientNamespace::test_mgmt_namespace_get_properties",
    "mgmt_tests/test_mgmt_queues.py::TestServiceBusAdministrationClientQueue::test_mgmt_queue_create_by_name",
    "mgmt_tests/test_mgmt_queues.py::TestServiceBusAdministrationClientQueue::"
    "test_mgmt_queue_get_runtime_properties_basic",
    "mgmt_tests/test_mgmt_subscriptions.py::TestServiceBusAdministrationClientSubscription::"
    "test_mgmt_sub_create_w_sub_desc",
    "mgmt_tests/test_mgmt_rules.py::TestServiceBusAdministrationClientRule::test_mgmt_rule_create",
    "mgmt_tests/test_topic_filter_counts_live.py::TestServiceBusAdministrationClientTopicFilterCounts::"
    "test_topic_filter_counts_live",
    "test_queues.py::TestServiceBusQueue::test_queue_complete_message_on_different_receiver",
    "test_queues.py::TestServiceBusQueue::test_state_deferred",
    "test_sb_client.py::TestServiceBusClient::test_sb_client_writeonly_credentials",
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::"
    "test_async_queue_by_queue_client_conn_str_receive_handler_peeklock",
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::"
    "test_queue_message_settle_through_mgmt_link_due_to_broken_receiver_link",
)
"""SDK tests that pass here and take seconds: the subset CI runs (tests/sdk_live/test_sdk_live.py)."""

_NEXT_SESSION_WAIT = ("the test expects receive_messages(max_wait_time=5) on a receiver of the next available session "
                      "with max_wait_time=70 to wait more than 65 s, but SDK 7.15.0 bounds the link's opening by the "
                      "call's 5 s on the client (OperationTimeoutError 'Timed out waiting for the AMQP link to open.'), "
                      "against Service Bus too; the broker holds the attach for the link's com.microsoft:timeout, as "
                      "Service Bus does")
_SETTLE_PATCH = ("the test replaces ReceiveClient.settle_messages with a function (_hack_amqp_message_complete) that "
                 "lacks the await_outcome keyword SDK 7.15.0 passes, so the settlement fails on the client ('Handler "
                 "failed: ... got an unexpected keyword argument') before it reaches any service")

KNOWN_FAILING: dict[str, str] = {
    "test_sessions.py::TestServiceBusSession::test_next_available_session_timeout_value": _NEXT_SESSION_WAIT,
    "async_tests/test_sessions_async.py::TestServiceBusAsyncSession::test_async_next_available_session_timeout_value":
        _NEXT_SESSION_WAIT,
    "test_topic.py::TestServiceBusTopics::test_topic_by_servicebus_client_send_large_messages_w_sleep":
        "a send waits up to a minute for the SDK's own socket lock, which its keep-alive thread holds every 30 s in "
        "a read of up to socket_timeout (60 s) that ends when a frame comes; the front end sends an idle client "
        "nothing (it heartbeats only a client that declares an idle timeout, which the SDK does not), so ten sends "
        "10 s apart outlast the test's 400 s (front end)",
    "test_queues.py::TestServiceBusQueue::test_queue_operation_negative": _SETTLE_PATCH,
    "async_tests/test_queues_async.py::TestServiceBusQueueAsync::test_async_queue_operation_negative": _SETTLE_PATCH,
}
"""Live tests that fail here for a known reason, with it (docs/reference/differences.md lists them
too): tests of SDK 7.15.0 that fail against any service, and differences not yet closed. The full
run (--long) fails on any other failure."""


def deselected() -> dict[str, str]:
    """Every entry the runner leaves out, with its reason."""
    return {**NOT_LIVE, **NEEDS_AZURE}
