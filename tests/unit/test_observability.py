"""The broker's metrics core: what each engine operation adds to a partition's counts, with no Ray."""
from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ray_broker import Message
from ray_broker.engine.partition import DEAD_LETTER, MAIN, PEEK_LOCK
from ray_broker.errors import InvalidOperationError, MessageLockLostError
from ray_broker.engine.operations import operation
from ray_broker.message import ReceivedMessage
from ray_broker.observability import (
    COMPLETED,
    DEAD_LETTERED,
    EXPIRED,
    LOCK_LOST,
    RECEIVE,
    RECEIVED,
    SEND,
    SENT,
    Meter,
    Tally,
    runtime_counts,
    watch,
    with_vanished,
)

from ray_broker.wire import (
    CommitTransaction,
    ListEntities,
    PartitionRequest,
    Peek,
    Receive,
    ReceiveDeferred,
    RenewSession,
    Runtime,
    Send,
    SessionRef,
    Settle,
    Settlement,
)

from .conftest import RECEIVER, Broker
from .test_topics import subscription_definition, topic_definition

DASHBOARD = Path(__file__).parents[2] / "cluster" / "grafana-dashboard.json"


class Metered:
    """A broker whose engine calls go through a watching meter, as the partition actor's do."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.meter = Meter()
        watch(broker.engine, self.meter)

    def run(self, request: PartitionRequest) -> Any:
        """Run a partition request on the engine through the meter."""
        return self.meter.run(lambda: operation(request).run(self.broker.engine, request), request)

    def send(self, entity: str, *messages: Message | str) -> list[int | None]:
        envelopes = [(m if isinstance(m, Message) else Message(m)).to_envelope() for m in messages]
        return list(self.run(Send(entity, envelopes)))

    def receive(self, entity: str, max_count: int = 100, subq: int = MAIN) -> list[ReceivedMessage]:
        reply = self.run(Receive(entity, subq, max_count, PEEK_LOCK))
        return [ReceivedMessage(r, receiver_key=RECEIVER) for r in reply["messages"]]

    def settle(self, entity: str, action: str, messages: list[ReceivedMessage], subq: int = MAIN) -> list[Any]:
        ops = [Settlement(action, m.sequence_number, m.lock_token_bytes, "Reason", "Description") for m in messages]
        return list(self.run(Settle(entity, subq, ops)))

    def counts(self) -> dict[tuple[str, str], int]:
        """Counts gathered since the previous call."""
        return self.meter.take().counts


@pytest.fixture
def metered(broker: Broker) -> Iterator[Metered]:
    broker.create_queue("Orders")
    yield Metered(broker)


def test_a_known_workload_counts_each_message_once(metered: Metered) -> None:
    metered.send("Orders", *(f"m{i}" for i in range(30)))
    received = metered.receive("orders", 20)
    assert metered.settle("orders", "complete", received[:15]) == [None] * 15
    assert metered.settle("orders", "dead_letter", received[15:]) == [None] * 5
    assert metered.counts() == {(SENT, "orders"): 30, (RECEIVED, "orders"): 20, (COMPLETED, "orders"): 15,
                                (DEAD_LETTERED, "orders"): 5}
    assert metered.counts() == {}, "a take starts again from nothing"


def test_a_topic_counts_each_message_sent_once_and_each_subscription_its_receives(broker: Broker) -> None:
    topic = topic_definition("Events")
    broker.engine.create_entity(topic)
    for name in ("audit", "billing"):
        broker.engine.create_entity(subscription_definition(topic, name))
    metered = Metered(broker)
    metered.send("events", "a", "b", "c")
    metered.receive("events/subscriptions/audit")
    assert metered.counts() == {(SENT, "events"): 3, (RECEIVED, "events/subscriptions/audit"): 3}
    assert runtime_counts(broker.engine)["events/subscriptions/billing"]["active"] == 3


def test_dropped_duplicates_are_not_counted_as_sent(broker: Broker) -> None:
    broker.create_queue("dedup", requires_duplicate_detection=True)
    metered = Metered(broker)
    assert metered.send("dedup", Message("a", message_id="1"), Message("b", message_id="2")) == [1, 2]
    assert metered.send("dedup", Message("a", message_id="1"), Message("c", message_id="3")) == [None, 3]
    assert metered.counts() == {(SENT, "dedup"): 3}


def test_settlements_on_lost_locks_count_as_lock_losses(metered: Metered) -> None:
    metered.send("orders", "a", "b", "c")
    a, b, c = metered.receive("orders")
    metered.settle("orders", "complete", [a])
    results = metered.settle("orders", "abandon", [b]) + metered.settle("orders", "complete", [b, c])
    assert results[0] is None and isinstance(results[1], MessageLockLostError) and results[2] is None
    counts = metered.counts()
    assert counts[(COMPLETED, "orders")] == 2 and counts[(LOCK_LOST, "orders")] == 1


def test_an_operation_raising_a_lock_error_counts_a_lock_loss_and_propagates() -> None:
    meter = Meter()

    def renew(entity: str) -> None:
        raise MessageLockLostError("the lock was lost; receive the message again", entity=entity)

    with pytest.raises(MessageLockLostError):
        meter.run(lambda: renew("Sessions"), RenewSession("Sessions", SessionRef("s", b"t")))
    assert meter.take().counts == {(LOCK_LOST, "sessions"): 1}


def test_a_transaction_failing_on_a_lost_lock_counts_it_against_the_settled_entity(broker: Broker) -> None:
    broker.create_queue("in")
    metered = Metered(broker)
    metered.send("in", "a")
    (a,) = metered.receive("in")
    metered.settle("in", "abandon", [a])
    metered.counts()
    settle = Settle("IN", MAIN, [Settlement("complete", a.sequence_number, a.lock_token_bytes)])
    send = Send("in", [Message("x").to_envelope()])
    with pytest.raises(MessageLockLostError):
        metered.run(CommitTransaction("t1", broker.clock.now() + 60, [send, settle]))
    assert metered.counts() == {(LOCK_LOST, "in"): 1}, "nothing of the rolled-back transaction counts but the loss"


def test_expiry_in_housekeeping_counts_every_message_of_a_run(metered: Metered) -> None:
    ttl = timedelta(seconds=10)
    metered.send("orders", *(Message(f"m{i}", time_to_live=ttl) for i in range(20)))
    metered.broker.clock.advance(11)
    assert metered.meter.run(metered.broker.engine.housekeeping)
    assert metered.counts() == {(SENT, "orders"): 20, (EXPIRED, "orders"): 20}


def test_a_message_expiring_into_its_dead_letter_queue_counts_as_expired_and_dead_lettered(broker: Broker) -> None:
    broker.create_queue("q", dead_lettering_on_message_expiration=True)
    metered = Metered(broker)
    metered.send("q", Message("a", time_to_live=timedelta(seconds=5)), "b")
    broker.clock.advance(6)
    assert [m.body for m in metered.receive("q")] == [b"b"], "the receive screens the expired message out"
    assert metered.counts() == {(SENT, "q"): 2, (RECEIVED, "q"): 1, (EXPIRED, "q"): 1, (DEAD_LETTERED, "q"): 1}
    assert len(broker.peek("q", subq=DEAD_LETTER)) == 1


def test_abandoning_past_the_maximum_delivery_count_counts_a_dead_lettering(broker: Broker) -> None:
    broker.create_queue("q", max_delivery_count=2)
    metered = Metered(broker)
    metered.send("q", "a")
    metered.settle("q", "abandon", metered.receive("q"))
    metered.settle("q", "abandon", metered.receive("q"))
    assert metered.receive("q") == []
    assert metered.counts() == {(SENT, "q"): 1, (RECEIVED, "q"): 2, (DEAD_LETTERED, "q"): 1}


def test_a_failed_operation_keeps_none_of_its_engine_events(metered: Metered) -> None:
    def dead_letter_then_fail() -> None:
        metered.meter.event(DEAD_LETTERED, "orders", 3)
        raise InvalidOperationError("refused")

    with pytest.raises(InvalidOperationError):
        metered.meter.run(dead_letter_then_fail, Settle("orders", MAIN, []))
    assert metered.counts() == {}


def test_engine_events_outside_an_operation_are_kept(metered: Metered) -> None:
    metered.meter.event(EXPIRED, "orders", 2)
    metered.send("orders", "a")
    metered.meter.event(EXPIRED, "orders", 1)
    assert metered.counts() == {(EXPIRED, "orders"): 3, (SENT, "orders"): 1}


def test_a_transaction_counts_its_sends_and_settlements(broker: Broker) -> None:
    broker.create_queue("in")
    broker.create_queue("out")
    metered = Metered(broker)
    metered.send("in", "a", "b")
    a, b = metered.receive("in")
    settle = Settle("in", MAIN, [Settlement("complete", a.sequence_number, a.lock_token_bytes),
                                 Settlement("dead_letter", b.sequence_number, b.lock_token_bytes)])
    send = Send("OUT", [Message("x").to_envelope(), Message("y").to_envelope()])
    metered.run(CommitTransaction("t1", broker.clock.now() + 60, [settle, send]))
    counts = metered.counts()
    assert (counts[(COMPLETED, "in")], counts[(DEAD_LETTERED, "in")], counts[(SENT, "out")]) == (1, 1, 2)


def test_deferred_receives_count_as_received(metered: Metered) -> None:
    metered.send("orders", "a", "b")
    received = metered.receive("orders")
    metered.settle("orders", "defer", received)
    metered.counts()
    metered.run(ReceiveDeferred("orders", MAIN, [m.sequence_number for m in received], PEEK_LOCK))
    assert metered.counts() == {(RECEIVED, "orders"): 2}


def test_send_and_receive_calls_are_timed_with_the_meters_clock() -> None:
    ticks = iter([10.0, 10.5, 20.0, 20.25, 30.0, 30.1])
    meter = Meter(clock=lambda: next(ticks))
    meter.run(lambda: [1], Send("Q", [{}]))
    meter.run(lambda: {"messages": [], "more": False}, Receive("q", MAIN, 1, PEEK_LOCK))
    meter.run(lambda: [], Peek("q", MAIN, 0, 1))
    assert meter.take().latencies == {(SEND, "q"): [0.5], (RECEIVE, "q"): [0.25]}


def test_other_operations_count_nothing(metered: Metered) -> None:
    metered.run(ListEntities())
    metered.run(Runtime("orders"))
    assert metered.counts() == {}


def test_tallies_merge() -> None:
    first, second = Tally(), Tally()
    first.add(SENT, "q", 2)
    second.add(SENT, "q", 3)
    second.add(SENT, "r", 0)
    second.observe(SEND, "q", 0.1)
    first.merge(second)
    assert (first.counts, first.latencies) == ({(SENT, "q"): 5}, {(SEND, "q"): [0.1]})


def test_runtime_counts_cover_the_entities_this_partition_hosts(make_broker: Callable[..., Broker]) -> None:
    partitions = [make_broker(index, 2) for index in range(2)]
    for p in partitions:
        p.create_queue("spread", enable_partitioning=True)
        p.create_queue("whole")
    home = next(p for p in partitions if "whole" in runtime_counts(p.engine))
    home.send("whole", "a", "b")
    assert runtime_counts(home.engine)["whole"] == {"active": 2, "scheduled": 0, "dead_letter": 0}
    assert [sorted(runtime_counts(p.engine)) for p in partitions].count(["spread"]) == 1


def test_a_deleted_entity_reads_zero() -> None:
    counts = {"q": {"active": 4, "scheduled": 1, "dead_letter": 0}}
    assert with_vanished(counts, ["q", "gone"]) == {
        "q": {"active": 4, "scheduled": 1, "dead_letter": 0}, "gone": {"active": 0, "scheduled": 0, "dead_letter": 0}}


def exported_names() -> dict[str, set[str]]:
    """The sample names Ray's endpoint shows for each metric a partition registers (Ray adds `ray_`,
    `_total` to counters, `_bucket`, `_sum` and `_count` to histograms)."""
    from actors import metrics

    names = {f"ray_{name}": {f"ray_{name}_total"} for name, _ in
             (*metrics.COUNTER_METRICS.values(), metrics.LEADER_CHANGES_METRIC)}
    names.update({f"ray_{name}": {f"ray_{name}"} for name, _ in
                  (*metrics.GAUGE_METRICS.values(), metrics.UP_METRIC, metrics.PARTITIONS_METRIC,
                   metrics.REPLICA_LAG_METRIC, metrics.IN_SYNC_METRIC)})
    names.update({f"ray_{name}": {f"ray_{name}_{suffix}" for suffix in ("bucket", "sum", "count")}
                  for name, _ in metrics.LATENCY_METRICS.values()})
    return names


def test_the_dashboard_plots_every_series_the_partitions_export_and_no_other() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in re.findall(r"\bray_broker_\w+", expr)}
    exported = exported_names()
    assert used <= set().union(*exported.values()), used - set().union(*exported.values())
    assert [metric for metric, samples in exported.items() if not samples & used] == []
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
