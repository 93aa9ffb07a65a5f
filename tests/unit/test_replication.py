"""Replicated partitions without Ray: a leader's store records the writes of each committed unit of
work as a change; a follower's store that applies the changes in order holds the leader's rows and,
once an engine runs over it, serves what the leader would. Also: recording and its savepoints,
positions and epochs, divergence, the change log, full copies, and the schema migration."""
from __future__ import annotations

import pickle
import random
import sqlite3
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message, codec
from ray_broker.clock import ManualClock
from ray_broker.engine import replication
from ray_broker.engine.change_log import ChangeLog
from ray_broker.engine.changes import READ, ROW_WRITE, WRITE, Change, Statement, statement_kind
from ray_broker.engine.group_commit import Group, GroupCommitter
from ray_broker.engine.partition import (
    DEAD_LETTER,
    DEFERRED,
    MAIN,
    PEEK_LOCK,
    RECEIVE_AND_DELETE,
    PartitionEngine,
)
from ray_broker.engine.queries import EpochStart
from ray_broker.engine.replication import divergence
from ray_broker.engine.store import SCHEMA_VERSION, Store
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessagingEntityNotFoundError,
    OutOfOrderChangeError,
    ReplicationError,
    ServiceBusError,
    StaleEpochError,
)
from ray_broker.filters import CorrelationFilter, SqlFilter, SqlRuleAction, rule_to_wire
from ray_broker.wire import Send, SessionRef, Settle, Settlement

from .conftest import queue_definition
from .test_topics import rule, subscription_definition, topic_definition

T = 1_700_000_000.0
SUBSCRIPTIONS = ("news/subscriptions/all", "news/subscriptions/high", "news/subscriptions/red")
RECEIVABLE = ("q", "sq", "plain", "src", *SUBSCRIPTIONS)
ACTIONS = ("complete", "complete", "abandon", "defer", "dead_letter", "renew")


