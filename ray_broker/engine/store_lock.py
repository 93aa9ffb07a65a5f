"""One writer per store: an exclusive OS lock held by the process that owns a partition's store.

The lock is `flock` on a `.lock` file beside the database, so the kernel releases it the moment
its holder dies (a `kill -9` included) and nothing stale is ever left to clean up. The holder
writes who it is (pid, host, an owner string such as the Ray cluster and actor name, and the Ray
node it runs on) into the file, so that a refused opener can say who holds the store, and so that
whoever reads the file later can tell which node last held the store it sees (`last_holder`).

An owner that finds its own earlier incarnation still holding the lock (a partition actor that
Ray restarts while the old process is still exiting) waits for it; anyone else is refused at once.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import IO

from ..errors import StoreLockedError

PROBE_GRACE_S = 0.5
"""How long a refused opener retries before giving up on a foreign holder: long enough to ride
over another process's momentary probe of the lock (`holder_of`)."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or last held) a store's lock, as the holder recorded it."""

    pid: int
    host: str
    owner: str
    node: str | None = None
    """The Ray node the holder ran on, when it said."""

    def describe(self) -> str:
        """`pid 123 on host h (owner)`, for error messages."""
        return f"pid {self.pid} on host {self.host} ({self.owner})"


def lock_path(store_path: str) -> str:
    """The lock file that guards the store at `store_path`."""
    return store_path + ".lock"


def _read_holder(handle: IO[str]) -> LockHolder | None:
    handle.seek(0)
    try:
        record = json.loads(handle.read() or "null")
        if record is None:
            return None
        node = record.get("node")
        return LockHolder(int(record["pid"]), str(record["host"]), str(record["owner"]),
                          None if node is None else str(node))
    except (ValueError, KeyError, TypeError):
        return None


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class StoreLock:
    """The exclusive lock on one store, held from `acquire` until `release` or process exit.

    Args:
        store_path: the database file the lock guards (the lock file is `<store_path>.lock`).
        owner: who this opener is; an opener with the same owner is taken to be an earlier
            incarnation of this one, and is waited for.
        takeover_wait_s: how long to wait for an earlier incarnation with the same owner to let go.
        partition: the partition the store belongs to, named in the error.
        node: the Ray node the opener runs on, recorded for `last_holder`.

    Example:
        lock = StoreLock("/data/partition-000.sqlite3", owner="cluster 10.0.0.1:6379, actor shop.partition.0")
        lock.acquire()          # raises StoreLockedError if another process holds it
        ...
        lock.release()
    """

    def __init__(self, store_path: str, owner: str, takeover_wait_s: float = 0.0,
                 partition: int | None = None, node: str | None = None) -> None:
        self.store_path = store_path
        self.path = lock_path(store_path)
        self.partition = partition
        self.owner = owner
        self.takeover_wait_s = takeover_wait_s
        self.node = node
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock, or raise `StoreLockedError` naming its holder (touching nothing)."""
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the lock's life
        started = time.monotonic()
        while not _try_lock(handle):
            holder = _read_holder(handle)
            patience = self.takeover_wait_s if holder is None or holder.owner == self.owner else PROBE_GRACE_S
            if time.monotonic() - started >= max(patience, PROBE_GRACE_S):
                handle.close()
                raise refusal(self.store_path, holder, self.partition)
            time.sleep(0.05)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "owner": self.owner,
                                 "node": self.node}))
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Let go of the lock (idempotent); the record of the last holder stays in the file."""
        if self._handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def refusal(store_path: str, holder: LockHolder | None, partition: int | None = None) -> StoreLockedError:
    """The error for an opener refused the store at `store_path` because `holder` has it."""
    who = holder.describe() if holder is not None else "a process that has not recorded itself yet"
    where = f"partition {partition}'s store" if partition is not None else "the store"
    return StoreLockedError(
        f"{where} {store_path} (data_dir {os.path.dirname(store_path)}) is in use by {who}; one process "
        "owns a store at a time: stop that namespace first, or use another data_dir", partition=partition)


def holder_of(store_path: str) -> LockHolder | None:
    """Who holds the lock on the store at `store_path` right now, or None when nobody does.

    Probing takes the lock for an instant when it is free; a store that does not exist is free.
    """
    path = lock_path(store_path)
    if not os.path.exists(path):
        return None
    with open(path, "a+", encoding="utf-8") as handle:
        if _try_lock(handle):
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return None
        return _read_holder(handle) or LockHolder(0, "unknown", "a process that has not recorded itself yet")


def last_holder(store_path: str) -> LockHolder | None:
    """Who holds or last held the store at `store_path`, as recorded in its lock file, without
    taking the lock; None when there is no such store (or no record)."""
    try:
        with open(lock_path(store_path), encoding="utf-8") as handle:
            return _read_holder(handle)
    except OSError:
        return None
