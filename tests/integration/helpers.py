"""Helpers for integration tests: partition processes, draining queues, free ports, AMQP connection strings."""
from __future__ import annotations

import os
import signal
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import ray

import ray_broker as rb
from ray_broker.amqp.connection_string import connection_string
from ray_broker.testing.ports import free_port


def partition_handle(ns: rb.Namespace, index: int) -> Any:
    """The actor handle of partition `index`."""
    return ray.get_actor(f"{ns.name}.partition.{index}", namespace="ray_broker")


def partition_pid(ns: rb.Namespace, index: int) -> int:
    """The OS process id of partition `index`."""
    return int(ray.get(partition_handle(ns, index).pid.remote(), timeout=60))


def kill_partition(ns: rb.Namespace, index: int) -> int:
    """SIGKILL partition `index`'s process; returns the pid that was killed."""
    pid = partition_pid(ns, index)
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, interval: float = 0.1) -> None:
    """Poll `predicate` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def wait_partition_back(ns: rb.Namespace, index: int, old_pid: int) -> None:
    """Wait until partition `index` answers from a new process."""
    def back() -> bool:
        try:
            return partition_pid(ns, index) != old_pid
        except Exception:  # noqa: BLE001 - still restarting
            return False
    wait_until(back)


def drain(receiver: rb.Receiver, *, expected: int | None = None, wait: float = 2.0) -> list[rb.ReceivedMessage]:
    """Receive and complete until `expected` messages arrived (or a receive comes back empty)."""
    got: list[rb.ReceivedMessage] = []
    while expected is None or len(got) < expected:
        batch = receiver.receive_messages(100, max_wait_time=wait)
        if not batch:
            break
        for message in batch:
            receiver.complete_message(message)
        got.extend(batch)
    receiver.flush()
    return got


def isolated_env(ray_tmpdir: str, broker_home: str) -> dict[str, str]:
    """The environment for a separate driver process that must find no Ray but the ones it is told
    of: no RAY_ADDRESS, its own Ray temp dir (so no other `ray start` head on this machine is
    found) and its own broker home; and no RAY_AUTH_MODE (which a local Ray sets in the process
    that starts it), so that it joins a cluster as a user's shell would."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(RAY_TMPDIR=ray_tmpdir, RAY_BROKER_HOME=broker_home, PYTHONUNBUFFERED="1")
    return env


def short_tmpdir(prefix: str) -> str:
    """A fresh directory with a short path (Ray's socket paths under it must stay under 107 bytes)."""
    import tempfile

    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@contextmanager
def serving_amqp(prefix: str) -> Iterator[rb.Namespace]:
    """A standard namespace in memory (named `prefix-<random>`) that serves AMQP on a free port,
    stopped at the end."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    ns = rb.start(name, durability="memory", amqp_port=free_port())
    try:
        yield ns
    finally:
        rb.stop(name)


def amqp_connection_string(ns: rb.Namespace) -> str:
    """The connection string an SDK uses to reach `ns`'s AMQP front end on this machine."""
    config = ns.config
    assert config.amqp_port is not None
    return connection_string("localhost", config.amqp_port, config.shared_access_keys()[0])