def contents(store: Store, skip: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, ordered by all their columns."""
    tables = [name for (name,) in store.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    found = {}
    for table in sorted(set(tables) - set(skip)):
        width = len(store.connection.execute(f"SELECT * FROM {table} LIMIT 0").description)
        order = ", ".join(str(column) for column in range(1, width + 1))
        found[table] = store.connection.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    return found


def shipped(change: Change) -> Change:
    """A change as a follower receives it: encoded, packed with msgpack, unpacked and decoded."""
    return Change.decode(codec.unpackb(codec.packb(change.encode())))


def ship(leader: Store, follower: Store) -> list[Change]:
    """Apply the leader's new changes to the follower, in order, as they cross the wire."""
    changes = leader.take_changes()
    for change in changes:
        assert replication.apply(follower, shipped(change))
    return changes


def insert(db: sqlite3.Connection, entity: str, next_seq: int = 1) -> None:
    """Write one counter row (a write that stands for any)."""
    db.execute("INSERT INTO counters (entity, next_seq) VALUES (:entity, :next_seq)",
               {"entity": entity, "next_seq": next_seq})


# ---------------------------------------------------------------------------- the property: a follower keeps up


class Workload:
    """A random workload on an engine over a recording leader store: queues (one with duplicate
    detection, expiry to dead letters and a delivery limit; one with sessions; one forwarding), a
    topic with filtered subscriptions, and every operation the engine offers, some failing."""

    def __init__(self, seed: int, leader: Store) -> None:
        self.rng = random.Random(seed)
        self.clock = ManualClock(T)
        self.engine = PartitionEngine(0, 1, leader, self.clock)
        self.locks: list[tuple[str, int, int, bytes, SessionRef | None]] = []
        self.sessions: dict[str, bytes] = {}
        self.scheduled: list[tuple[str, int]] = []
        self.units = 0
        engine = self.engine
        engine.create_entity(queue_definition("q", lock_duration=30, max_delivery_count=3,
                                              requires_duplicate_detection=True,
                                              duplicate_detection_history_time_window=120,
                                              dead_lettering_on_message_expiration=True))
        engine.create_entity(queue_definition("sq", requires_session=True, lock_duration=20))
        engine.create_entity(queue_definition("plain"))
        engine.create_entity(queue_definition("src", forward_to="elsewhere"))
        news = topic_definition("news")
        engine.create_entity(news)
        engine.create_entity(subscription_definition(news, "all"))
        engine.create_entity(subscription_definition(news, "high", [
            rule("high", SqlFilter("priority > 5"), SqlRuleAction("SET user.tag = 'hot'"))]))
        engine.create_entity(subscription_definition(news, "red", [rule("red", CorrelationFilter(subject="red"))]))

    def step(self) -> None:
        """One random operation (or group of them)."""
        operations: list[tuple[Callable[[], Any], int]] = [
            (self.send, 6), (self.receive, 5), (self.settle, 5), (self.sessions_step, 3), (self.receive_deferred, 1),
            (self.cancel, 1), (self.advance, 2), (self.transaction, 2), (self.forward, 2), (self.group, 2),
            (self.failed_unit, 1), (self.manage, 1)]
        operation = self.rng.choices([op for op, _ in operations], [w for _, w in operations])[0]
        self.attempt(operation)

    @staticmethod
    def attempt(operation: Callable[[], Any]) -> None:
        """Run an operation; the broker errors it may meet are part of the workload."""
        with suppress(ServiceBusError):
            operation()

    def envelopes(self, entity: str, count: int) -> list[dict[str, Any]]:
        """A batch: half of them plain (alike messages, stored as runs when large), the others
        with message ids (duplicates among them), times to live and schedules of their own."""
        rng, now = self.rng, self.clock.now()
        plain = rng.random() < 0.5
        ttl = rng.choice([None, timedelta(seconds=rng.uniform(5, 200))])
        found = []
        for _ in range(count):
            options: dict[str, Any] = {"time_to_live": ttl}
            if entity == "sq":
                options["session_id"] = rng.choice(["s1", "s2", "s3"])
            if not plain and entity == "q" and rng.random() < 0.4:
                options["message_id"] = f"m{rng.randrange(40)}"
            if not plain and rng.random() < 0.3:
                options["time_to_live"] = timedelta(seconds=rng.uniform(5, 200))
            if not plain and rng.random() < 0.1:
                options["scheduled_enqueue_time_utc"] = datetime.fromtimestamp(now + rng.uniform(1, 120), timezone.utc)
            if entity == "news":
                options["subject"] = rng.choice([None, "red", "blue"])
                options["application_properties"] = {"priority": rng.randrange(10)}
            found.append(Message(rng.randbytes(rng.randrange(1, 200)), **options).to_envelope())
        return found

    def send(self) -> None:
        entity = self.rng.choice(["q", "q", "sq", "news", "news", "src", "plain"])
        envelopes = self.envelopes(entity, self.rng.choice([1, 2, 5, 17, 40, 100]))
        producer = ("p1", self.rng.randrange(4)) if self.rng.random() < 0.2 else None
        seqs = self.engine.send(entity, envelopes, producer)
        self.scheduled += [(entity, seq) for seq, e in zip(seqs, envelopes) if seq is not None and e.get("scheduled")]

    def hold(self, entity: str, subq: int, records: list[dict[str, Any]], session: SessionRef | None = None) -> None:
        self.locks += [(entity, subq, r["sequence_number"], r["lock_token"], session)
                       for r in records if r.get("lock_token") is not None]

    def receive(self) -> None:
        entity = self.rng.choice(["q", "plain", *SUBSCRIPTIONS])
        subq = DEAD_LETTER if self.rng.random() < 0.15 else MAIN
        mode = RECEIVE_AND_DELETE if self.rng.random() < 0.15 else PEEK_LOCK
        self.hold(entity, subq, self.engine.receive(entity, subq, self.rng.randint(1, 60), mode)["messages"])

    def settle(self) -> None:
        if not self.locks:
            return
        entity, subq, _, _, session = self.rng.choice(self.locks)
        mine = [lock for lock in self.locks if lock[:2] == (entity, subq) and lock[4] == session]
        chosen = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 12)))
        ops = []
        for _, _, seq, token, _ in chosen:
            if self.rng.random() < 0.1:
                token = bytes(16)
            ops.append(Settlement(self.rng.choice(ACTIONS), seq, token, "Reason", "why"))
        results = self.engine.settle(entity, subq, ops, session)
        settled = {(op.sequence_number, op.lock_token) for op, result in zip(ops, results)
                   if result is None and op.action != "renew"}
        self.locks = [lock for lock in self.locks if not (lock[:2] == (entity, subq) and lock[2:4] in settled)]

    def sessions_step(self) -> None:
        rng, engine = self.rng, self.engine
        if not self.sessions or rng.random() < 0.3:
            got = engine.accept_session("sq", rng.choice([None, "s1", "s2", "s3"]))
            if got is not None:
                self.sessions[got["session_id"]] = got["lock_token"]
            return
        session_id, token = rng.choice(sorted(self.sessions.items()))
        choice = rng.choice(["receive", "receive", "renew", "state", "release"])
        if choice == "receive":
            ref = SessionRef(session_id, token)
            self.hold("sq", MAIN, engine.receive("sq", MAIN, rng.randint(1, 10), PEEK_LOCK, ref)["messages"], ref)
        elif choice == "renew":
            engine.renew_session("sq", session_id, token)
        elif choice == "state":
            engine.set_session_state("sq", session_id, token, rng.choice([None, rng.randbytes(8)]))
        else:
            del self.sessions[session_id]
            engine.release_session("sq", session_id, token)

    def receive_deferred(self) -> None:
        deferred = [m["sequence_number"] for m in self.engine.peek("q", MAIN, 0, 1000) if m["state"] == DEFERRED]
        if deferred:
            chosen = self.rng.sample(deferred, min(3, len(deferred)))
            mode = self.rng.choice([PEEK_LOCK, RECEIVE_AND_DELETE])
            self.hold("q", MAIN, self.engine.receive_deferred("q", MAIN, chosen, mode))

    def cancel(self) -> None:
        if self.scheduled:
            entity, seq = self.scheduled.pop(self.rng.randrange(len(self.scheduled)))
            self.engine.cancel_scheduled(entity, [seq])

    def advance(self) -> None:
        self.clock.advance(self.rng.choice([1, 5, 25, 60, 200]))
        self.engine.housekeeping()

    def transaction(self) -> None:
        plain = [lock for lock in self.locks if lock[0] == "plain" and lock[1] == MAIN]
        ops: list[Send | Settle] = [Send("q", self.envelopes("q", self.rng.randint(1, 5)))]
        if plain:
            _, _, seq, token, _ = self.rng.choice(plain)
            ops.append(Settle("plain", MAIN, [Settlement("complete", seq, token if self.rng.random() < 0.8
                                                         else bytes(16))]))
        self.engine.commit_transaction(f"tx{self.rng.randrange(30)}", self.clock.now() + 60, ops)

    def forward(self) -> None:
        transfer = self.engine.take_transfer(self.rng.randint(1, 30))
        if transfer is None:
            return
        fate = self.rng.choice(["done", "done", "failed", "pending"])
        if fate == "done":
            self.engine.transfer_done(transfer["id"])
        elif fate == "failed":
            self.engine.transfer_failed(transfer["id"], "Unreachable", "no such entity")

    def group(self) -> None:
        """Several callers' work in one unit of work, as a group commit runs it: each operation
        that fails undoes only its own writes, as does a block that fails after writing."""
        store = self.engine.store
        with self.engine.unit_of_work():
            callers = [self.send, self.receive, self.settle, self.cancel, self.forward, self.transaction]
            for operation in self.rng.sample(callers, 3):
                self.attempt(operation)
            with suppress(RuntimeError), store.transaction():
                self.engine.send("plain", self.envelopes("plain", 3))
                raise RuntimeError("a caller's work fails after writing")
            self.attempt(lambda: self.engine.receive("nowhere", MAIN, 1))
        self.units += 1

    def failed_unit(self) -> None:
        """A unit of work that fails as a whole: nothing of it is committed, nor shipped."""
        store = self.engine.store
        position = store.replication_position
        with suppress(RuntimeError), self.engine.unit_of_work():
            self.send()
            raise RuntimeError("the whole unit fails")
        assert store.take_changes() == [] and store.replication_position == position

    def manage(self) -> None:
        engine, rng = self.engine, self.rng
        choice = rng.choice(["rule", "unrule", "update", "temporary"])
        if choice == "rule":
            engine.add_rule("news/subscriptions/red", rule_to_wire(rule(f"r{rng.randrange(3)}", SqlFilter(
                f"priority = {rng.randrange(10)}"))))
        elif choice == "unrule":
            engine.remove_rule("news/subscriptions/red", f"r{rng.randrange(3)}")
        elif choice == "update":
            engine.update_entity(queue_definition("plain", lock_duration=rng.choice([10, 30, 60])))
        else:
            engine.create_entity(queue_definition("temporary"))
            engine.send("temporary", self.envelopes("temporary", 20))
            engine.delete_entity("temporary")


