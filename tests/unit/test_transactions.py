"""Transactions on one partition: a commit applies every operation or none, is recorded against
retries, and is refused past its deadline or above 100 operations; with no Ray."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message
from ray_broker.engine.partition import DEAD_LETTER, DEFERRED
from ray_broker.engine.scheduling import TRANSACTION_MEMORY_S
from ray_broker.errors import InvalidOperationError, MessageLockLostError, TransactionTimeoutError
from ray_broker.message import ReceivedMessage
from ray_broker.protocol import MAIN, MAX_TRANSACTION_OPERATIONS, PEEK_LOCK, TRANSACTION_TIMEOUT_S
from ray_broker.wire import Receive, Send, Settle, Settlement

from .conftest import Broker


def send_op(entity: str, *bodies: str, key: str = "k") -> Send:
    """A transaction's send of messages with these bodies, all with partition key `key`."""
    return Send(entity, [Message(b, partition_key=key).to_envelope() for b in bodies])


def settle_op(entity: str, action: str, message: ReceivedMessage, *extra: Any) -> Settle:
    """A transaction's settlement of one received message."""
    assert message.lock_token_bytes is not None
    return Settle(entity, MAIN, [Settlement(action, message.sequence_number, message.lock_token_bytes, *extra)])


def active(broker: Broker, entity: str) -> int:
    return int(broker.engine.runtime(entity)["active"])


def deadline(broker: Broker) -> float:
    return broker.clock.now() + TRANSACTION_TIMEOUT_S


@pytest.fixture
def pipeline(broker: Broker) -> Broker:
    """Queues "in" (holding "a" and "b") and "out"."""
    broker.create_queue("in")
    broker.create_queue("out")
    broker.send("in", "a", "b")
    return broker


def test_a_commit_applies_sends_and_settlements_together(pipeline: Broker) -> None:
    a, b = pipeline.receive("in")
    results = pipeline.engine.commit_transaction("t1", deadline(pipeline), [
        settle_op("in", "complete", a), send_op("out", "A1", "A2"), settle_op("in", "defer", b)])
    assert results == [[None], [1, 2], [None]]
    assert [m.body for m in pipeline.receive("out")] == [b"A1", b"A2"]
    assert pipeline.engine.runtime("in")["active"] == 1
    assert [m.state for m in pipeline.peek("in")] == [DEFERRED]
    assert pipeline.engine.integrity_check()["ok"]


def test_a_failing_settlement_undoes_the_whole_transaction(pipeline: Broker) -> None:
    a, b = pipeline.receive("in")
    pipeline.settle("in", "abandon", b)
    with pytest.raises(MessageLockLostError):
        pipeline.engine.commit_transaction("t1", deadline(pipeline), [
            settle_op("in", "complete", a), send_op("out", "A1"), settle_op("in", "complete", b)])
    assert active(pipeline, "out") == 0
    assert pipeline.settle("in", "complete", a) is None, "a is still locked for its receiver"
    assert pipeline.engine.integrity_check()["ok"]
    pipeline.engine.commit_transaction("t1", deadline(pipeline), [send_op("out", "later")])
    assert [m.body for m in pipeline.receive("out")] == [b"later"], "a failed commit is not recorded"


def test_a_repeated_commit_answers_with_its_first_results(pipeline: Broker) -> None:
    a, _ = pipeline.receive("in")
    operations = [settle_op("in", "complete", a), send_op("out", "A1")]
    first = pipeline.engine.commit_transaction("t1", deadline(pipeline), operations)
    pipeline.clock.advance(TRANSACTION_TIMEOUT_S * 2)
    assert pipeline.engine.commit_transaction("t1", 0.0, operations) == first, "even past the deadline"
    assert active(pipeline, "out") == 1
    pipeline.clock.advance(TRANSACTION_MEMORY_S)
    pipeline.engine.housekeeping()
    with pytest.raises(TransactionTimeoutError):
        pipeline.engine.commit_transaction("t1", 0.0, operations)


def test_a_commit_past_its_deadline_is_rolled_back(pipeline: Broker) -> None:
    a, _ = pipeline.receive("in")
    due = deadline(pipeline)
    pipeline.clock.advance(TRANSACTION_TIMEOUT_S + 1)
    with pytest.raises(TransactionTimeoutError, match="rolled back"):
        pipeline.engine.commit_transaction("t1", due, [settle_op("in", "complete", a), send_op("out", "A1")])
    assert active(pipeline, "out") == 0
    assert pipeline.engine.runtime("in")["active"] == 2


def test_at_most_one_hundred_operations(broker: Broker) -> None:
    broker.create_queue("q")
    bodies = [str(i) for i in range(MAX_TRANSACTION_OPERATIONS)]
    with pytest.raises(InvalidOperationError, match="at most 100"):
        broker.engine.commit_transaction("t1", deadline(broker), [send_op("q", *bodies), send_op("q", "one more")])
    assert active(broker, "q") == 0
    broker.engine.commit_transaction("t2", deadline(broker), [send_op("q", *bodies)])
    assert active(broker, "q") == MAX_TRANSACTION_OPERATIONS


def test_abandon_dead_letter_and_renew_in_a_transaction(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a", "b", "c")
    a, b, c = broker.receive("q")
    broker.clock.advance(10)
    results = broker.engine.commit_transaction("t1", deadline(broker), [
        settle_op("q", "abandon", a), settle_op("q", "dead_letter", b, "bad", "why"), settle_op("q", "renew", c)])
    assert results[:2] == [[None], [None]] and results[2][0] == broker.clock.now() + 60
    (dead,) = broker.receive("q", subq=DEAD_LETTER)
    assert (dead.body, dead.dead_letter_reason) == (b"b", "bad")
    assert [m.body for m in broker.receive("q")] == [b"a"]


def test_malformed_commits_are_refused(broker: Broker) -> None:
    broker.create_queue("q")
    for transaction_id, operations in (("", []), (7, []), ("t", [Receive("q", MAIN, 1, PEEK_LOCK)]), ("t", "send")):
        with pytest.raises(InvalidOperationError):
            broker.engine.commit_transaction(transaction_id, deadline(broker), operations)  # type: ignore[arg-type]


CRASH_IN_COMMIT = """
import os, sys
from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.engine import settling
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.wire import Send, Settle, Settlement
sys.path.insert(0, {tests!r})
from unit.conftest import queue_definition

engine = PartitionEngine(0, 1, Store({path!r}, "normal"), ManualClock(1_700_000_000.0))
engine.create_entity(queue_definition("in"))
engine.create_entity(queue_definition("out"))
engine.send("in", [Message("a").to_envelope()])
message = engine.receive("in", 0, 1)["messages"][0]
settling.settle = lambda *args: os._exit(17)  # the process dies between the send and the settlement
engine.commit_transaction("t1", 1_700_000_100.0, [
    Send("out", [Message("A").to_envelope()]),
    Settle("in", 0, [Settlement("complete", message["sequence_number"], message["lock_token"])])])
"""


def test_a_crash_in_the_middle_of_a_commit_leaves_nothing_applied(make_broker: Callable[..., Broker],
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    script = CRASH_IN_COMMIT.format(path=str(path), tests=str(Path(__file__).resolve().parents[1]))
    crashed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True)
    assert crashed.returncode == 17, crashed.stderr
    reopened = make_broker(path=path)
    assert active(reopened, "out") == 0
    assert reopened.engine.runtime("in")["active"] == 1
    assert reopened.engine.integrity_check()["ok"]
