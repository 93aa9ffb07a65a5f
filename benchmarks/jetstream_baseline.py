"""NATS JetStream as a baseline: a local cluster of three `nats-server` processes and the cycle
the replication comparison runs on it.

The servers (Debian's `nats-server` package) form one cluster on 127.0.0.1 with JetStream and
file storage, each in a directory of its own; a stream with work-queue retention and a durable
pull consumer play the queue. The cycle, through `nats-py` (PyPI): publish `batch_size` messages,
each publish awaiting its acknowledgement, then fetch them and acknowledge each.
"""
from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .baselines import free_port, stop_processes

SERVERS = 3
STARTUP_S = 30.0


def missing() -> str | None:
    """Why the baseline cannot run here (None when it can)."""
    if shutil.which("nats-server") is None:
        return "nats-server is not on PATH (apt-get install -y nats-server); NATS JetStream baseline skipped"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "the nats-py package is missing (pip install nats-py); NATS JetStream baseline skipped"
    return None


@dataclass(frozen=True)
class NatsCluster:
    """Three running servers: their client URLs and processes, by server name."""

    urls: list[str]
    processes: dict[str, subprocess.Popen[bytes]]

    def pids(self) -> dict[str, int]:
        """Each server's process id, by server name."""
        return {name: proc.pid for name, proc in self.processes.items()}


@contextlib.contextmanager
def nats_cluster() -> Iterator[NatsCluster]:
    """Start three clustered JetStream servers; stop them and remove their files after."""
    root = Path(tempfile.mkdtemp(prefix="rb-bench-nats-"))
    client_ports = [free_port() for _ in range(SERVERS)]
    route_ports = [free_port() for _ in range(SERVERS)]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in route_ports)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i, (port, route) in enumerate(zip(client_ports, route_ports)):
            name = f"n{i + 1}"
            processes[name] = subprocess.Popen(
                ["nats-server", "-js", "-sd", str(root / name), "-a", "127.0.0.1", "-p", str(port),
                 "--server_name", name, "--cluster_name", "rb-bench", "--cluster", f"nats://127.0.0.1:{route}",
                 "--routes", routes], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for port, proc in zip(client_ports, processes.values()):
            _wait_for_port(port, proc)
        yield NatsCluster([f"nats://127.0.0.1:{p}" for p in client_ports], processes)
    finally:
        stop_processes(list(processes.values()))
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Block until a server listens on `port` (RuntimeError when it exits or takes too long)."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start listening on 127.0.0.1:{port}") from None
            time.sleep(0.05)


class JetStreamQueue:
    """A work-queue stream of `replicas` replicas with one durable pull consumer, on an event loop
    of its own (so that callers stay synchronous, like the broker's clients)."""

    def __init__(self, cluster: NatsCluster, name: str, replicas: int) -> None:
        self.name = name
        self.subject = f"bench.{name}"
        self.loop = asyncio.new_event_loop()
        self._run(self._open(cluster, replicas))

    def _run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    async def _open(self, cluster: NatsCluster, replicas: int) -> None:
        import nats
        from nats.js.api import RetentionPolicy, StorageType, StreamConfig

        self.nc = await nats.connect(servers=cluster.urls, max_reconnect_attempts=-1)
        self.js = self.nc.jetstream()
        deadline = time.monotonic() + STARTUP_S
        while True:  # the cluster elects its meta leader a moment after the servers start
            try:
                await self.js.add_stream(StreamConfig(name=self.name, subjects=[self.subject],
                                                      retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
                                                      num_replicas=replicas))
                break
            except Exception:  # noqa: BLE001 - retried until the cluster is ready
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        self.consumer = await self.js.pull_subscribe(self.subject, durable="worker", stream=self.name)

    def leader(self) -> str:
        """The name of the server leading the stream."""
        info = self._run(self.js.stream_info(self.name))
        return str(info.cluster.leader)

    def cycle(self, bodies: list[bytes], batches: int, warmup: int) -> tuple[int, float]:
        """`warmup + batches` cycles; the messages moved and the seconds taken by the timed ones."""
        return self._run(self._cycle(bodies, batches, warmup))

    async def _cycle(self, bodies: list[bytes], batches: int, warmup: int) -> tuple[int, float]:
        start = time.perf_counter()
        for i in range(warmup + batches):
            if i == warmup:
                start = time.perf_counter()
            for body in bodies:
                await self.js.publish(self.subject, body)
            got = 0
            while got < len(bodies):
                for message in await self.consumer.fetch(len(bodies) - got, timeout=10):
                    await message.ack()
                    got += 1
        await self.nc.flush()
        return len(bodies) * batches, time.perf_counter() - start

    def close(self) -> None:
        """Delete the stream and disconnect."""
        try:
            self._run(self.js.delete_stream(self.name))
            self._run(self.nc.close())
        finally:
            self.loop.close()