def outcomes(results: list[Any]) -> list[Any]:
    """Settlement results, comparable: each error by its type."""
    return [type(r).__name__ if isinstance(r, BaseException) else r for r in results]


def check_serves_the_same(workload: Workload, follower: Store) -> None:
    """An engine over the follower's store serves what the leader's does: the same messages to
    peek, the locks the leader handed out held under the same tokens until the same times (and
    settled by them there), the same messages to receive."""
    leader = workload.engine
    engine = PartitionEngine(0, 1, follower, workload.clock)
    assert engine.integrity_check() == {"ok": True, "problems": []}
    for entity in RECEIVABLE:
        for subq in (MAIN, DEAD_LETTER):
            assert engine.peek(entity, subq, 0, 10_000) == leader.peek(entity, subq, 0, 10_000)
    locked = "SELECT id, lock_token, locked_until FROM messages WHERE locked_until > ? ORDER BY id"
    now = workload.clock.now()
    assert follower.connection.execute(locked, (now,)).fetchall() == leader.db.execute(locked, (now,)).fetchall() != []
    completed = 0
    for entity, subq, seq, token, session in workload.locks:
        if session is None and leader.state.settled.action(token) is None:  # settled ones only the leader remembers
            ops = [Settlement("complete", seq, token)]
            outcome = outcomes(engine.settle(entity, subq, ops))
            assert outcome == outcomes(leader.settle(entity, subq, ops))
            completed += outcome == [None]
    assert completed >= 20, "the locks the leader handed out settle on the follower"
    assert contents(follower, skip=("replication", "epochs")) == contents(leader.store, skip=("replication", "epochs"))
    for entity in ("q", "plain", *SUBSCRIPTIONS):
        got, expected = engine.receive(entity, MAIN, 50), leader.receive(entity, MAIN, 50)
        assert [(m["sequence_number"], m["payload"], m["locked_until"]) for m in got["messages"]] == [
            (m["sequence_number"], m["payload"], m["locked_until"]) for m in expected["messages"]]


