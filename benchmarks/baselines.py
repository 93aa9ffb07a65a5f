"""Peers measured in the same run as the broker: a raw Ray actor call, `ray.util.queue`, Redis Streams.

- Raw actor: one call carrying the same payload is the per-hop limit of anything built on Ray
  actors; the broker's send and receive are one such hop each (client to partition).
- Durable floor: the same two calls to an actor that keeps the payloads in SQLite with the
  broker's pragmas (WAL, one commit per call: insert the batch; delete the previous batch and
  select the next), the least any broker on Ray actors with a durable store does per cycle; and
  for a waiting consumer, `ray.util.queue`'s blocked get with a commit on put and one on get.
- `ray.util.queue.Queue`: `put_nowait_batch` then `get_nowait_batch`, the Ray-native queue cycle
  (in memory, no locks, no acknowledgement): the P1 target is a ratio against it.
- Redis Streams on a local redis-server started here on 127.0.0.1 (AOF on, fsync every second:
  like durability="normal", it survives a process crash): pipelined XADD, XREADGROUP, XACK.

Payload lists hold distinct bytes objects: pickle would otherwise send one repeated object once.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from typing import Any, Callable, Iterator

import ray
from ray.util.queue import Empty, Queue

from .common import Channel, PhaseClock, rate


def distinct_bodies(body: bytes, count: int) -> list[bytes]:
    """`count` different bodies of `len(body)` bytes (each ends with its index)."""
    head = body[:-8] if len(body) >= 8 else b""
    return [(head + i.to_bytes(8, "big"))[-len(body):] if body else b"" for i in range(count)]


def cycle_result(count: int, seconds: float, clock: PhaseClock, batches: int) -> dict[str, Any]:
    """The figures of a timed send/receive cycle."""
    return {"messages": count, "seconds": round(seconds, 4), "msgs_per_s": round(rate(count, seconds), 1),
            "ms_per_batch": clock.per(batches)}


def lockstep(batches: int, warmup: int, step: Callable[[PhaseClock], None]) -> tuple[PhaseClock, float]:
    """Run `step` `warmup` + `batches` times; the clock and the seconds of the last `batches`."""
    clock, start = PhaseClock(), time.perf_counter()
    for i in range(warmup + batches):
        if i == warmup:
            clock, start = PhaseClock(), time.perf_counter()
        step(clock)
    return clock, time.perf_counter() - start


# ---------------------------------------------------------------------- raw actor

@ray.remote(num_cpus=0)
class PayloadActor:
    """Holds the last payload it was given and hands it back: no work beyond the Ray call."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    def put(self, items: list[bytes]) -> int:
        """Keep `items`; return how many."""
        self.items = items
        return len(items)

    def get(self, count: int) -> list[bytes]:
        """Up to `count` of the items kept."""
        return self.items[:count]

    def pid(self) -> int:
        """The process id."""
        return os.getpid()


class RawActorBaseline:
    """The per-hop limit: actor calls carrying the benchmark's payload."""

    def __init__(self) -> None:
        self.actor = PayloadActor.remote()
        ray.get(self.actor.put.remote([]), timeout=120)

    def close(self) -> None:
        """Kill the actor."""
        ray.kill(self.actor)

    def cycle(self, bodies: list[bytes], batches: int, warmup: int) -> dict[str, Any]:
        """`put` (payload in the request) and `get` (payload in the reply) per batch."""
        def step(clock: PhaseClock) -> None:
            with clock("put"):
                ray.get(self.actor.put.remote(bodies))
            with clock("get"):
                ray.get(self.actor.get.remote(len(bodies)))

        clock, seconds = lockstep(batches, warmup, step)
        result = cycle_result(len(bodies) * batches, seconds, clock, batches)
        result["hop_msgs_per_s"] = round(rate(len(bodies) * batches, clock.totals["put"]), 1)
        return result

    def round_trips(self, body: bytes, samples: int, warmup: int) -> list[float]:
        """Durations of single-message `put` calls (send one message, get the answer), in seconds."""
        out = []
        for i in range(warmup + samples):
            start = time.perf_counter()
            ray.get(self.actor.put.remote([body]))
            if i >= warmup:
                out.append(time.perf_counter() - start)
        return out


# ---------------------------------------------------------------------- durable floor

