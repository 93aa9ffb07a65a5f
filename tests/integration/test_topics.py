"""Topics on a real namespace: filtered subscriptions over partitions, rule changes, a killed
partition, management and runtime properties, sessions, dead letters, scheduling; sync and async,
direct and relayed."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

import ray_broker as rb
import ray_broker.aio as rba

from .helpers import drain, kill_partition, wait_partition_back

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name for one test."""
    return f"t-{uuid.uuid4().hex[:12]}"


def take_all(ns: rb.Namespace, topic: str, subscription: str, *, wait: float = 2.0,
             expected: int | None = None) -> list[rb.ReceivedMessage]:
    """Receive and complete every message a subscription holds (until `expected` came, or a
    receive waited `wait` seconds in vain)."""
    with ns.get_subscription_receiver(topic, subscription, max_wait_time=wait) as receiver:
        return drain(receiver, expected=expected, wait=wait)


def ids(messages: list[rb.ReceivedMessage]) -> list[str]:
    return sorted(str(m.message_id) for m in messages)


SUBSCRIPTIONS: dict[str, tuple[Any, Any, Callable[[dict[str, Any]], bool]]] = {
    "all": (None, None, lambda p: True),
    "urgent": (rb.SqlFilter("user.priority >= 7 AND sys.label <> 'spam'"), None,
               lambda p: p["priority"] >= 7 and p["subject"] != "spam"),
    "red": (rb.CorrelationFilter(subject="red", properties={"region": "eu"}), None,
            lambda p: p["subject"] == "red" and p["region"] == "eu"),
    "regions": (rb.SqlFilter("region IN ('us', 'ap') OR region LIKE 'e_'"), None, lambda p: True),
    "gold": (rb.SqlFilter("user.priority = 9"), rb.SqlRuleAction("SET user.tier = 'gold'"),
             lambda p: p["priority"] == 9),
}


