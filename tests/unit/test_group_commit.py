"""Group commit on one partition: concurrent callers on real threads share store commits over a
real engine and store (in memory and on file), each answered only once its group is committed;
with no Ray."""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence

import pytest

from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.engine.group_commit import Group, GroupCommitter
from ray_broker.engine.operations import operation
from ray_broker.engine.partition import MAIN, PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.errors import MessagingEntityNotFoundError, NotLeaderError
from ray_broker.wire import ListEntities, Send

from .conftest import queue_definition

class Orphan(NamedTuple):
    """Work that inserts a row whose deferred foreign key fails the group's commit."""


WAIT_S = 10.0
"""The longest any step of these tests waits for another thread."""


class CommitGate:
    """Counts a store's commits (through SQLite's statement trace), makes each take `delay_s`
    longer (a slower disk), and, while closed, holds each COMMIT statement as it starts until the
    test lets it through."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.commits = 0
        self.delay_s = 0.0
        self.reached = threading.Semaphore(0)
        """Released once for every COMMIT that reaches the gate."""
        self._permits = threading.Semaphore(0)
        self._open = True
        db.set_trace_callback(self._trace)

    def _trace(self, sql: str) -> None:
        if sql != "COMMIT":
            return
        self.commits += 1
        self.reached.release()
        time.sleep(self.delay_s)
        if not self._open:
            assert self._permits.acquire(timeout=WAIT_S), "a commit was held and never let through"

    def close(self) -> None:
        """Hold every COMMIT from now on until let through."""
        self._open = False

    def wait_reached(self) -> None:
        """Wait until a COMMIT reaches the gate."""
        assert self.reached.acquire(timeout=WAIT_S), "no commit reached the gate"

    def let_through(self) -> None:
        """Let one held COMMIT go on."""
        self._permits.release()

    def open(self) -> None:
        """Let the held COMMIT and every later one go on."""
        self._open = True
        self._permits.release()


class Caller(threading.Thread):
    """A caller on a thread of its own, submitting `calls` once."""

    def __init__(self, committer: GroupCommitter, calls: Sequence[Any]) -> None:
        super().__init__(daemon=True)
        self._committer = committer
        self._calls = calls
        self.results: list[Any] | None = None
        self.error: BaseException | None = None
        self.answered = threading.Event()

    def run(self) -> None:
        try:
            self.results = self._committer.submit(self._calls)
        except BaseException as exc:  # noqa: BLE001 - kept for the test to look at
            self.error = exc
        self.answered.set()

    def outcome(self) -> list[Any]:
        """The results (or the error raised), once answered."""
        assert self.answered.wait(WAIT_S), "a caller was never answered"
        if self.error is not None:
            raise self.error
        assert self.results is not None
        return self.results


class Partition:
    """An engine over a store, its committer (which records every group it commits) and a gate
    on its commits."""

    def __init__(self, store: Store, max_operations: int = 256) -> None:
        self.engine = PartitionEngine(0, 1, store, ManualClock(1_700_000_000.0))
        self.engine.create_entity(queue_definition("q"))
        self.groups: list[Group] = []
        self.committer = GroupCommitter(self.engine, committed=self.groups.append, max_operations=max_operations)
        self.gate = CommitGate(store.db)

    def call(self, calls: Sequence[Any]) -> Caller:
        """Start a caller submitting `calls`."""
        caller = Caller(self.committer, calls)
        caller.start()
        return caller

    def queue_behind_held_commit(self, calls: list[Sequence[Any]]) -> tuple[Caller, list[Caller]]:
        """Start a first caller whose commit the gate holds, then queue one caller per entry of
        `calls` behind it, each queued before the next starts (arrival order is list order)."""
        self.gate.close()
        first = self.call([send("first")])
        self.gate.wait_reached()
        queued = []
        for i, work in enumerate(calls, start=1):
            queued.append(self.call(work))
            wait_for(lambda: self.committer.queued == i)
        return first, queued

    def active(self) -> int:
        """Active messages in `q`."""
        return int(self.engine.runtime("q")["active"])


def send(body: str, entity: str = "q") -> Send:
    """The call that sends one message."""
    return Send(entity, [Message(body).to_envelope()])


def wait_for(condition: Any) -> None:
    """Wait until `condition()` holds."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "a condition never held"
        time.sleep(0.001)


@pytest.fixture(params=["memory", "normal", "fsync"])
def partition(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Partition]:
    """A partition with one queue `q`, over an in-memory store or a file store of each durability."""
    durability = request.param
    store = Store(None if durability == "memory" else str(tmp_path / "p.sqlite3"), durability)
    yield Partition(store)
    store.close()


def test_callers_that_meet_a_commit_under_way_share_the_next_one(partition: Partition) -> None:
    first, queued = partition.queue_behind_held_commit([[send(f"m{i}")] for i in range(31)])
    partition.gate.open()
    assert first.outcome() == [[1]]
    assert [c.outcome() for c in queued] == [[[i + 2]] for i in range(31)]
    assert partition.gate.commits == 2
    assert [len(g) for g in partition.groups] == [1, 31]
    assert partition.active() == 32


def test_many_free_running_callers_need_far_fewer_commits(partition: Partition) -> None:
    partition.gate.delay_s = 0.005
    callers = [partition.call([send(f"t{t}-{i}") for i in range(3)]) for t in range(16) for _ in range(5)]
    sequence_numbers = sorted(n for c in callers for result in c.outcome() for n in result)
    assert sequence_numbers == list(range(1, 16 * 5 * 3 + 1))
    assert partition.gate.commits == len(partition.groups) <= len(callers) // 2
    assert sum(len(g) for g in partition.groups) == len(callers)