def stores(tmp_path: Path, kind: str) -> tuple[Store, Store]:
    """A recording leader store and a follower store, in memory or in files."""
    if kind == "memory":
        return Store(None, "memory", replicated=True), Store(None, "memory")
    return Store(str(tmp_path / "leader.db"), replicated=True), Store(str(tmp_path / "follower.db"))


@pytest.mark.parametrize("seed,kind", [(1, "memory"), (2, "memory"), (3, "memory"), (4, "memory"), (5, "file"),
                                       (6, "file")])
def test_a_follower_applying_every_change_holds_the_leaders_rows(seed: int, kind: str, tmp_path: Path) -> None:
    leader, follower = stores(tmp_path, kind)
    replication.begin_epoch(leader, 1)
    workload = Workload(seed, leader)
    ship(leader, follower)
    for _ in range(200):
        groups = workload.units
        workload.step()
        changes = ship(leader, follower)
        assert len(changes) <= 1 or workload.units == groups, "a unit of work ships as one change at most"
        assert contents(follower) == contents(leader)
    for entity in ("q", "plain", *SUBSCRIPTIONS):
        workload.hold(entity, MAIN, workload.engine.receive(entity, MAIN, 20)["messages"])
    ship(leader, follower)
    assert follower.replication_position == leader.replication_position
    assert leader.replication_position.position > 120
    assert follower.epoch_history() == leader.epoch_history() == [EpochStart(1, 1)]
    check_serves_the_same(workload, follower)
    leader.close()
    follower.close()


def test_a_group_commit_ships_one_change_after_its_commit_before_answering() -> None:
    leader, follower = Store(None, "memory", replicated=True), Store(None, "memory")
    engine = PartitionEngine(0, 1, leader, ManualClock(T))
    engine.create_entity(queue_definition("q"))
    ship(leader, follower)
    rounds: list[tuple[int, list[int]]] = []

    def committed(group: Group) -> None:
        rounds.append((group.number, [c.position for c in ship(leader, follower)]))

    committer = GroupCommitter(engine, committed=committed)
    envelopes = [Message(body).to_envelope() for body in ("a", "b")]
    assert committer.submit([Send("q", envelopes), Send("q", envelopes[:1])]) == [[1, 2], [3]]
    assert rounds == [(1, [2])] and contents(follower) == contents(leader)
    with pytest.raises(MessagingEntityNotFoundError):
        committer.submit([Send("q", envelopes), Send("nowhere", envelopes), Send("q", envelopes)])
    assert rounds == [(1, [2]), (2, [3])], "the work before the failed operation ships"
    assert contents(follower) == contents(leader)
    assert engine.runtime("q")["active"] == 5


# ---------------------------------------------------------------------------- recording


def test_a_store_that_does_not_replicate_keeps_its_bare_connection() -> None:
    store = Store(None, "memory")
    assert type(store.db) is sqlite3.Connection and store.db is store.connection
    with store.transaction() as db:
        insert(db, "q")
    assert store.take_changes() == [] and store.replication_position == (0, 0)
    store.close()


@pytest.mark.parametrize("sql,kind", [
    ("SELECT 1", READ), ("  select x FROM t", READ), ("PRAGMA user_version", READ), ("pragma integrity_check", READ),
    ("EXPLAIN QUERY PLAN SELECT 1", READ), ("INSERT INTO t VALUES (1)", ROW_WRITE),
    ("\n  UPDATE t SET x = 1", ROW_WRITE), ("delete from t", ROW_WRITE), ("REPLACE INTO t VALUES (1)", ROW_WRITE),
    ("INSERT OR REPLACE INTO t VALUES (1)", ROW_WRITE), ("DELETE FROM t RETURNING length(x)", WRITE),
    ("UPDATE replication SET position = position + 1 returning epoch", WRITE), ("CREATE TABLE t (x)", WRITE),
    ("DROP TABLE t", WRITE), ("ALTER TABLE t ADD COLUMN y", WRITE), ("WITH a AS (SELECT 1) SELECT * FROM a", WRITE),
    ("-- a comment\nSELECT 1", WRITE)])
def test_which_statements_are_recorded(sql: str, kind: str) -> None:
    assert statement_kind(sql) == kind