def floor_store(directory: str, synchronous: str) -> sqlite3.Connection:
    """A table of (sequence number, payload) in SQLite with the broker's pragmas (WAL, `synchronous`
    as the broker's durability), in autocommit mode: each call makes its own transaction."""
    db = sqlite3.connect(os.path.join(directory, "floor.db"), isolation_level=None)
    for pragma in ("journal_mode=WAL", f"synchronous={synchronous}", "cache_size=-16000", "temp_store=MEMORY"):
        db.execute("PRAGMA " + pragma)
    db.execute("CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    return db


@ray.remote(num_cpus=0)
class SqliteQueueActor:
    """The least a durable queue actor does per batch: one transaction per call."""

    def __init__(self, directory: str, synchronous: str) -> None:
        self.db = floor_store(directory, synchronous)
        self.next_seq = 1

    def put(self, items: list[bytes]) -> int:
        """Store `items` in one transaction; return how many."""
        first, self.next_seq = self.next_seq, self.next_seq + len(items)
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("INSERT INTO messages (seq, payload) VALUES (?, ?)",
                            [(first + i, item) for i, item in enumerate(items)])
        self.db.execute("COMMIT")
        return len(items)

    def get(self, count: int, done: list[int]) -> list[tuple[int, bytes]]:
        """Delete the messages `done` and hand out the next `count`, in one transaction."""
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("DELETE FROM messages WHERE seq = ?", [(seq,) for seq in done])
        rows = self.db.execute("SELECT seq, payload FROM messages ORDER BY seq LIMIT ?", (count,)).fetchall()
        self.db.execute("COMMIT")
        return rows


@ray.remote(num_cpus=0)
class SqliteWaitingQueueActor:
    """`ray.util.queue`'s blocked get plus the two commits of a durable broker: `put` commits a
    message and wakes the waiting `get`, which takes it off in a commit of its own."""

    def __init__(self, directory: str, synchronous: str) -> None:
        self.db = floor_store(directory, synchronous)
        self.arrived = asyncio.Event()

    async def put(self, item: bytes) -> None:
        """Store one message and wake the waiting consumer."""
        self.db.execute("INSERT INTO messages (payload) VALUES (?)", (item,))
        self.arrived.set()

    async def get(self, timeout: float) -> bytes | None:
        """The oldest message, taken off the store, waiting up to `timeout` seconds for one."""
        deadline = time.monotonic() + timeout
        while True:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT seq, payload FROM messages ORDER BY seq LIMIT 1").fetchone()
            if row is not None:
                self.db.execute("DELETE FROM messages WHERE seq = ?", (row[0],))
            self.db.execute("COMMIT")
            if row is not None:
                return bytes(row[1])
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), max(deadline - time.monotonic(), 0.0))
            except asyncio.TimeoutError:
                return None


class DurableFloorBaseline:
    """Durable queue actors with no broker logic: the floor of a durable broker, per batch (P1) and
    for a waiting consumer (P3)."""

    def __init__(self, durability: str) -> None:
        self.directory = tempfile.mkdtemp(prefix="rb-floor-")
        self.synchronous = "FULL" if durability == "fsync" else "NORMAL"
        self.actor = SqliteQueueActor.remote(self.directory, self.synchronous)
        ray.get(self.actor.put.remote([]), timeout=120)
        self.waiting: Any = None

    def close(self) -> None:
        """Kill the actors and remove their stores."""
        for actor in (self.actor, self.waiting):
            if actor is not None:
                ray.kill(actor)
        shutil.rmtree(self.directory, ignore_errors=True)

    def cycle(self, bodies: list[bytes], batches: int, warmup: int) -> dict[str, Any]:
        """`put` the batch, then `get` it back carrying the previous batch's completions."""
        done: list[int] = []

        def step(clock: PhaseClock) -> None:
            with clock("put"):
                ray.get(self.actor.put.remote(bodies))
            with clock("get"):
                rows = ray.get(self.actor.get.remote(len(bodies), done))
            done[:] = [seq for seq, _ in rows]

        clock, seconds = lockstep(batches, warmup, step)
        ray.get(self.actor.get.remote(0, done))
        return cycle_result(len(bodies) * batches, seconds, clock, batches)

    def channel(self, body: bytes) -> Channel:
        """A waiting consumer of a store of its own: a blocked `get` in a thread, `put` from the sender."""
        directory = tempfile.mkdtemp(prefix="waiting-", dir=self.directory)
        self.waiting = SqliteWaitingQueueActor.remote(directory, self.synchronous)

        def receive_one(max_wait: float) -> tuple[int, float] | None:
            item = ray.get(self.waiting.get.remote(max_wait))
            if item is None:
                return None
            return int.from_bytes(item[:8], "big", signed=True), time.perf_counter()

        return receive_one, lambda tag: ray.get(self.waiting.put.remote(tag.to_bytes(8, "big", signed=True) + body))


# ---------------------------------------------------------------------- ray.util.queue

class RayQueueBaseline:
    """`ray.util.queue.Queue` batch put and get."""

    def __init__(self) -> None:
        self.queue = Queue(actor_options={"num_cpus": 0})
        self.queue.size()

    def close(self) -> None:
        """Kill the queue's actor."""
        self.queue.shutdown(force=True)

    def cycle(self, bodies: list[bytes], batches: int, warmup: int) -> dict[str, Any]:
        """`put_nowait_batch` then `get_nowait_batch` per batch."""
        return queue_cycle(self.queue, bodies, batches, warmup)

    def channel(self, body: bytes) -> Channel:
        """A waiting consumer: `get(block=True)` in a thread, `put` from the sender."""
        def receive_one(max_wait: float) -> tuple[int, float] | None:
            try:
                tag, _ = self.queue.get(block=True, timeout=max_wait)
            except Empty:
                return None
            return int(tag), time.perf_counter()

        return receive_one, lambda tag: self.queue.put((tag, body))


