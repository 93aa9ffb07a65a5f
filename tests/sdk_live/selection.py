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

NEEDS_AZURE: dict[str, str] = {}
"""Live tests that need real Azure (Resource Manager, Azure AD, a public host name, TLS on the
AMQP port, WebSockets) and cannot pass against a local broker, each with its reason."""

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

FAST: tuple[str, ...] = ()
"""SDK tests that pass here and take seconds: the subset CI runs (tests/sdk_live/test_sdk_live.py)."""


def deselected() -> dict[str, str]:
    """Every entry the runner leaves out, with its reason."""
    return {**NOT_LIVE, **NEEDS_AZURE}
