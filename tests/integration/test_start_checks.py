"""What `rb.start` checks before it starts anything: the `amqp` extra where an AMQP port is asked
for, and that the AMQP and management ports are free, each failing in seconds with a typed error,
nothing created or written; a namespace that already serves its port starts again as before."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import ray_broker as rb
from actors.handles import find_actor

from .helpers import free_port, isolated_env, serving_amqp, short_tmpdir


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket listens on, on every address."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", free_port()))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("busy", ["amqp", "management"])
def test_a_busy_port_fails_the_start_at_once_and_nothing_is_made(ray_instance: None, busy_port: int,
                                                                 tmp_path: Path, busy: str) -> None:
    name = f"busy-{uuid.uuid4().hex[:6]}"
    data_dir = tmp_path / name
    amqp_port, management_port = (busy_port, free_port()) if busy == "amqp" else (free_port(), busy_port)
    role = "the AMQP port" if busy == "amqp" else "the management port"
    started = time.monotonic()
    with pytest.raises(rb.errors.PortUnavailableError, match=rf"^port {busy_port} \({role}\) cannot be listened on"):
        rb.start(name, data_dir=str(data_dir), amqp_port=amqp_port, management_port=management_port)
    assert time.monotonic() - started < 10
    assert not data_dir.exists(), "the start wrote its configuration or stores"
    assert find_actor(f"{name}.gateway.0") is None and find_actor(f"{name}.partition.0") is None


def test_a_namespace_serving_its_port_starts_again(ray_instance: None) -> None:
    with serving_amqp("again") as ns:
        again = rb.start(ns.name, durability="memory", amqp_port=ns.config.amqp_port)
        assert again.config == ns.config


WITHOUT_H11 = 'raise ImportError("h11 is hidden by the test")\n'
START_WITH_AMQP = "import sys, ray_broker as rb; rb.start(sys.argv[1], amqp_port=int(sys.argv[2]))"


@pytest.mark.parametrize("how", ["python", "cli"])
def test_without_the_amqp_extra_the_start_fails_at_once_and_starts_nothing(tmp_path: Path, how: str) -> None:
    """`h11` made unimportable, as where the extra is not installed."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "h11.py").write_text(WITHOUT_H11)
    home, ray_tmp = short_tmpdir("rbh-"), short_tmpdir("rbr-")
    env = {**isolated_env(ray_tmp, home), "PYTHONPATH": str(hidden)}
    command = ([sys.executable, "-c", START_WITH_AMQP, "noextra", str(free_port())] if how == "python" else
               [str(Path(sys.executable).with_name("ray-broker")), "start", "-n", "noextra", "--amqp-port",
                str(free_port())])
    try:
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
        took = time.monotonic() - started
        made = os.listdir(ray_tmp), os.listdir(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    prefix = "ray_broker.errors.MissingDependencyError: " if how == "python" else "error: MissingDependencyError: "
    assert last.startswith(prefix + "the AMQP front end needs `pip install 'ray-broker[amqp]'`: h11 (h11 is hidden "
                                    "by the test)"), result.stderr
    assert took < 20, f"it failed after {took:.0f} s"
    assert made == ([], []), "a Ray was started, or something written"


TWO_REPLICAS = r"^replicas=2 cannot fail over: .* losing either node stops each partition's keyed traffic until that " \
               r"node returns; use replicas=3 for failover, or min_in_sync=1 to go on with the replica that holds " \
               r"every acknowledged change$"


@pytest.mark.parametrize("how", ["sync", "async"])
def test_two_replicas_are_warned_of(ray_instance: None, how: str) -> None:
    """The session's one-node cluster then refuses them: the warning comes first."""
    import asyncio
    import warnings

    import ray_broker.aio as rba

    def start(replicas: int, min_in_sync: int | None = None) -> None:
        if how == "sync":
            rb.start("two-replicas", durability="memory", replicas=replicas, min_in_sync=min_in_sync)
        else:
            asyncio.run(rba.start("two-replicas", durability="memory", replicas=replicas, min_in_sync=min_in_sync))

    with pytest.warns(rb.errors.ReplicationWarning, match=TWO_REPLICAS):
        with pytest.raises(rb.errors.InvalidOperationError, match="replicas=2 needs 2 nodes"):
            start(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", rb.errors.ReplicationWarning)
        with pytest.raises(rb.errors.InvalidOperationError, match="replicas=3 needs 3 nodes"):
            start(3)
        with pytest.raises(rb.errors.InvalidOperationError, match="replicas=2 needs 2 nodes"):
            start(2, min_in_sync=1)  # it can fail over: no warning
        with pytest.raises(rb.errors.InvalidArgumentError, match=r"min_in_sync must be None or an int from 1 to "
                                                                 r"replicas \(2\), got 3"):
            start(2, min_in_sync=3)