def published(count: int) -> list[tuple[rb.Message, dict[str, Any]]]:
    """`count` messages, half keyed, with the properties the subscriptions' rules read."""
    subjects, regions = ("red", "blue", "spam"), ("eu", "us", "ap")
    out = []
    for i in range(count):
        props = {"priority": i % 10, "subject": subjects[i % 3], "region": regions[(i // 3) % 3]}
        msg = rb.Message(f"m{i}", message_id=f"m{i}", subject=props["subject"],
                         partition_key=f"k{i % 37}" if i % 2 else None,
                         application_properties={"priority": props["priority"], "region": props["region"]})
        out.append((msg, props))
    return out


def test_each_of_five_subscriptions_gets_exactly_what_its_rules_select(namespace: rb.Namespace, topic_name: str,
                                                                       client_path: str) -> None:
    namespace.create_topic(topic_name, enable_partitioning=True)
    for name, (filter, action, _) in SUBSCRIPTIONS.items():
        if action is None:
            namespace.create_subscription(topic_name, name, rule=filter)
        else:
            namespace.create_subscription(topic_name, name, rule=rb.FalseFilter())
            namespace.create_rule(topic_name, name, "gold", filter=filter, action=action)
    messages = published(5000 if client_path == "direct" else 1000)
    with namespace.get_topic_sender(topic_name) as sender:
        for start in range(0, len(messages), 100):
            sender.send_messages([m for m, _ in messages[start:start + 100]])
    for name, (_, action, selects) in SUBSCRIPTIONS.items():
        expected = sorted(m.message_id for m, p in messages if selects(p))
        got = take_all(namespace, topic_name, name, expected=len(expected))
        assert ids(got) == expected, name
        assert len({m.partition_index for m in got}) > 1, name
        if action is not None:
            assert all(m.application_properties["tier"] == "gold" for m in got)
            assert all(m.application_properties["RuleName"] == "gold" for m in got)
    runtime = namespace.get_topic_runtime_properties(topic_name)
    assert (runtime.subscription_count, runtime.size_in_bytes, runtime.availability) == (5, 0, "Available")
    namespace.delete_topic(topic_name)


def test_rules_added_and_removed_apply_to_later_messages(namespace: rb.Namespace, topic_name: str) -> None:
    namespace.create_topic(topic_name, enable_partitioning=True)
    namespace.create_subscription(topic_name, "s", rule=rb.CorrelationFilter(subject="a"))
    with namespace.get_topic_sender(topic_name) as sender:
        sender.send_messages([rb.Message("1", subject="a"), rb.Message("2", subject="b")])
        namespace.create_rule(topic_name, "s", "b", filter=rb.SqlFilter("sys.label = 'b'"))
        sender.send_messages([rb.Message("3", subject="a"), rb.Message("4", subject="b")])
        namespace.delete_rule(topic_name, "s", "$Default")
        sender.send_messages([rb.Message("5", subject="a"), rb.Message("6", subject="b")])
    assert sorted(m.body for m in take_all(namespace, topic_name, "s", expected=4)) == [b"1", b"3", b"4", b"6"]
    assert [r.name for r in namespace.list_rules(topic_name, "s")] == ["b"]
    namespace.delete_topic(topic_name)


def keyed(numbers: range) -> list[rb.Message]:
    """One message per number, each with its own partition key (so they spread over the partitions)."""
    return [rb.Message(str(n), partition_key=f"k{n}", application_properties={"n": n}) for n in numbers]


def test_update_rule_replaces_the_filter_on_every_partition(namespace: rb.Namespace, topic_name: str) -> None:
    namespace.create_topic(topic_name, enable_partitioning=True)
    namespace.create_subscription(topic_name, "s", rule=rb.SqlFilter("n < 10"))
    with namespace.get_topic_sender(topic_name) as sender:
        sender.send_messages(keyed(range(0, 20)))
        rule = namespace.get_rule(topic_name, "s", "$DEFAULT")
        rule.filter = rb.SqlFilter("n >= @low", {"low": 30})
        rule.action = rb.SqlRuleAction("SET user.updated = TRUE")
        assert namespace.update_rule(topic_name=topic_name, subscription_name="s", rule=rule) is None
        sender.send_messages(keyed(range(20, 40)))
    got = take_all(namespace, topic_name, "s", expected=20)
    assert sorted(int(m.body) for m in got) == [*range(0, 10), *range(30, 40)]
    assert all(m.application_properties.get("updated", False) is (int(m.body) >= 30) for m in got)
    (stored,) = namespace.list_rules(topic_name, "s")
    assert (stored.name, stored.filter, stored.action) == ("$Default", rule.filter, rule.action)
    namespace.delete_topic(topic_name)


def test_update_rule_refuses_bad_rules_and_missing_entities(namespace: rb.Namespace, topic_name: str) -> None:
    namespace.create_topic(topic_name)
    namespace.create_subscription(topic_name, "s", rule=rb.SqlFilter("n < 10"))
    rule = namespace.get_rule(topic_name, "s", "$Default")
    rule.filter.sql_expression = "n <"
    with pytest.raises(rb.errors.RuleSyntaxError):
        namespace.update_rule(topic_name, "s", rule)
    rule.filter = "n < 3"
    with pytest.raises(rb.errors.InvalidArgumentError, match="filter must be"):
        namespace.update_rule(topic_name, "s", rule)
    assert namespace.get_rule(topic_name, "s", "$Default").filter == rb.SqlFilter("n < 10")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError, match="no rule named 'missing'"):
        namespace.update_rule(topic_name, "s", rb.RuleProperties("missing", rb.FalseFilter()))
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.update_rule(topic_name, "gone", rb.RuleProperties("$Default", rb.FalseFilter()))
    namespace.delete_topic(topic_name)


def test_killing_a_partition_loses_nothing_on_any_subscription(namespace: rb.Namespace, topic_name: str) -> None:
    namespace.create_topic(topic_name, enable_partitioning=True)
    for name in ("a", "b", "c"):
        namespace.create_subscription(topic_name, name,
                                      rule=rb.SqlFilter("user.n % 2 = 0") if name == "c" else None)
    acknowledged: list[int] = []
    killed = threading.Event()

    def kill() -> None:
        old = kill_partition(namespace, 3)
        wait_partition_back(namespace, 3, old)
        killed.set()

    killer = threading.Thread(target=kill)
    with namespace.get_topic_sender(topic_name) as sender:
        for batch in range(30):
            if batch == 10:
                killer.start()
            numbers = list(range(batch * 50, batch * 50 + 50))
            sender.send_messages([rb.Message(str(n), message_id=str(n), partition_key=f"k{n % 11}" if n % 3 else None,
                                             application_properties={"n": n}) for n in numbers], timeout=60)
            acknowledged += numbers
    killer.join()
    assert killed.is_set()
    for name in ("a", "b", "c"):
        expected = sorted(str(n) for n in acknowledged if name != "c" or n % 2 == 0)
        got = take_all(namespace, topic_name, name, expected=len(expected), wait=5)
        assert ids(got) == expected, name
    namespace.delete_topic(topic_name)


def test_topic_and_subscription_management(namespace: rb.Namespace, topic_name: str) -> None:
    created = namespace.create_topic(topic_name, max_size_in_megabytes=2048,
                                     default_message_time_to_live=timedelta(hours=1))
    assert (created.name, created.max_size_in_megabytes, created.enable_partitioning) == (topic_name, 2048, False)
    with pytest.raises(rb.errors.MessagingEntityAlreadyExistsError):
        namespace.create_topic(topic_name)
    assert topic_name in [t.name for t in namespace.list_topics()]
    assert topic_name not in [q.name for q in namespace.list_queues()]
    updated = namespace.update_topic(topic_name, user_metadata="news")
    assert updated.user_metadata == "news" and namespace.get_topic(topic_name).user_metadata == "news"
    with pytest.raises(rb.errors.InvalidOperationError, match="cannot change"):
        namespace.update_topic(topic_name, enable_partitioning=True)
    sub = namespace.create_subscription(topic_name, "audit", max_delivery_count=3,
                                        lock_duration=timedelta(seconds=30))
    assert (sub.name, sub.topic_name, sub.max_delivery_count) == ("audit", topic_name, 3)
    assert sub.dead_lettering_on_filter_evaluation_exceptions
    namespace.create_subscription(topic_name, "billing", rule=rb.SqlFilter("user.amount > 100"))
    assert [s.name for s in namespace.list_subscriptions(topic_name)] == ["audit", "billing"]
    assert namespace.update_subscription(topic_name, "audit", max_delivery_count=5).max_delivery_count == 5
    props = namespace.get_subscription(topic_name, "audit")
    props.status = "ReceiveDisabled"
    assert namespace.update_subscription(topic_name, props).status == "ReceiveDisabled"
    namespace.update_subscription(topic_name, "audit", status="Active")
    (default,) = namespace.list_rules(topic_name, "audit")
    assert (default.name, default.filter, default.action) == ("$Default", rb.TrueFilter(), None)
    rule = namespace.create_rule(topic_name, "audit", "tagged", filter=rb.CorrelationFilter(correlation_id="c-1"),
                                 action=rb.SqlRuleAction("SET user.seen = TRUE"))
    assert namespace.get_rule(topic_name, "audit", "tagged") == rule
    assert rule.filter.correlation_id == "c-1" and rule.action.sql_expression == "SET user.seen = TRUE"
    counted = namespace.get_topic_runtime_properties(topic_name)
    assert (counted.sql_filter_count, counted.correlation_filter_count) == (2, 1)  # two $Default rules, "tagged"
    with pytest.raises(rb.errors.MessagingEntityAlreadyExistsError):
        namespace.create_rule(topic_name, "audit", "tagged")
    namespace.delete_rule(topic_name, "audit", "tagged")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_rule(topic_name, "audit", "tagged")
    with namespace.get_topic_sender(topic_name) as sender:
        sender.send_messages([rb.Message("x", application_properties={"amount": 150}), rb.Message("y")])
    runtime = namespace.get_subscription_runtime_properties(topic_name, "billing")
    assert (runtime.name, runtime.active_message_count, runtime.availability) == ("billing", 1, "Available")
    topic_runtime = namespace.get_topic_runtime_properties(topic_name)
    assert topic_runtime.subscription_count == 2 and topic_runtime.active_message_count == 0
    assert topic_runtime.size_in_bytes > 0
    namespace.delete_subscription(topic_name, "billing")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_subscription(topic_name, "billing")
    namespace.delete_topic(topic_name)
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_subscription(topic_name, "audit")
    assert topic_name not in [t.name for t in namespace.list_topics()]


def test_bad_rules_and_unknown_entities_raise_typed_errors(namespace: rb.Namespace, topic_name: str) -> None:
    with pytest.raises(rb.errors.RuleSyntaxError) as caught:
        rb.SqlFilter("sys.label = 'x' AND")
    assert "line 1, column" in str(caught.value)
    with pytest.raises(rb.errors.RuleSyntaxError):
        rb.SqlRuleAction("SET = 3")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.create_subscription(topic_name, "s")
    namespace.create_topic(topic_name)
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.create_rule(topic_name, "missing", "r")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.delete_rule(topic_name, "missing", "r")
    namespace.create_subscription(topic_name, "s")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.delete_rule(topic_name, "s", "missing")
    with pytest.raises(rb.errors.InvalidOperationError, match="subscription"):
        with namespace.get_queue_receiver(topic_name) as receiver:
            receiver.receive_messages(1, max_wait_time=1)
    with pytest.raises(rb.errors.InvalidOperationError, match="topic"):
        with namespace.get_queue_sender(f"{topic_name}/subscriptions/s") as sender:
            sender.send_messages(rb.Message("x"))
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.get_topic_runtime_properties(f"{topic_name}-missing")
    namespace.delete_topic(topic_name)


def test_subscription_receivers_do_what_queue_receivers_do(namespace: rb.Namespace, topic_name: str) -> None:
    namespace.create_topic(topic_name, enable_partitioning=True, requires_duplicate_detection=True)
    namespace.create_subscription(topic_name, "work", max_delivery_count=2, rule=rb.SqlFilter("sys.SessionId IS NULL"))
    namespace.create_subscription(topic_name, "chats", requires_session=True)
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    with namespace.get_topic_sender(topic_name) as sender:
        sender.send_messages([rb.Message(f"w{i}", message_id=f"w{i}") for i in range(4)])
        sender.send_messages(rb.Message("dup", message_id="w0"))
        sender.send_messages([rb.Message("hi", message_id="c1", session_id="alice")])
        kept, cancelled = sender.schedule_messages([rb.Message("s1", message_id="s1"),
                                                    rb.Message("s2", message_id="s2")], later)
        sender.cancel_scheduled_messages([cancelled])
    assert namespace.get_topic_runtime_properties(topic_name).scheduled_message_count == 1
    with namespace.get_subscription_receiver(topic_name, "work", max_wait_time=5) as receiver:
        got = {m.body: m for m in receiver.receive_messages(4, max_wait_time=5)}
        assert set(got) == {b"w0", b"w1", b"w2", b"w3"}
        receiver.defer_message(got[b"w1"])
        receiver.dead_letter_message(got[b"w2"], reason="bad", error_description="test")
        receiver.abandon_message(got[b"w3"])
        receiver.complete_message(got[b"w0"])
        (deferred,) = receiver.receive_deferred_messages([got[b"w1"].sequence_number])
        receiver.complete_message(deferred)
        again = receiver.receive_messages(1, max_wait_time=5)
        assert [m.body for m in again] == [b"w3"] and again[0].delivery_count == 2
        receiver.renew_message_lock(again[0])
        receiver.complete_message(again[0])
        (scheduled,) = receiver.receive_messages(1, max_wait_time=10)
        assert scheduled.body == b"s1" and scheduled.sequence_number > kept
        receiver.complete_message(scheduled)
    with namespace.get_subscription_receiver(topic_name, "work") as peeker:
        assert peeker.peek_messages(5) == []
    with namespace.get_subscription_receiver(topic_name, "work",
                                             sub_queue=rb.SubQueue.DEAD_LETTER, max_wait_time=5) as dlq:
        (dead,) = dlq.receive_messages(1, max_wait_time=5)
        assert (dead.body, dead.dead_letter_reason) == (b"w2", "bad")
        dlq.complete_message(dead)
    with namespace.get_queue_receiver(f"{topic_name}/subscriptions/work/$deadletterqueue", max_wait_time=1) as path:
        assert path.receive_messages(1, max_wait_time=1) == []
    with namespace.get_subscription_receiver(topic_name, "chats", session_id=rb.NEXT_AVAILABLE_SESSION,
                                             max_wait_time=5) as chats:
        assert chats.session.session_id == "alice"
        chats.session.set_state(b"seen")
        (hello,) = chats.receive_messages(1, max_wait_time=5)
        assert hello.body == b"hi" and chats.session.get_state() == b"seen"
        chats.complete_message(hello)
    with namespace.get_subscription_receiver(topic_name, "chats", receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE,
                                             sub_queue=rb.SubQueue.DEAD_LETTER, max_wait_time=1) as chat_dlq:
        unsessioned = chat_dlq.receive_messages(10, max_wait_time=5)
        assert sorted(m.body for m in unsessioned) == [b"s1", b"w0", b"w1", b"w2", b"w3"]
        assert {m.dead_letter_reason for m in unsessioned} == {"Session ID is null."}
    runtime = namespace.get_subscription_runtime_properties(topic_name, "work")
    assert runtime.total_message_count == 0
    assert namespace.get_topic_runtime_properties(topic_name).size_in_bytes == 0
    namespace.delete_topic(topic_name)


async def test_async_topics(namespace: rb.Namespace, topic_name: str, client_path: str) -> None:
    async with rba.Namespace(namespace.config, relay=client_path == "relay") as ns:
        await ns.create_topic(topic_name, enable_partitioning=True)
        await ns.create_subscription(topic_name, "even", rule=rb.SqlFilter("n % 2 = 0"))
        await ns.create_subscription(topic_name, "all")
        await ns.create_rule(topic_name, "all", "tag", filter=rb.SqlFilter("n = 3"),
                             action=rb.SqlRuleAction("SET user.three = TRUE"))
        assert [r.name for r in await ns.list_rules(topic_name, "all")] == ["$Default", "tag"]
        async with ns.get_topic_sender(topic_name) as sender:
            await sender.send_messages([rb.Message(str(n), application_properties={"n": n}) for n in range(6)])
        odd = await ns.get_rule(topic_name, "even", "$Default")
        odd.filter = rb.SqlFilter("n % 2 = 1")
        assert await ns.update_rule(topic_name, "even", odd) is None
        async with ns.get_topic_sender(topic_name) as sender:
            await sender.send_messages(keyed(range(10, 14)))
        with pytest.raises(rb.errors.MessagingEntityNotFoundError):
            await ns.update_rule(topic_name, "even", rb.RuleProperties("missing", rb.TrueFilter()))
        got: dict[str, list[bytes]] = {}
        for name, count in (("even", 5), ("all", 11)):
            async with ns.get_subscription_receiver(topic_name, name, max_wait_time=5) as receiver:
                got[name] = []
                while len(got[name]) < count:
                    batch = await receiver.receive_messages(10, max_wait_time=5)
                    assert batch
                    for message in batch:
                        await receiver.complete_message(message)
                    got[name] += [m.body for m in batch]
        assert sorted(got["even"]) == [b"0", b"11", b"13", b"2", b"4"]
        assert sorted(got["all"]) == sorted([str(n).encode() for n in [*range(6), *range(10, 14)]] + [b"3"])
        runtime = await ns.get_subscription_runtime_properties(topic_name, "all")
        assert runtime.active_message_count == 0
        assert (await ns.get_topic_runtime_properties(topic_name)).subscription_count == 2
        assert [s.name for s in await ns.list_subscriptions(topic_name)] == ["all", "even"]
        await ns.delete_subscription(topic_name, "even")
        await ns.delete_topic(topic_name)
        assert topic_name not in [t.name for t in await ns.list_topics()]