def test_a_unit_of_work_ships_its_writes_in_order_with_their_parameters() -> None:
    store = Store(None, "memory", replicated=True)
    with store.transaction() as db:
        insert(db, "a")
        db.execute("SELECT * FROM counters")
        db.execute("UPDATE counters SET next_seq = ? WHERE entity = ?", ("7", "a"))
        db.executemany("INSERT INTO dedup (entity, key, expires_at) VALUES (?, ?, ?)",
                       (("a", f"k{i}", 1.5) for i in range(3)))
        db.execute("DELETE FROM dedup WHERE key = 'k1' RETURNING key")
    (change,) = store.take_changes()
    assert change == Change(0, 1, [
        Statement("INSERT INTO counters (entity, next_seq) VALUES (:entity, :next_seq)",
                  {"entity": "a", "next_seq": 1}),
        Statement("UPDATE counters SET next_seq = ? WHERE entity = ?", ["7", "a"]),
        Statement("INSERT INTO dedup (entity, key, expires_at) VALUES (?, ?, ?)",
                  [["a", "k0", 1.5], ["a", "k1", 1.5], ["a", "k2", 1.5]], True),
        Statement("DELETE FROM dedup WHERE key = 'k1' RETURNING key", [])])
    assert store.replication_position == (0, 1) and store.take_changes() == []
    store.close()


def test_a_rolled_back_unit_of_work_ships_nothing() -> None:
    store = Store(None, "memory", replicated=True)
    with pytest.raises(RuntimeError), store.transaction() as db:
        insert(db, "a")
        raise RuntimeError("stop")
    assert store.take_changes() == [] and store.replication_position == (0, 0)
    store.close()


def test_a_failed_savepoint_drops_only_its_own_statements() -> None:
    store, follower = Store(None, "memory", replicated=True), Store(None, "memory")
    with store.transaction() as db:
        insert(db, "a")
        with pytest.raises(ValueError), store.transaction():
            insert(db, "b")
            with store.transaction():
                insert(db, "b2")
            raise ValueError("inner")
        with store.transaction():
            insert(db, "c")
    (change,) = ship(store, follower)
    assert [s.parameters["entity"] for s in change.statements] == ["a", "c"]  # type: ignore[call-overload]
    assert contents(follower) == contents(store)
    store.close()


def test_writes_that_change_nothing_ship_nothing() -> None:
    store = Store(None, "memory", replicated=True)
    engine = PartitionEngine(0, 1, store, ManualClock(T))
    engine.create_entity(queue_definition("q"))
    store.take_changes()
    with store.transaction() as db:
        db.execute("DELETE FROM dedup WHERE expires_at <= ?", (T,))
        db.execute("UPDATE counters SET next_seq = 5 WHERE entity = 'nobody'")
    engine.housekeeping()
    engine.peek("q", MAIN, 0, 10)
    assert store.take_changes() == [] and store.replication_position == (0, 1)
    store.close()


def test_a_replicated_store_refuses_writes_outside_a_unit_of_work() -> None:
    store = Store(None, "memory", replicated=True)
    with pytest.raises(InvalidOperationError, match="only inside a unit of work"):
        insert(store.db, "a")
    assert store.db.execute("SELECT COUNT(*) FROM counters").fetchone() == (0,)
    store.close()


