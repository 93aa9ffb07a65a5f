"""Fuzzing topic fan-out on one partition engine (no Ray): random subscriptions of random rules,
random batches (small ones and runs), receives with completes and abandons in between. Every
subscription must end up with exactly the copies its rules select (one per message for its
action-less rules, one per matching rule with an action), and once all are settled the partition
must hold no body and pass its integrity check."""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from hypothesis import given
from hypothesis import strategies as st

from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.engine.partition import MAIN, PEEK_LOCK, RECEIVE_AND_DELETE, PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.entities import (
    INHERITED_TOPIC_OPTIONS,
    normalize_subscription_options,
    normalize_topic_options,
    subscription_path,
)
from ray_broker.filters import CorrelationFilter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter, rule_to_wire
from ray_broker.message import ReceivedMessage
from ray_broker.wire import Settlement

from .support import fuzz_example, fuzz_settings

Props = dict[str, Any]
FILTERS: dict[str, tuple[Any, Callable[[Props], bool]]] = {
    "true": (TrueFilter(), lambda p: True),
    "high": (SqlFilter("priority > 5"), lambda p: p.get("priority") is not None and p["priority"] > 5),
    "red": (CorrelationFilter(subject="red"), lambda p: p["subject"] == "red"),
    "not_eu": (SqlFilter("NOT (region = 'eu')"), lambda p: p.get("region") is not None and p["region"] != "eu"),
    "r_subject": (SqlFilter("sys.label LIKE 'r%'"), lambda p: (p["subject"] or "").startswith("r")),
    "odd_small": (SqlFilter("priority IN (1, 3, 5)"), lambda p: p.get("priority") in (1, 3, 5)),
    "has_region": (SqlFilter("EXISTS(region)"), lambda p: "region" in p),
}
TOPIC = "fuzzed"

rules = st.lists(st.tuples(st.sampled_from(sorted(FILTERS)), st.booleans()), min_size=1, max_size=3)
props = st.fixed_dictionaries({"subject": st.sampled_from([None, "red", "rose", "blue"])},
                              optional={"priority": st.integers(0, 9), "region": st.sampled_from(["eu", "us"])})
steps = st.lists(st.tuples(st.lists(props, min_size=1, max_size=40), st.integers(0, 3)), min_size=1, max_size=6)


def _engine(subscriptions: list[list[tuple[str, bool]]]) -> PartitionEngine:
    """A one-partition engine with the topic and its subscriptions (rule k named r<k>)."""
    engine = PartitionEngine(0, 1, Store(None, "memory"), ManualClock())
    topic = {"name": TOPIC, "kind": "topic", "options": normalize_topic_options({}), "incarnation": "t",
             "created_at": 0.0, "updated_at": 0.0}
    engine.create_entity(topic)
    inherited = {key: topic["options"][key] for key in INHERITED_TOPIC_OPTIONS}
    for s, sub_rules in enumerate(subscriptions):
        wires = [rule_to_wire(RuleProperties(f"r{k}", FILTERS[name][0],
                                             SqlRuleAction("SET user.tag = 'x'") if action else None))
                 for k, (name, action) in enumerate(sub_rules)]
        engine.create_entity({"name": subscription_path(TOPIC, f"s{s}"), "kind": "subscription", "topic": TOPIC,
                              "subscription": f"s{s}", "options": {**normalize_subscription_options({}), **inherited},
                              "rules": wires, "incarnation": f"s{s}", "created_at": 0.0, "updated_at": 0.0})
    return engine


def _expected(sub_rules: list[tuple[str, bool]], message_id: str, p: Props) -> Counter[tuple[str, str | None]]:
    """The copies a subscription's rules select of one message: (message id, RuleName or None)."""
    copies: Counter[tuple[str, str | None]] = Counter()
    if any(FILTERS[name][1](p) for name, action in sub_rules if not action):
        copies[(message_id, None)] += 1
    for k, (name, action) in enumerate(sub_rules):
        if action and FILTERS[name][1](p):
            copies[(message_id, f"r{k}")] += 1
    return copies


def _copy(message: ReceivedMessage) -> tuple[str, str | None]:
    return str(message.message_id), message.application_properties.get("RuleName")


def test_every_subscription_gets_exactly_the_copies_its_rules_select(long_run: bool) -> None:

    @fuzz_settings(long_run, ci=200, long=2000)
    @given(subscriptions=st.lists(rules, min_size=1, max_size=4), plan=steps, data=st.data())
    @fuzz_example
    def run(subscriptions: list[list[tuple[str, bool]]], plan: list[tuple[list[Props], int]],
            data: st.DataObject) -> None:
        engine = _engine(subscriptions)
        expected: list[Counter[tuple[str, str | None]]] = [Counter() for _ in subscriptions]
        got: list[Counter[tuple[str, str | None]]] = [Counter() for _ in subscriptions]
        sent = 0
        for batch, receives in plan:
            envelopes = []
            for p in batch:
                message_id = f"m{sent}"
                sent += 1
                user = {k: v for k, v in p.items() if k != "subject"}
                envelopes.append(Message("b", message_id=message_id, subject=p["subject"],
                                         application_properties=user or None).to_envelope())
                for s, sub_rules in enumerate(subscriptions):
                    expected[s] += _expected(sub_rules, message_id, p)
            engine.send(TOPIC, envelopes)
            for _ in range(receives):
                s = data.draw(st.integers(0, len(subscriptions) - 1))
                path = subscription_path(TOPIC, f"s{s}")
                records = engine.receive(path, MAIN, data.draw(st.integers(1, 30)), PEEK_LOCK)["messages"]
                ops = []
                for record in records:
                    action = data.draw(st.sampled_from(["complete", "complete", "abandon"]))
                    ops.append(Settlement(action, record["sequence_number"], record["lock_token"]))
                    if action == "complete":
                        got[s][_copy(ReceivedMessage(record))] += 1
                assert all(result is None for result in engine.settle(path, MAIN, ops))
        for s in range(len(subscriptions)):
            records = engine.receive(subscription_path(TOPIC, f"s{s}"), MAIN, 100_000, RECEIVE_AND_DELETE)["messages"]
            got[s] += Counter(_copy(ReceivedMessage(r)) for r in records)
            assert got[s] == expected[s], f"subscription s{s} with rules {subscriptions[s]}"
        assert engine.db.execute("SELECT COUNT(*) FROM bodies").fetchone()[0] == 0
        assert engine.runtime(TOPIC)["size"] == 0
        assert engine.integrity_check()["ok"]
        engine.store.close()

    run()
