"""auto_delete_on_idle: each partition notes when it last used an entity (runtime's
`accessed_at`), and `ray_broker.auto_delete` decides from those which entities are idle."""
from __future__ import annotations

from ray_broker.auto_delete import idle_entities, last_use, watched

from .conftest import Broker

MINUTES_10 = 600.0


def definition(name: str, kind: str = "queue", idle: float | None = MINUTES_10, **more: object) -> dict[str, object]:
    return {"name": name, "kind": kind, "options": {"auto_delete_on_idle": idle}, "created_at": 0.0,
            "updated_at": 0.0, **more}


def test_a_partition_notes_sends_receives_and_settlements_but_not_peeks(broker: Broker) -> None:
    opened = broker.clock.now()
    broker.create_queue("q")
    assert broker.engine.runtime("q")["accessed_at"] == opened, "unused since the partition opened"
    broker.clock.advance(5)
    broker.send("q", "m")
    assert broker.engine.runtime("q")["accessed_at"] == opened + 5
    broker.clock.advance(5)
    broker.engine.peek("q", 0, 0, 10)
    assert broker.engine.runtime("q")["accessed_at"] == opened + 5
    [message] = broker.receive("q")
    assert broker.engine.runtime("q")["accessed_at"] == opened + 10
    broker.clock.advance(5)
    broker.settle("q", "complete", message)
    assert broker.engine.runtime("q")["accessed_at"] == opened + 15
    broker.send("Q", "by another case")
    assert set(broker.engine.state.accessed) == {"q"}


def test_an_entity_idle_for_its_interval_since_its_last_use_or_update_is_idle() -> None:
    queue = definition("q", updated_at=100.0)
    assert idle_entities([queue], {"q": 50.0}, 100.0 + MINUTES_10 - 1) == []
    assert idle_entities([queue], {"q": 50.0}, 100.0 + MINUTES_10) == ["q"]
    assert idle_entities([queue], {"q": 200.0}, 100.0 + MINUTES_10) == []
    assert idle_entities([queue], {"q": None}, 10 ** 9) == [], "a partition that did not answer keeps it"
    assert idle_entities([definition("never", idle=None)], {"never": 0.0}, 10 ** 9) == []


def test_a_topic_and_its_subscriptions_keep_each_other() -> None:
    topic = definition("t", "topic")
    subscription = definition("t/subscriptions/s", "subscription", idle=None, topic="t")
    everything = [topic, subscription]
    assert watched(everything) == {"t", "t/subscriptions/s"}
    assert idle_entities(everything, {"t": 0.0, "t/subscriptions/s": 500.0}, MINUTES_10) == []
    assert idle_entities(everything, {"t": 0.0, "t/subscriptions/s": 0.0}, MINUTES_10) == ["t"]
    idle_subscription = definition("t/subscriptions/s", "subscription", topic="t")
    assert idle_entities([definition("t", "topic", idle=None), idle_subscription],
                         {"t": 500.0, "t/subscriptions/s": 0.0}, MINUTES_10) == []


def test_the_last_use_is_the_latest_over_partitions_and_unknown_if_one_is() -> None:
    assert last_use([1.0, 3.0, 2.0]) == 3.0
    assert last_use([1.0, None]) is None
    assert last_use([]) is None