def test_the_position_is_committed_with_the_data(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    store = Store(path, replicated=True)
    store.db.execute("PRAGMA foreign_keys = ON")
    with store.transaction() as db:
        db.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
        db.execute("CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError), store.transaction() as db:
        db.execute("INSERT INTO children (parent) VALUES (7)")
    assert [c.position for c in store.take_changes()] == [1]
    store.close()
    reopened = Store(path, replicated=True)
    assert reopened.replication_position == (0, 1)
    assert reopened.db.execute("SELECT COUNT(*) FROM children").fetchone() == (0,)
    reopened.close()


def test_a_change_crosses_the_wire_as_plain_data() -> None:
    change = Change(3, 9, [Statement("INSERT INTO t VALUES (?, ?, ?, ?)", [b"\x00\x01", None, 2.5, -7]),
                           Statement("UPDATE t SET x = :x", {"x": "é"}),
                           Statement("INSERT INTO t VALUES (?)", [[1], [2]], True)])
    encoded = change.encode()
    assert encoded == [3, 9, [["INSERT INTO t VALUES (?, ?, ?, ?)", [b"\x00\x01", None, 2.5, -7], False],
                              ["UPDATE t SET x = :x", {"x": "é"}, False],
                              ["INSERT INTO t VALUES (?)", [[1], [2]], True]]]
    assert shipped(change) == change


@pytest.mark.parametrize("fields", [
    None, [], [1, 2], [1, 0, []], [-1, 1, []], ["1", 1, []], [True, 1, []], [1, 1, [["SELECT 1", [], "no"]]],
    [1, 1, [[1, [], False]]], [1, 1, [["x", 5, False]]], [1, 1, [["x", []]]], [1, 1, 7]])
def test_anything_else_is_no_change(fields: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="not an encoded change"):
        Change.decode(fields)


# ---------------------------------------------------------------------------- applying, epochs


def leader_with_changes(count: int, epoch: int = 1) -> tuple[Store, list[Change]]:
    """A recording store in `epoch` with `count` committed changes (one counter each)."""
    store = Store(None, "memory", replicated=True)
    replication.begin_epoch(store, epoch)
    for n in range(count):
        with store.transaction() as db:
            insert(db, f"e{n}")
    return store, store.take_changes()


def test_a_follower_takes_only_the_next_change() -> None:
    leader, changes = leader_with_changes(3)
    follower = Store(None, "memory")
    with pytest.raises(OutOfOrderChangeError, match="send the changes after 0") as gap:
        replication.apply(follower, changes[1])
    assert (gap.value.epoch, gap.value.position) == (0, 0)
    assert replication.apply(follower, changes[0]) is True
    assert replication.apply(follower, changes[0]) is False, "a repeat it holds is acknowledged"
    assert replication.apply(follower, changes[1]) and replication.apply(follower, changes[2])
    assert follower.replication_position == (1, 3) and contents(follower) == contents(leader)
    copy = pickle.loads(pickle.dumps(gap.value))
    assert (type(copy), copy.epoch, copy.position, copy.message) == (
        OutOfOrderChangeError, 0, 0, gap.value.message)


def test_a_shipment_of_several_changes_is_applied_in_one_commit() -> None:
    leader, changes = leader_with_changes(5)
    follower = Store(None, "memory")
    assert replication.apply_all(follower, changes[:2]) == 2
    commits = follower.commits.count
    assert replication.apply_all(follower, changes[1:]) == 3, "the repeat it holds is skipped"
    assert follower.commits.count == commits + 1
    assert follower.replication_position == (1, 5) and contents(follower) == contents(leader)
    assert replication.apply_all(follower, changes) == 0 and follower.commits.count == commits + 1


def test_a_gap_inside_a_shipment_applies_none_of_it() -> None:
    _, changes = leader_with_changes(4)
    follower = Store(None, "memory")
    with pytest.raises(OutOfOrderChangeError, match="send the changes after 0"):
        replication.apply_all(follower, [changes[0], changes[1], changes[3]])
    assert follower.replication_position == (0, 0)
    with pytest.raises(OutOfOrderChangeError):
        replication.apply_all(follower, [changes[0], changes[0]])


def test_a_shipment_across_epochs_records_where_each_began() -> None:
    _, first = leader_with_changes(2, epoch=1)
    follower = Store(None, "memory")
    later = [Change(3, 3, []), Change(3, 4, [])]
    assert replication.apply_all(follower, [*first, *later]) == 4
    assert follower.replication_position == (3, 4)
    assert follower.epoch_history() == [EpochStart(1, 1), EpochStart(3, 3)]
    with pytest.raises(StaleEpochError, match="older than this store's epoch 3"):
        replication.apply_all(Store(None, "memory"), [Change(3, 1, []), Change(2, 2, [])])


def test_a_change_of_an_older_epoch_is_refused() -> None:
    _, old = leader_with_changes(1, epoch=1)
    _, new = leader_with_changes(2, epoch=2)
    follower = Store(None, "memory")
    replication.apply(follower, new[0])
    with pytest.raises(StaleEpochError, match="older than this store's epoch 2") as stale:
        replication.apply(follower, old[0]._replace(position=2))
    assert (stale.value.epoch, stale.value.position) == (2, 1)
    with pytest.raises(OutOfOrderChangeError):  # the store holds position 1 from epoch 2
        replication.apply(follower, new[0]._replace(epoch=3, position=1))


def test_a_change_that_fails_on_the_follower_is_not_applied() -> None:
    _, changes = leader_with_changes(2)
    follower = Store(None, "memory")
    with follower.transaction() as db:
        insert(db, "e1")
    replication.apply(follower, changes[0])
    with pytest.raises(ReplicationError, match="rows differ from the leader's"):
        replication.apply(follower, changes[1])
    assert follower.replication_position == (1, 1)
    assert follower.connection.execute("SELECT entity FROM counters ORDER BY 1").fetchall() == [("e0",), ("e1",)]


def test_apply_and_begin_epoch_run_outside_units_of_work() -> None:
    store = Store(None, "memory", replicated=True)
    with store.transaction():
        with pytest.raises(InvalidOperationError, match="outside a unit of work"):
            replication.apply(store, Change(0, 1, []))
        with pytest.raises(InvalidOperationError, match="outside a unit of work"):
            replication.begin_epoch(store, 1)


def test_each_epoch_begins_after_the_last_change() -> None:
    _, changes = leader_with_changes(2, epoch=1)
    follower = Store(None, "memory", replicated=True)
    for change in changes:
        replication.apply(follower, change)
    replication.begin_epoch(follower, 2)
    with follower.transaction() as db:
        insert(db, "x")
    replication.begin_epoch(follower, 4)
    assert follower.epoch_history() == [EpochStart(1, 1), EpochStart(2, 3), EpochStart(4, 4)]
    with pytest.raises(StaleEpochError, match="not above this store's epoch 4"):
        replication.begin_epoch(follower, 4)
    with follower.transaction() as db:
        insert(db, "y")
    assert [(c.epoch, c.position) for c in follower.take_changes()] == [(2, 3), (4, 4)]
    assert follower.replication_position == (4, 4)


H = EpochStart


@pytest.mark.parametrize("leader_history,leader_position,follower_history,follower_position,expected", [
    ([], 0, [], 0, 0),  # both new
    ([H(1, 1)], 50, [], 0, 0),  # a new follower takes everything
    ([H(1, 1)], 50, [H(1, 1)], 30, 30),  # behind in the same epoch
    ([H(1, 1)], 50, [H(1, 1)], 50, 50),  # up to date
    ([H(1, 1)], 50, [H(1, 1)], 60, None),  # ahead of the leader
    ([H(1, 1), H(2, 41)], 60, [H(1, 1)], 40, 40),  # the old epoch ended where the follower stopped
    ([H(1, 1), H(2, 41)], 60, [H(1, 1)], 45, None),  # the old leader's changes beyond where epoch 1 ended
    ([H(1, 1), H(3, 41)], 60, [H(1, 1), H(2, 41)], 45, None),  # a dead leader's epoch the new one never had
    ([H(1, 1), H(3, 41)], 60, [H(1, 1), H(2, 31)], 35, None),  # a dead leader that began behind the new one
    ([H(1, 1), H(3, 41)], 60, [H(1, 1), H(2, 61)], 40, 40),  # began an epoch but wrote nothing in it
    ([H(1, 1), H(2, 41), H(3, 41)], 60, [H(1, 1), H(3, 41)], 50, 50),  # an epoch with no change
    ([H(1, 1), H(2, 11), H(4, 31)], 40, [H(1, 1), H(2, 11)], 20, 20),  # behind across epochs
    ([H(2, 1)], 10, [H(1, 1)], 5, None),  # everything of another epoch
])
def test_divergence(leader_history: list[EpochStart], leader_position: int, follower_history: list[EpochStart],
                    follower_position: int, expected: int | None) -> None:
    assert divergence(leader_history, leader_position, follower_history, follower_position) == expected


def test_divergence_refuses_a_deposed_leader_and_bad_positions() -> None:
    with pytest.raises(StaleEpochError, match="the leader was deposed"):
        divergence([H(1, 1)], 10, [H(1, 1), H(2, 11)], 12)
    with pytest.raises(InvalidArgumentError, match="positions are 0 or more"):
        divergence([], -1, [], 0)


def test_a_follower_joins_at_the_position_divergence_gives() -> None:
    leader, changes = leader_with_changes(5)
    log = ChangeLog(0)
    for change in changes:
        log.append(change)
    follower = Store(None, "memory")
    replication.apply(follower, changes[0])
    start = divergence(leader.epoch_history(), leader.replication_position.position, follower.epoch_history(),
                       follower.replication_position.position)
    assert start == 1
    for change in log.since(start) or []:
        replication.apply(follower, change)
    assert contents(follower) == contents(leader)


# ---------------------------------------------------------------------------- the change log


def test_the_change_log_keeps_the_latest_changes_by_count() -> None:
    _, changes = leader_with_changes(5)
    log = ChangeLog(0, max_changes=3)
    for change in changes:
        log.append(change)
    assert (len(log), log.last) == (3, 5)
    assert [c.position for c in log.since(2) or []] == [3, 4, 5]
    assert log.since(4) == [changes[4]] and log.since(5) == []
    assert log.since(1) is None and log.since(0) is None


def test_the_change_log_keeps_the_latest_changes_by_bytes() -> None:
    _, changes = leader_with_changes(4)
    size = len(codec.packb(changes[0].encode()))
    log = ChangeLog(0, max_bytes=2 * size + 1)
    for change in changes:
        log.append(change)
    assert (len(log), log.bytes) == (2, 2 * size)
    assert log.since(1) is None and [c.position for c in log.since(2) or []] == [3, 4]
    tiny = ChangeLog(0, max_bytes=1)
    tiny.append(changes[0])
    assert (len(tiny), tiny.last, tiny.since(1), tiny.since(0)) == (0, 1, [], None)


def test_the_change_log_takes_changes_in_order_and_positions_within_it() -> None:
    _, changes = leader_with_changes(2)
    log = ChangeLog(1)
    with pytest.raises(InvalidArgumentError, match="does not follow the log's last change, 1"):
        log.append(changes[0])
    log.append(changes[1])
    assert log.since(0) is None and log.since(1) == [changes[1]]
    for position in (-1, 3):
        with pytest.raises(InvalidArgumentError, match="outside the log"):
            log.since(position)
    with pytest.raises(InvalidArgumentError, match="at least one change"):
        ChangeLog(0, max_changes=0)


# ---------------------------------------------------------------------------- full copies


@pytest.mark.parametrize("leader_kind,follower_kind", [("memory", "memory"), ("file", "file"), ("file", "memory"),
                                                       ("memory", "file")])
def test_a_follower_restored_from_a_copy_goes_on_with_the_changes(leader_kind: str, follower_kind: str,
                                                                    tmp_path: Path) -> None:
    leader = Store(str(tmp_path / "leader.db") if leader_kind == "file" else None, leader_kind if leader_kind ==
                   "memory" else "normal", replicated=True)
    follower_path = str(tmp_path / "follower.db")
    follower = Store(follower_path if follower_kind == "file" else None, "normal" if follower_kind == "file"
                     else "memory")
    replication.begin_epoch(leader, 2)
    engine = PartitionEngine(0, 1, leader, ManualClock(T))
    engine.create_entity(queue_definition("q"))
    engine.send("q", [Message(f"m{n}").to_envelope() for n in range(30)])
    engine.receive("q", MAIN, 5)
    leader.take_changes()
    with follower.transaction() as db:
        insert(db, "stale")
    follower.restore(leader.snapshot())
    assert contents(follower) == contents(leader)
    assert follower.replication_position == leader.replication_position == (2, 3)
    engine.send("q", [Message("after").to_envelope()])
    ship(leader, follower)
    assert contents(follower) == contents(leader)
    if follower_kind == "file":
        assert follower.connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        follower.close()
        follower = Store(follower_path)
        assert contents(follower) == contents(leader)
    assert PartitionEngine(0, 1, follower, ManualClock(T)).runtime("q")["active"] == 31
    leader.close()
    follower.close()


def test_a_copy_is_taken_and_restored_between_units_of_work() -> None:
    store = Store(None, "memory")
    with store.transaction():
        with pytest.raises(InvalidOperationError, match="cannot take a snapshot inside a unit of work"):
            store.snapshot()
        with pytest.raises(InvalidOperationError, match="cannot restore a snapshot inside a unit of work"):
            store.restore(b"")


@pytest.mark.parametrize("data", [b"", b"not a database at all, not even close" * 200, "text"])
def test_only_a_snapshot_restores(data: Any) -> None:
    store = Store(None, "memory")
    with store.transaction() as db:
        insert(db, "kept")
    with pytest.raises(InvalidArgumentError, match="snapshot"):
        store.restore(data)
    assert store.connection.execute("SELECT entity FROM counters").fetchall() == [("kept",)]


def test_a_snapshot_of_another_schema_version_or_an_older_epoch_is_refused() -> None:
    old = sqlite3.connect(":memory:")
    old.execute("PRAGMA user_version = 6")
    store = Store(None, "memory")
    with pytest.raises(InvalidArgumentError, match=f"schema version 6, not this release's {SCHEMA_VERSION}"):
        store.restore(old.serialize())
    stale, _ = leader_with_changes(1, epoch=1)
    replication.begin_epoch(store, 2)
    with pytest.raises(StaleEpochError, match="the snapshot is of epoch 1"):
        store.restore(stale.snapshot())


# ---------------------------------------------------------------------------- the schema


def test_a_store_of_schema_version_6_opens_with_its_messages(tmp_path: Path) -> None:
    path = str(tmp_path / "v6.db")
    clock = ManualClock(T)
    engine = PartitionEngine(0, 1, Store(path), clock)
    engine.create_entity(queue_definition("q"))
    engine.send("q", [Message(body).to_envelope() for body in ("one", "two")])
    engine.store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("DROP TABLE replication; DROP TABLE epochs; ALTER TABLE sessions DROP COLUMN state_updated_at; "
                     "PRAGMA user_version = 6;")
    db.close()
    store = Store(path, replicated=True)
    assert store.version == SCHEMA_VERSION == 8
    assert store.replication_position == (0, 0) and store.epoch_history() == []
    engine = PartitionEngine(0, 1, store, clock)
    assert [m["payload"] for m in engine.peek("q", MAIN, 0, 10)] == [
        Message(body).to_envelope()["payload"] for body in ("one", "two")]
    assert engine.send("q", [Message("three").to_envelope()]) == [3]
    assert [c.position for c in store.take_changes()] == [1]
    store.close()


def test_replicas_holding_the_same_changes_have_the_same_digest_whatever_their_epoch_history() -> None:
    leader, follower = Store(None, "memory", replicated=True), Store(None, "memory")
    with leader.transaction() as db:
        db.execute("INSERT INTO counters (entity, next_seq) VALUES ('q', 1)")
    for change in leader.take_changes():
        replication.apply(follower, change)
    assert leader.digest() == follower.digest()
    replication.begin_epoch(leader, 5)
    assert leader.replication_position != follower.replication_position
    assert leader.digest() == follower.digest(), "an epoch begun without changes changes no data"
    with leader.transaction() as db:
        db.execute("UPDATE counters SET next_seq = 2")
    leader.take_changes()
    assert leader.digest() != follower.digest()
