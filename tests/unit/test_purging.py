"""Purging a partition's share of a queue or subscription (`PartitionEngine.purge`, the `Purge`
request), on a real engine over a manual clock."""
from __future__ import annotations

import pytest

from ray_broker import Message
from ray_broker.engine.operations import operation
from ray_broker.engine.partition import DEAD_LETTER, MAIN
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessageLockLostError
from ray_broker.wire import Purge, SessionRef, decode, encode

from .conftest import Broker
from .test_topics import Topic


def purge_all(broker: Broker, entity: str, subq: int = MAIN, batch: int = 1000) -> list[int]:
    """Purge until nothing more is there; how many each call removed."""
    removed = []
    while True:
        reply = broker.engine.purge(entity, subq, batch)
        removed.append(reply["removed"])
        if not reply["more"]:
            return removed


def test_purge_removes_active_deferred_scheduled_and_locked_messages(broker: Broker) -> None:
    q = broker.create_queue("q")
    broker.send(q, *[f"m{i}" for i in range(5)])
    broker.engine.send(q, [{**Message("later").to_envelope(), "scheduled": broker.clock.now() + 60}])
    first, second, *_ = broker.receive(q, 3)
    assert broker.settle(q, "defer", first) is None
    assert purge_all(broker, q) == [6]
    counts = broker.engine.runtime(q)
    assert (counts["active"], counts["scheduled"], counts["size"]) == (0, 0, 0)
    assert broker.peek(q) == []
    assert isinstance(broker.settle(q, "complete", second), MessageLockLostError)
    broker.clock.advance(120)
    assert broker.receive(q) == []


def test_purge_goes_in_batches_and_says_when_more_remain(broker: Broker) -> None:
    q = broker.create_queue("q")
    for i in range(7):
        broker.send(q, f"a{i}", f"b{i}", f"c{i}")
    batches = purge_all(broker, q, batch=2)
    assert sum(batches) == 21 and len(batches) >= 7
    assert broker.engine.runtime(q)["active"] == 0
    assert broker.engine.purge(q, MAIN, 2) == {"removed": 0, "more": False}


def test_purging_the_dead_letter_queue_leaves_the_main_queue(broker: Broker) -> None:
    q = broker.create_queue("q")
    broker.send(q, "dead", "alive")
    dead, _ = broker.receive(q, 2)
    assert broker.settle(q, "dead_letter", dead, reason="r") is None
    assert purge_all(broker, q, DEAD_LETTER) == [1]
    counts = broker.engine.runtime(q)
    assert (counts["dead_letter"], counts["active"]) == (0, 1)
    broker.clock.advance(120)
    assert broker.bodies(broker.receive(q)) == [b"alive"]


def test_purge_leaves_other_entities_sequence_numbers_and_session_state(broker: Broker) -> None:
    q, other = broker.create_queue("q", requires_session=True), broker.create_queue("other")
    broker.send(q, Message("s", session_id="s1"))
    broker.send(other, "keep")
    lock = broker.engine.accept_session(q, "s1")
    ref = SessionRef("s1", lock["lock_token"])
    broker.engine.set_session_state(q, "s1", ref.lock_token, b"state")
    assert purge_all(broker, q) == [1]
    assert broker.engine.get_session_state(q, "s1", ref.lock_token) == b"state"
    assert broker.engine.runtime(other)["active"] == 1
    (seq,) = broker.send(q, Message("next", session_id="s1"))
    assert seq == 2


def test_purging_a_subscription_leaves_its_siblings_and_frees_shared_bodies(broker: Broker) -> None:
    topic = Topic(broker)
    a, b = topic.subscribe("a"), topic.subscribe("b")
    broker.send(topic.name, "x", "y")
    assert purge_all(broker, a) == [2]
    assert [m.body for m in topic.drain(b)] == [b"x", b"y"]
    assert broker.engine.runtime(topic.name)["size"] == 0


def test_a_run_goes_whole_so_a_batch_may_pass_its_count_by_one_run(broker: Broker) -> None:
    q = broker.create_queue("q")
    broker.send(q, *[f"m{i}" for i in range(40)])
    broker.send(q, *[f"n{i}" for i in range(40)])
    assert broker.engine.purge(q, MAIN, 10) == {"removed": 40, "more": True}
    assert broker.engine.purge(q, MAIN, 10) == {"removed": 40, "more": False}


def test_a_topic_and_a_bad_batch_size_are_refused(broker: Broker) -> None:
    topic = Topic(broker)
    with pytest.raises(InvalidOperationError, match="purge its subscriptions"):
        broker.engine.purge(topic.name, MAIN, 10)
    q = broker.create_queue("q")
    with pytest.raises(InvalidArgumentError, match="1 to"):
        broker.engine.purge(q, MAIN, 0)


def test_the_purge_request_crosses_the_wire_and_runs_from_the_operation_table(broker: Broker) -> None:
    q = broker.create_queue("q")
    broker.send(q, "a", "b")
    request = decode(encode(Purge(q, MAIN, 10)))
    assert request == Purge(q, MAIN, 10)
    assert operation(request).run(broker.engine, request) == {"removed": 2, "more": False}


def test_a_purge_with_a_cutoff_takes_only_messages_enqueued_before_it(broker: Broker) -> None:
    q = broker.create_queue("q")
    broker.send(q, "old-1", "old-2")
    cutoff = broker.clock.now() + 1
    broker.clock.advance(5)
    broker.send(q, "new")
    assert broker.engine.purge(q, MAIN, 1000, cutoff) == {"removed": 2, "more": False}
    assert [str(m) for m in broker.peek(q)] == ["new"]
    request = decode(encode(Purge(q, MAIN, 1000, broker.clock.now() + 1)))
    assert operation(request).run(broker.engine, request) == {"removed": 1, "more": False}
