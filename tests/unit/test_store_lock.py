"""One writer per store: the store's OS lock refuses a second opener and is freed when its holder dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ray_broker.engine.store import Store
from ray_broker.engine.store_lock import holder_of, lock_path
from ray_broker.errors import StoreLockedError


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """Where the partition's store lives."""
    return str(tmp_path / "data" / "partition-003.sqlite3")


def test_a_second_opener_is_refused_at_once_naming_the_holder(db_path: str) -> None:
    first = Store(db_path, owner="cluster A, actor ns.partition.3", partition=3)
    first.db.execute("CREATE TABLE marker (x)")
    before = os.path.getmtime(db_path)
    started = time.monotonic()
    with pytest.raises(StoreLockedError) as refused:
        Store(db_path, owner="cluster B, actor ns.partition.3", partition=3)
    assert time.monotonic() - started < 2.0
    text = str(refused.value)
    assert db_path in text and os.path.dirname(db_path) in text and "partition 3" in text
    assert f"pid {os.getpid()}" in text and "cluster A, actor ns.partition.3" in text
    assert refused.value.partition == 3
    assert os.path.getmtime(db_path) == before
    first.db.execute("INSERT INTO marker VALUES (1)")
    first.close()
    again = Store(db_path, owner="cluster B, actor ns.partition.3")
    assert again.db.execute("SELECT x FROM marker").fetchall() == [(1,)]
    again.close()


def test_holder_of_reports_the_live_holder_only(db_path: str) -> None:
    assert holder_of(db_path) is None
    store = Store(db_path, owner="me")
    holder = holder_of(db_path)
    assert holder is not None and (holder.pid, holder.owner) == (os.getpid(), "me")
    store.close()
    assert holder_of(db_path) is None
    assert os.path.exists(lock_path(db_path)), "the record of the last holder stays"


def test_the_same_owner_waits_for_its_earlier_incarnation(db_path: str) -> None:
    old = Store(db_path, owner="cluster A, actor ns.partition.0")
    threading.Timer(0.4, old.close).start()
    started = time.monotonic()
    new = Store(db_path, owner="cluster A, actor ns.partition.0", takeover_wait_s=10.0)
    assert 0.3 < time.monotonic() - started < 5.0
    new.close()


def test_the_same_owner_gives_up_after_its_wait(db_path: str) -> None:
    old = Store(db_path, owner="actor x")
    with pytest.raises(StoreLockedError, match="in use by"):
        Store(db_path, owner="actor x", takeover_wait_s=0.6)
    old.close()


def test_memory_stores_take_no_lock(db_path: str) -> None:
    first, second = Store(db_path, "memory"), Store(db_path, "memory")
    assert first.lock is None and second.lock is None and not os.path.exists(lock_path(db_path))


def test_a_killed_holder_frees_the_store_at_once(db_path: str) -> None:
    """kill -9 of the holding process: the kernel drops its lock, and the next opener takes over."""
    holder_code = (
        "import sys, time\n"
        "from ray_broker.engine.store import Store\n"
        f"store = Store({db_path!r}, owner='doomed')\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder_code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        holder = holder_of(db_path)
        assert holder is not None and (holder.pid, holder.owner) == (process.pid, "doomed")
        with pytest.raises(StoreLockedError, match=f"pid {process.pid}"):
            Store(db_path, owner="successor")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        successor = Store(db_path, owner="successor")
        assert holder_of(db_path) is not None and holder_of(db_path).owner == "successor"  # type: ignore[union-attr]
        successor.close()
    finally:
        if process.poll() is None:
            process.kill()
