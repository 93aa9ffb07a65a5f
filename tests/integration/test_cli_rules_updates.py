"""`ray-broker rule list|add|remove` and `ray-broker queue|topic|subscription update` run as their
own processes against the session's namespace, and their bad input."""
from __future__ import annotations

import json
import subprocess
import uuid
from datetime import timedelta

import pytest

import ray_broker as rb

from .test_cli_commands import ok, run_cli


@pytest.fixture
def target(namespace: rb.Namespace) -> list[str]:
    """The options that point a command at the session's namespace."""
    import ray

    return ["-n", namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def one_error_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    assert result.returncode == status, f"exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_rules_added_listed_and_removed_select_what_they_say(namespace: rb.Namespace, target: list[str]) -> None:
    topic = fresh("rules")
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "eu", rule=rb.FalseFilter())
    assert ok(["rule", "add", topic, "eu", "big-eu", "--sql", "region = 'eu' AND amount > 100",
               "--action", "SET lane = 'fast'", *target]) == \
        f"rule 'big-eu' added to subscription 'eu' of topic {topic!r}: region = 'eu' AND amount > 100; " \
        "SET lane = 'fast'\n"
    document = json.loads(ok(["rule", "add", topic, "eu", "refunds", "--subject", "refund", "--property",
                              "amount:int=5", "--json", *target]))
    assert document["filter"] == {"type": "correlation", "subject": "refund", "properties": {"amount": 5}}
    with namespace.get_topic_sender(topic) as sender:
        sender.send_messages([rb.Message("big", application_properties={"region": "eu", "amount": 250}),
                              rb.Message("small", application_properties={"region": "eu", "amount": 5}),
                              rb.Message("refund", subject="refund", application_properties={"amount": 5})])
    got = {bytes(m.body): m.application_properties.get("lane")
           for m in namespace.get_subscription_receiver(topic, "eu").peek_messages(10)}
    assert got == {b"big": "fast", b"refund": None}
    listed = json.loads(ok(["rule", "list", topic, "eu", "--json", *target]))
    assert [r["name"] for r in listed] == ["$Default", "big-eu", "refunds"]
    table = ok(["rule", "list", topic, "eu", *target])
    assert "correlation: subject='refund', user.amount=5" in table and "SET lane = 'fast'" in table
    shown = json.loads(ok(["subscription", "show", topic, "eu", "--json", *target]))["rules"]
    assert shown[2] == {"name": "refunds", "filter": "correlation: subject='refund', user.amount=5", "action": None}
    assert ok(["rule", "remove", topic, "eu", "big-eu", *target]) == \
        f"rule 'big-eu' removed from subscription 'eu' of topic {topic!r}\n"
    assert [r.name for r in namespace.list_rules(topic, "eu")] == ["$Default", "refunds"]


def test_rule_commands_refuse_bad_input_in_one_line(namespace: rb.Namespace, target: list[str]) -> None:
    topic = fresh("rules-bad")
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "s")
    line = one_error_line(run_cli(["rule", "add", topic, "s", "r", "--sql", "region = = 'eu'", *target]), 1)
    assert line.startswith('error: RuleSyntaxError: cannot parse the SQL filter "region = = \'eu\'"')
    line = one_error_line(run_cli(["rule", "add", topic, "s", "r", "--action", "SET", *target]), 1)
    assert line.startswith("error: RuleSyntaxError: cannot parse the SQL rule action")
    line = one_error_line(run_cli(["rule", "add", topic, "nope", "r", "--sql", "1=1", *target]), 1)
    assert line.startswith("error: MessagingEntityNotFoundError:") and "subscription list" in line
    line = one_error_line(run_cli(["rule", "remove", topic, "s", "missing", *target]), 1)
    assert "has no rule named 'missing'; its rules: '$Default'" in line
    line = one_error_line(run_cli(["rule", "add", topic, "s", "r", "--sql", "1=1", "--subject", "x", *target]), 2)
    assert "not both" in line
    namespace.create_rule(topic, "s", "dup")
    line = one_error_line(run_cli(["rule", "add", topic, "s", "dup", "--sql", "1=1", *target]), 1)
    assert line.startswith("error: MessagingEntityAlreadyExistsError:") and "dup" in line
    assert [r.name for r in namespace.list_rules(topic, "s")] == ["$Default", "dup"], "nothing else was added"


def test_updates_change_only_the_settings_given(namespace: rb.Namespace, target: list[str]) -> None:
    q = fresh("upd")
    namespace.create_queue(q, max_delivery_count=7, default_message_time_to_live=timedelta(hours=1))
    assert ok(["queue", "update", q, "--lock-duration", "45", "--ttl", "0", "--dead-letter-expired", *target]) == \
        f"queue {q!r} updated: lock_duration=45 s, dead_lettering_on_message_expiration=True, " \
        "default_message_time_to_live=none\n"
    queue = namespace.get_queue(q)
    assert (queue.lock_duration, queue.max_delivery_count, queue.dead_lettering_on_message_expiration) == \
        (timedelta(seconds=45), 7, True)
    topic = fresh("upd-topic")
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "s")
    document = json.loads(ok(["topic", "update", topic, "--user-metadata", "team=orders", "--json", *target]))
    assert document["user_metadata"] == "team=orders"
    ok(["subscription", "update", topic, "s", "--max-delivery-count", "3", "--forward-to", q, *target])
    sub = namespace.get_subscription(topic, "s")
    assert (sub.max_delivery_count, sub.forward_to) == (3, q)
    ok(["subscription", "update", topic, "s", "--forward-to", "", *target])
    assert namespace.get_subscription(topic, "s").forward_to is None


def test_update_refuses_bad_input_in_one_line(target: list[str], namespace: rb.Namespace) -> None:
    q = fresh("upd-bad")
    namespace.create_queue(q)
    assert "give at least one setting" in one_error_line(run_cli(["queue", "update", q, *target]), 2)
    line = one_error_line(run_cli(["queue", "update", fresh("missing"), "--lock-duration", "5", *target]), 1)
    assert line.startswith("error: MessagingEntityNotFoundError:") and "queue list" in line
    line = one_error_line(run_cli(["queue", "update", q, "--status", "Sleeping", *target]), 1)
    assert line.startswith("error: InvalidArgumentError: a queue's status must be one of")
    line = one_error_line(run_cli(["topic", "update", fresh("missing"), "--ttl", "60", *target]), 1)
    assert line.startswith("error: MessagingEntityNotFoundError:")