def test_an_operation_that_raises_ends_its_callers_work_only(partition: Partition) -> None:
    before = Send("q", [Message("b-before").to_envelope()])
    after = Send("q", [Message("b-after").to_envelope()])
    first, (a, b, c) = partition.queue_behind_held_commit(
        [[send("a")], [before, send("b-fails", entity="missing"), after], [send("c")]])
    partition.gate.open()
    first.outcome()
    assert a.outcome() == [[2]]
    with pytest.raises(MessagingEntityNotFoundError):
        b.outcome()
    assert c.outcome() == [[4]]
    assert partition.gate.commits == 2
    peeked = partition.engine.peek("q", MAIN, 0, 100)
    assert [r["sequence_number"] for r in peeked] == [1, 2, 3, 4]
    assert partition.active() == 4


def test_a_failed_commit_fails_its_whole_group_and_the_engine_goes_on(partition: Partition) -> None:
    db = partition.engine.db
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)")

    def execute(request: Any) -> Any:
        if isinstance(request, Orphan):
            with partition.engine.unit_of_work() as conn:
                conn.execute("INSERT INTO children (parent) VALUES (7)")
            return None
        return operation(request).run(partition.engine, request)

    partition.committer = GroupCommitter(partition.engine, execute, committed=partition.groups.append)
    first, queued = partition.queue_behind_held_commit([[send("a")], [Orphan()], [send("c")]])
    partition.gate.open()
    assert first.outcome() == [[1]]
    for caller in queued:
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            caller.outcome()
    assert len(partition.groups) == 1
    assert partition.active() == 1
    assert db.execute("SELECT count(*) FROM children").fetchone()[0] == 0
    assert partition.committer.submit([send("after")]) == [[2]]
    assert partition.active() == 2


def test_groups_keep_arrival_order(partition: Partition) -> None:
    work = [[send(f"m{i}")] for i in range(12)]
    first, queued = partition.queue_behind_held_commit(work)
    partition.gate.open()
    first.outcome()
    assert [c.outcome()[0][0] for c in queued] == list(range(2, 14))
    assert [s.requests for s in partition.groups[1].submissions] == work


def test_no_caller_is_answered_before_the_commit_that_holds_its_work(partition: Partition) -> None:
    partition.gate.close()
    first = partition.call([send("first")])
    partition.gate.wait_reached()
    queued = [partition.call([send(f"m{i}")]) for i in range(4)]
    wait_for(lambda: partition.committer.queued == 4)
    time.sleep(0.1)
    assert not first.answered.is_set() and not any(c.answered.is_set() for c in queued)
    partition.gate.let_through()
    assert first.outcome() == [[1]]
    partition.gate.wait_reached()
    time.sleep(0.1)
    assert not any(c.answered.is_set() for c in queued)
    partition.gate.open()
    assert sorted(c.outcome()[0][0] for c in queued) == [2, 3, 4, 5]


def test_committed_work_is_in_the_file_when_its_caller_is_answered(tmp_path: Path) -> None:
    path = str(tmp_path / "p.sqlite3")
    store = Store(path, "fsync")
    partition = Partition(store)
    reader = sqlite3.connect(path)
    try:
        first, queued = partition.queue_behind_held_commit([[send(f"m{i}")] for i in range(3)])
        count = "SELECT count(*) FROM messages"
        assert reader.execute(count).fetchone()[0] == 0
        partition.gate.open()
        first.outcome()
        for caller in queued:
            caller.outcome()
        assert reader.execute(count).fetchone()[0] == 4
    finally:
        reader.close()
        store.close()


def test_a_group_holds_at_most_its_bound_of_operations() -> None:
    store = Store(None, "memory")
    partition = Partition(store, max_operations=4)
    work = [[send(f"m{i}")] for i in range(9)] + [[send("x"), send("y"), send("z"), send("w"), send("v")]]
    first, queued = partition.queue_behind_held_commit(work)
    partition.gate.open()
    first.outcome()
    assert [len(c.outcome()) for c in queued] == [1] * 9 + [5]
    assert [sum(1 for _ in g.requests()) for g in partition.groups] == [1, 4, 4, 1, 5]
    assert partition.gate.commits == 5
    store.close()


def test_the_lock_serializes_groups_with_the_engines_other_users() -> None:
    lock = threading.RLock()
    store = Store(None, "memory")
    engine = PartitionEngine(0, 1, store, ManualClock(1_700_000_000.0))
    engine.create_entity(queue_definition("q"))
    committer = GroupCommitter(engine, lock=lock)
    with lock:
        caller = Caller(committer, [send("m")])
        caller.start()
        time.sleep(0.1)
        assert not caller.answered.is_set()
        assert engine.runtime("q")["active"] == 0
    assert caller.outcome() == [[1]]
    store.close()


def test_a_group_whose_commit_is_not_made_durable_gets_the_error_instead_of_its_results() -> None:
    engine = PartitionEngine(0, 1, Store(None, "memory"))

    def not_durable() -> None:
        raise NotLeaderError("the followers did not answer")

    committer = GroupCommitter(engine, durable=not_durable)
    with pytest.raises(NotLeaderError, match="followers"):
        committer.submit([ListEntities()])
    assert committer.queued == 0