def queue_cycle(queue: Queue, bodies: list[bytes], batches: int, warmup: int) -> dict[str, Any]:
    """Timed put/get cycles on a `ray.util.queue.Queue` (also run inside client actors by `scale`)."""
    clock, start, got = PhaseClock(), time.perf_counter(), 0
    for i in range(warmup + batches):
        if i == warmup:
            clock, start, got = PhaseClock(), time.perf_counter(), 0
        with clock("put"):
            queue.put_nowait_batch(bodies)
        with clock("get"):
            got += len(queue.get_nowait_batch(len(bodies)))
    return cycle_result(got, time.perf_counter() - start, clock, batches)


# ---------------------------------------------------------------------- Redis Streams

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_processes(processes: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
    """Ask every process to end (SIGTERM), then wait for each, killing one still there after `grace_s`."""
    for proc in processes:
        proc.terminate()
    for proc in processes:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server(enabled: bool = True) -> Iterator[tuple[Any, str | None]]:
    """A redis-server on 127.0.0.1 and a client to it: yields `(client, None)`, or `(None, why)`
    when switched off, when redis-server is not on PATH or the `redis` package is missing.
    The server is stopped and its files removed on exit."""
    if not enabled:
        yield None, "Redis baseline switched off (--no-redis)"
        return
    exe = shutil.which("redis-server")
    if exe is None:
        yield None, "redis-server is not on PATH (apt-get install -y redis-server); Redis baseline skipped"
        return
    try:
        import redis
    except ImportError:
        yield None, "the redis Python package is missing (pip install redis); Redis baseline skipped"
        return
    port, workdir = free_port(), tempfile.mkdtemp(prefix="rb-bench-redis-")
    proc = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", workdir, "--save", "", "--appendonly", "yes",
         "--appendfsync", "everysec", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on 127.0.0.1:{port}") from None
                time.sleep(0.05)
        yield client, None
    finally:
        client.close()
        stop_processes([proc])
        shutil.rmtree(workdir, ignore_errors=True)


class RedisBaseline:
    """Redis Streams with a consumer group on a server from `redis_server()`."""

    GROUP = "bench"

    def __init__(self, client: Any, stream: str) -> None:
        self.client = client
        self.stream = stream
        self._readers: list[Any] = []
        client.xgroup_create(stream, self.GROUP, id="0", mkstream=True)

    def cycle(self, bodies: list[bytes], batches: int, warmup: int) -> dict[str, Any]:
        """Pipelined XADD of a batch, XREADGROUP of it, one XACK of its ids."""
        clock, start, got = PhaseClock(), time.perf_counter(), 0
        for i in range(warmup + batches):
            if i == warmup:
                clock, start, got = PhaseClock(), time.perf_counter(), 0
            with clock("xadd"):
                pipe = self.client.pipeline(transaction=False)
                for body in bodies:
                    pipe.xadd(self.stream, {"b": body})
                pipe.execute()
            ids: list[bytes] = []
            with clock("xreadgroup"):
                while len(ids) < len(bodies):
                    reply = self.client.xreadgroup(self.GROUP, "c", {self.stream: ">"}, count=len(bodies) - len(ids))
                    ids += [entry_id for _, entries in reply for entry_id, _ in entries]
            with clock("xack"):
                self.client.xack(self.stream, self.GROUP, *ids)
            got += len(ids)
        return cycle_result(got, time.perf_counter() - start, clock, batches)

    def channel(self, body: bytes) -> Channel:
        """A waiting consumer: XREADGROUP BLOCK in a thread (on its own connection), XADD from the sender."""
        import redis

        options = self.client.connection_pool.connection_kwargs
        reader = redis.Redis(host=options["host"], port=options["port"])
        self._readers.append(reader)

        def receive_one(max_wait: float) -> tuple[int, float] | None:
            reply = reader.xreadgroup(self.GROUP, "w", {self.stream: ">"}, count=1, block=max(1, int(max_wait * 1000)))
            if not reply:
                return None
            arrived = time.perf_counter()
            entry_id, fields = reply[0][1][0]
            reader.xack(self.stream, self.GROUP, entry_id)
            return int(fields[b"t"]), arrived

        return receive_one, lambda tag: self.client.xadd(self.stream, {"t": tag, "b": body})

    def close(self) -> None:
        """Close the extra connections of latency channels."""
        for reader in self._readers:
            reader.close()
