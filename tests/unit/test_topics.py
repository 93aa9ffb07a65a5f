"""Topics on one partition: fan-out by rules, one body per message, actions, filter errors,
scheduling, rule changes and deletion, with no Ray."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message
from ray_broker.message import ReceivedMessage
from ray_broker.engine.partition import DEAD_LETTER, RECEIVE_AND_DELETE
from ray_broker.entities import (
    INHERITED_TOPIC_OPTIONS,
    normalize_subscription_options,
    normalize_topic_options,
    subscription_path,
)
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityNotFoundError,
    RuleSyntaxError,
)
from ray_broker.filters import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    FalseFilter,
    RuleProperties,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    rule_to_wire,
)
from ray_broker.client import management
from ray_broker.routing import home_partition
from ray_broker.sku import get_sku
from ray_broker.wire import SessionRef

from .conftest import Broker

T = 1_700_000_000.0


def topic_definition(name: str, **options: Any) -> dict[str, Any]:
    """The definition a gateway hands to partitions for a new topic."""
    return {"name": name, "kind": "topic", "options": normalize_topic_options(options), "incarnation": f"{name}-1",
            "created_at": T, "updated_at": T}


def subscription_definition(topic: dict[str, Any], name: str, rules: list[RuleProperties] | None = None,
                            **options: Any) -> dict[str, Any]:
    """The definition a gateway hands to partitions for a new subscription."""
    inherited = {key: topic["options"][key] for key in INHERITED_TOPIC_OPTIONS}
    rules = [RuleProperties(DEFAULT_RULE_NAME, TrueFilter(), None)] if rules is None else rules
    return {"name": subscription_path(topic["name"], name), "kind": "subscription", "topic": topic["name"],
            "subscription": name, "options": {**normalize_subscription_options(options), **inherited},
            "rules": [rule_to_wire(rule) for rule in rules], "incarnation": f"{name}-1", "created_at": T,
            "updated_at": T}


def rule(name: str, filter: Any = None, action: Any = None) -> RuleProperties:
    """A rule (a TrueFilter when no filter is given)."""
    return RuleProperties(name, TrueFilter() if filter is None else filter, action)


class Topic:
    """A topic on one engine, with shorthands for its subscriptions."""

    def __init__(self, broker: Broker, name: str = "news", **options: Any) -> None:
        self.broker = broker
        self.definition = topic_definition(name, **options)
        self.name = name
        broker.engine.create_entity(self.definition)

    def subscribe(self, name: str, *rules: RuleProperties, **options: Any) -> str:
        """Create a subscription (with the "$Default" TrueFilter rule unless rules are given); its path."""
        self.broker.engine.create_entity(subscription_definition(self.definition, name, list(rules) or None,
                                                                 **options))
        return subscription_path(self.name, name)

    def drain(self, path: str, *, subq: int = 0) -> list[ReceivedMessage]:
        """Take every available message of a subscription (or its dead-letter sub-queue) for good."""
        records = self.broker.engine.receive(path, subq, 10_000, RECEIVE_AND_DELETE)["messages"]
        return [ReceivedMessage(r) for r in records]


def body_rows(broker: Broker) -> int:
    """How many bodies the partition stores."""
    return int(broker.engine.db.execute("SELECT COUNT(*) FROM bodies").fetchone()[0])


def body_bytes(broker: Broker) -> int:
    """The bytes of payload the partition stores."""
    return int(broker.engine.db.execute("SELECT COALESCE(SUM(length(payload)), 0) FROM bodies").fetchone()[0])


def message(body: str, **props: Any) -> Message:
    """A message with a subject and application properties."""
    subject = props.pop("subject", None)
    return Message(body, subject=subject, application_properties=props or None)


def test_each_subscription_gets_what_its_rules_select(broker: Broker) -> None:
    topic = Topic(broker)
    everything = topic.subscribe("all")
    high = topic.subscribe("high", rule("high", SqlFilter("user.priority > 3")))
    red = topic.subscribe("red", rule("red", CorrelationFilter(subject="red")))
    nothing = topic.subscribe("none", rule("none", FalseFilter()))
    seqs = broker.send("news", message("a", priority=5, subject="red"), message("b", priority=1),
                       message("c", priority=9, subject="blue"), message("d"))
    assert broker.bodies(topic.drain(everything)) == [b"a", b"b", b"c", b"d"]
    assert [m.sequence_number for m in topic.drain(high)] == [seqs[0], seqs[2]]
    assert broker.bodies(topic.drain(red)) == [b"a"]
    assert topic.drain(nothing) == []


def test_a_subscription_peeks_up_to_its_topics_next_sequence_number(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("all")
    seqs = broker.send("news", "a", "b", "c")
    end = broker.engine.runtime(path)["next_sequence"]
    assert end == broker.engine.runtime("news")["next_sequence"] == seqs[-1] + 1
    broker.send("news", "later")
    assert broker.bodies(broker.peek(path, from_sequence=1, to_sequence=end)) == [b"a", b"b", b"c"]


def test_a_message_is_stored_once_and_goes_with_the_last_subscription(broker: Broker) -> None:
    topic = Topic(broker)
    paths = [topic.subscribe(f"s{k}") for k in range(5)]
    broker.send("news", "one", "two", "three")
    once = sum(len(Message(b).to_envelope()["payload"]) for b in ("one", "two", "three"))
    assert body_bytes(broker) == once == broker.engine.runtime("news")["size"]
    for path in paths[:-1]:
        for msg in broker.receive(path):
            assert broker.settle(path, "complete", msg) is None
    assert body_bytes(broker) == once
    for msg in broker.receive(paths[-1]):
        assert broker.settle(paths[-1], "complete", msg) is None
    assert body_rows(broker) == 0
    assert broker.engine.runtime("news")["size"] == 0
    assert broker.engine.integrity_check()["ok"]


def test_a_large_plain_batch_is_one_row_per_subscription(broker: Broker) -> None:
    topic = Topic(broker)
    paths = [topic.subscribe(f"s{k:02d}") for k in range(20)]
    broker.send("news", *[f"m{i}" for i in range(100)])
    rows = broker.engine.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    assert rows == 20 and body_rows(broker) == 1
    got = broker.receive(paths[7], 30)
    assert broker.bodies(got) == [f"m{i}".encode() for i in range(30)]
    for msg in got:
        assert broker.settle(paths[7], "complete", msg) is None
    assert len(topic.drain(paths[7])) == 70
    assert len(topic.drain(paths[0])) == 100
    assert broker.engine.integrity_check()["ok"]


def test_action_less_rules_that_match_give_one_copy(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s", rule("a", SqlFilter("user.n > 1")), rule("b", SqlFilter("user.n > 2")))
    broker.send("news", message("x", n=5), message("y", n=2), message("z", n=0))
    assert broker.bodies(topic.drain(path)) == [b"x", b"y"]


def test_each_matching_rule_with_an_action_gives_its_own_copy(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s", rule("plain", SqlFilter("user.n > 0")),
                           rule("gold", SqlFilter("user.n > 3"), SqlRuleAction("SET user.tier = 'gold'; REMOVE user.n")),
                           rule("label", None, SqlRuleAction("SET sys.label = 'seen'")))
    (seq,) = broker.send("news", message("x", n=5))
    got = topic.drain(path)
    assert len(got) == 3
    plain = next(m for m in got if m.sequence_number == seq)
    assert plain.application_properties == {"n": 5} and plain.subject is None
    gold = next(m for m in got if m.application_properties.get("RuleName") == "gold")
    assert gold.application_properties == {"tier": "gold", "RuleName": "gold"} and gold.body == b"x"
    label = next(m for m in got if m.application_properties.get("RuleName") == "label")
    assert label.subject == "seen" and label.application_properties["n"] == 5
    assert len({m.sequence_number for m in got}) == 3
    assert broker.engine.integrity_check()["ok"]


def test_a_filter_that_fails_dead_letters_the_message_when_the_subscription_says_so(broker: Broker) -> None:
    topic = Topic(broker)
    failing = rule("div", SqlFilter("user.n / user.zero > 1"))
    strict = topic.subscribe("strict", failing)
    lenient = topic.subscribe("lenient", failing, dead_lettering_on_filter_evaluation_exceptions=False)
    broker.send("news", message("x", n=1, zero=0))
    assert topic.drain(strict) == [] and topic.drain(lenient) == []
    (dead,) = topic.drain(strict, subq=DEAD_LETTER)
    assert dead.body == b"x" and dead.dead_letter_reason == "FilterEvaluationException"
    assert dead.dead_letter_error_description
    assert topic.drain(lenient, subq=DEAD_LETTER) == []


def test_a_session_subscription_dead_letters_a_message_without_a_session(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("chats", requires_session=True)
    broker.send("news", Message("with", session_id="s1"), Message("without"))
    lock = broker.engine.accept_session(path, "s1")
    assert lock is not None
    got = broker.receive(path, session=SessionRef(lock["session_id"], lock["lock_token"]))
    assert broker.bodies(got) == [b"with"]
    (dead,) = topic.drain(path, subq=DEAD_LETTER)
    assert dead.body == b"without" and dead.dead_letter_reason == "Session ID is null."


def test_scheduled_messages_wait_on_the_topic_and_fan_out_when_due(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s")
    later = Message("later", scheduled_enqueue_time_utc=datetime.fromtimestamp(T + 60, tz=timezone.utc))
    kept, cancelled = broker.send("news", later, later)
    assert broker.engine.runtime("news")["scheduled"] == 2
    broker.engine.cancel_scheduled("news", [cancelled])
    assert topic.drain(path) == []
    broker.clock.advance(61)
    assert broker.engine.housekeeping()
    (got,) = topic.drain(path)
    assert got.body == b"later" and got.sequence_number > kept
    assert broker.engine.runtime("news")["scheduled"] == 0
    assert body_rows(broker) == 0 and broker.engine.runtime("news")["size"] == 0
    assert broker.engine.integrity_check()["ok"]


def test_rule_changes_apply_to_later_messages(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s", rule("red", CorrelationFilter(subject="red")))
    broker.send("news", message("1", subject="blue"))
    blue = rule_to_wire(rule("blue", CorrelationFilter(subject="blue")))
    broker.engine.add_rule(path, blue)
    broker.engine.add_rule(path, blue)
    with pytest.raises(MessagingEntityAlreadyExistsError):
        broker.engine.add_rule(path, rule_to_wire(rule("BLUE", FalseFilter())))
    broker.send("news", message("2", subject="blue"))
    broker.engine.remove_rule(path, "red")
    broker.engine.remove_rule(path, "red")
    broker.send("news", message("3", subject="red"), message("4", subject="blue"))
    assert broker.bodies(topic.drain(path)) == [b"2", b"4"]


def test_updating_a_rule_replaces_its_filter_and_action_for_later_messages(make_broker: Callable[..., Broker],
                                                                           tmp_path: Path) -> None:
    broker = make_broker(path=tmp_path / "p.sqlite3")
    topic = Topic(broker)
    path = topic.subscribe("s", rule("Big", SqlFilter("user.n > 10")), rule("other", FalseFilter()))
    broker.send("news", message("5", n=5), message("50", n=50))
    before = broker.engine.get_entity(path)["rules"]
    changed = {**rule_to_wire(rule("big", SqlFilter("user.n < 10"), SqlRuleAction("SET user.lane = 'small'"))),
               "created_at_utc": "ignored"}
    broker.engine.update_rule(path, changed)
    broker.engine.update_rule(path, changed)
    after = broker.engine.get_entity(path)["rules"]
    assert [r["name"] for r in after] == ["Big", "other"]
    assert after[0]["created_at_utc"] == before[0]["created_at_utc"] and after[1] == before[1]
    assert after[0]["filter"] == {"type": "sql", "sql_expression": "user.n < 10", "parameters": None}
    broker.send("news", message("6", n=6), message("60", n=60))
    got = topic.drain(path)
    assert broker.bodies(got) == [b"50", b"6"]
    assert got[0].application_properties == {"n": 50}
    assert got[1].application_properties == {"n": 6, "lane": "small", "RuleName": "Big"}
    broker.engine.store.close()
    again = make_broker(path=tmp_path / "p.sqlite3")
    assert again.engine.get_entity(path)["rules"] == after


def test_updating_a_missing_rule_or_a_topic_is_refused_and_changes_nothing(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s")
    before = broker.engine.get_entity(path)
    with pytest.raises(MessagingEntityNotFoundError, match="no rule named 'nope'"):
        broker.engine.update_rule(path, rule_to_wire(rule("nope", FalseFilter())))
    with pytest.raises(MessagingEntityNotFoundError):
        broker.engine.update_rule("news/subscriptions/gone", rule_to_wire(rule(DEFAULT_RULE_NAME, FalseFilter())))
    with pytest.raises(InvalidOperationError, match="rules belong to subscriptions"):
        broker.engine.update_rule("news", rule_to_wire(rule(DEFAULT_RULE_NAME, FalseFilter())))
    assert broker.engine.get_entity(path) == before


def test_update_rule_checks_the_rule_before_sending_anything() -> None:
    current = rule("r", SqlFilter("user.n > 1"))
    current.filter.sql_expression = "user.n >"
    with pytest.raises(RuleSyntaxError):
        next(management.update_rule("news", "s", current))
    current.filter = "user.n > 1"  # type: ignore[assignment]
    with pytest.raises(InvalidArgumentError, match="filter must be"):
        next(management.update_rule("news", "s", current))
    with pytest.raises(InvalidArgumentError, match="RuleProperties"):
        next(management.update_rule("news", "s", "r"))  # type: ignore[arg-type]
    good = rule("r", SqlFilter("user.n > 1"), SqlRuleAction("SET user.x = 1"))
    call = next(management.update_rule("news", "s", good))
    assert call.operation == "update_rule" and call.args[0] == "news/subscriptions/s"
    assert call.args[1]["filter"]["sql_expression"] == "user.n > 1"


def test_deleting_a_subscription_frees_what_only_it_held(broker: Broker) -> None:
    topic = Topic(broker)
    kept = topic.subscribe("kept", rule("odd", SqlFilter("user.n % 2 = 1")))
    gone = topic.subscribe("gone")
    for n in range(6):
        broker.send("news", message(str(n), n=n))
    assert body_rows(broker) == 6
    assert broker.engine.delete_entity(gone)
    assert body_rows(broker) == 3
    assert broker.engine.integrity_check()["ok"]
    assert broker.engine.delete_entity("news")
    assert body_rows(broker) == 0
    with pytest.raises(MessagingEntityNotFoundError):
        broker.engine.get_entity(kept)


def test_topics_are_sent_to_and_subscriptions_received_from(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s")
    with pytest.raises(InvalidOperationError, match="subscription"):
        broker.engine.receive("news", 0, 1)
    with pytest.raises(InvalidOperationError, match="topic"):
        broker.send(path, "x")
    with pytest.raises(MessagingEntityNotFoundError):
        broker.engine.create_entity(subscription_definition(topic_definition("other"), "s"))


def test_a_topic_without_subscriptions_keeps_nothing(broker: Broker) -> None:
    Topic(broker)
    assert broker.send("news", "x", "y") == [1, 2]
    assert body_rows(broker) == 0 and broker.engine.runtime("news")["size"] == 0


def test_time_to_live_is_the_least_of_message_topic_and_subscription(broker: Broker) -> None:
    topic = Topic(broker, default_message_time_to_live=timedelta(seconds=100))
    short = topic.subscribe("short", default_message_time_to_live=timedelta(seconds=10))
    long = topic.subscribe("long")
    broker.send("news", "x")
    broker.clock.advance(11)
    broker.engine.housekeeping()
    assert topic.drain(short) == []
    assert broker.bodies(topic.drain(long)) == [b"x"]


def test_duplicate_detection_applies_on_the_topic(broker: Broker) -> None:
    topic = Topic(broker, requires_duplicate_detection=True)
    path = topic.subscribe("s")
    assert broker.send("news", Message("a", message_id="m1"), Message("b", message_id="m1"))[1] is None
    assert broker.send("news", Message("c", message_id="m1")) == [None]
    assert broker.bodies(topic.drain(path)) == [b"a"]


def test_a_non_partitioned_topic_and_its_subscriptions_live_on_its_home(make_broker: Callable[..., Broker]) -> None:
    home = home_partition("news", 4)
    b = make_broker(index=home, partition_count=4)
    topic = Topic(b)
    path = topic.subscribe("s")
    b.send("news", "x")
    assert b.bodies(topic.drain(path)) == [b"x"]
    other = make_broker(index=(home + 1) % 4, partition_count=4)
    Topic(other)
    other.engine.create_entity(subscription_definition(topic.definition, "s"))
    with pytest.raises(InvalidOperationError, match="lives on partition"):
        other.engine.receive(path, 0, 1)


def test_a_reopened_store_keeps_topic_messages_and_sizes(make_broker: Callable[..., Broker], tmp_path: Path) -> None:
    first = make_broker(path=tmp_path / "p.sqlite3")
    topic = Topic(first)
    paths = [topic.subscribe("a"), topic.subscribe("b")]
    first.send("news", "x", "y")
    size = first.engine.runtime("news")["size"]
    first.engine.store.close()
    again = make_broker(path=tmp_path / "p.sqlite3")
    assert again.engine.runtime("news")["size"] == size
    assert again.engine.integrity_check()["ok"]
    for path in paths:
        assert again.bodies(again.receive(path)) == [b"x", b"y"]


def test_an_action_that_sets_the_time_to_live_sets_it_on_its_copy(broker: Broker) -> None:
    topic = Topic(broker)
    path = topic.subscribe("s", rule("short", None, SqlRuleAction("SET sys.TimeToLive = 5")))
    broker.send("news", "x")
    broker.clock.advance(6)
    broker.engine.housekeeping()
    assert topic.drain(path) == []


def test_topics_are_refused_on_the_basic_tier() -> None:
    with pytest.raises(InvalidOperationError, match="basic"):
        next(management.create_topic(get_sku("basic"), "news", {}))
