"""The store: schema versions and migrations, units of work with savepoints, staged caches."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from ray_broker import codec
from ray_broker.engine.state import SettledTokens, StagedMap
from ray_broker.engine.store import MIGRATIONS, SCHEMA_VERSION, Store
from ray_broker.errors import InvalidOperationError
from ray_broker.wire import SessionRef, Settlement

from .conftest import Broker, queue_definition


def _first_release_store(path: Path) -> None:
    """A store as the first release wrote it: the version-1 tables, no schema version, one queue
    holding two messages (one of them locked) and a session with state."""
    db = sqlite3.connect(str(path), isolation_level=None)
    db.executescript(MIGRATIONS[0])
    definition = queue_definition("q", lock_duration=30)
    db.execute("INSERT INTO entities (key, definition) VALUES ('q', ?)", (codec.packb(definition),))
    db.execute("INSERT INTO counters (entity, next_seq) VALUES ('q', 3)")
    db.executemany(
        "INSERT INTO messages (entity, seq, subq, state, enqueued_at, size, payload, lock_token, locked_until, "
        "delivery_count) VALUES ('q', ?, 0, 0, 1700000000.0, ?, ?, ?, ?, ?)",
        [(1, 3, codec.packb({"body": b"one"}), None, None, 0),
         (2, 3, codec.packb({"body": b"two"}), b"t" * 16, 1_700_000_030.0, 1)])
    db.execute("INSERT INTO sessions (entity, session_id, state) VALUES ('q', 's', x'01')")
    db.close()


def test_a_new_store_has_the_current_schema_version(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "p.sqlite"))
    assert store.version == SCHEMA_VERSION
    store.close()


def test_a_store_of_the_first_release_opens_with_its_messages(make_broker: Callable[..., Broker],
                                                              tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _first_release_store(path)
    broker = make_broker(path=path)
    assert broker.engine.store.version == SCHEMA_VERSION
    assert broker.engine.runtime("q")["active"] == 2
    assert broker.engine.runtime("q")["size"] == 6
    assert broker.bodies(broker.receive("q")) == [b"one"]
    assert broker.engine.settle("q", 0, [Settlement("complete", 2, b"t" * 16)]) == [None]
    assert broker.send("q", "three") == [3]
    assert broker.engine.integrity_check() == {"ok": True, "problems": []}


def test_a_store_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    db = sqlite3.connect(str(path))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(InvalidOperationError, match="newer than this release"):
        Store(str(path))


def test_a_nested_unit_that_fails_undoes_only_its_own_writes() -> None:
    store = Store(None, "memory")
    sizes: StagedMap[str, int] = StagedMap(store, {"q": 10})
    with store.transaction() as db:
        db.execute("INSERT INTO counters (entity, next_seq) VALUES ('a', 1)")
        sizes.add("q", 5)
        with pytest.raises(ValueError), store.transaction():
            db.execute("INSERT INTO counters (entity, next_seq) VALUES ('b', 1)")
            sizes.add("q", 100)
            sizes.pop("q")
            raise ValueError("inner")
        assert sizes.get("q", 0) == 15
        with store.transaction():
            db.execute("INSERT INTO counters (entity, next_seq) VALUES ('c', 1)")
            sizes.set("r", 1)
    assert [r[0] for r in store.db.execute("SELECT entity FROM counters ORDER BY entity")] == ["a", "c"]
    assert (sizes.get("q", 0), sizes.get("r", 0)) == (15, 1)
    store.close()


def test_a_failed_unit_drops_its_cache_changes_and_writes() -> None:
    store = Store(None, "memory")
    sizes: StagedMap[str, int] = StagedMap(store, {"q": 10})
    settled = SettledTokens(store, limit=2)
    with pytest.raises(RuntimeError), store.transaction() as db:
        db.execute("INSERT INTO counters (entity, next_seq) VALUES ('a', 1)")
        sizes.add("q", 5)
        settled.extend([(b"t1", "complete")])
        assert (sizes.get("q", 0), settled.action(b"t1")) == (15, "complete")
        raise RuntimeError("boom")
    assert store.db.execute("SELECT COUNT(*) FROM counters").fetchone()[0] == 0
    assert (sizes.get("q", 0), settled.action(b"t1")) == (10, None)
    with store.transaction():
        settled.extend((token, "complete") for token in (b"t1", b"t2", b"t3"))
    assert [settled.action(t) for t in (b"t1", b"t2", b"t3")] == [None, "complete", "complete"]
    store.close()


def test_cached_figures_change_only_inside_a_transaction() -> None:
    store = Store(None, "memory")
    sizes: StagedMap[str, int] = StagedMap(store, {})
    with pytest.raises(RuntimeError, match="inside a store transaction"):
        sizes.set("q", 1)
    store.close()


def test_operations_in_one_unit_of_work_commit_together(broker: Broker) -> None:
    broker.create_queue("q")
    broker.send("q", "a", "b")
    (first,) = broker.receive("q", 1)
    commits = []
    broker.engine.db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    with broker.engine.unit_of_work():
        assert broker.settle("q", "complete", first) is None
        with pytest.raises(InvalidOperationError):
            broker.engine.receive("q", 0, 1, session=SessionRef("s", b"t"))
        assert broker.bodies(broker.receive("q")) == [b"b"]
    broker.engine.db.set_trace_callback(None)
    assert commits == ["COMMIT"]
    assert broker.engine.runtime("q")["active"] == 1
    assert broker.engine.integrity_check() == {"ok": True, "problems": []}


def test_an_error_leaving_a_unit_of_work_undoes_all_of_it(broker: Broker) -> None:
    broker.create_queue("q")
    with pytest.raises(RuntimeError), broker.engine.unit_of_work():
        broker.send("q", "a")
        raise RuntimeError("stop")
    assert broker.engine.runtime("q") == {"active": 0, "dead_letter": 0, "scheduled": 0, "transfer": 0,
                                          "transfer_dead_letter": 0, "size": 0, "next_sequence": 1,
                                          "accessed_at": broker.clock.now()}  # the send was tried
    assert broker.send("q", "b") == [1]
