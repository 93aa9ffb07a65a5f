"""The Ray head that `ray-broker start` runs when no cluster is there, and stops again on request.

The head runs as `ray start --head --block` in a session of its own, so it outlives the command
that started it, and its process id is recorded (with the cluster's address) in a marker file
beside the namespaces' default data directories. Stopping sends that one process SIGTERM, which
shuts down the processes of that head alone; other Ray clusters on the machine are left alone,
unlike `ray stop`, which ends every Ray process it finds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .config import default_data_dir
from .errors import ServiceBusError

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
SIGNAL_CHECK_ENV = "RAY_get_check_signal_interval_milliseconds"
"""How often a Ray process waiting on the cluster looks for signals (Ctrl-C): the command line
sets it for its own process (`cli.app`); the head it starts keeps Ray's default."""


class RayHeadError(ServiceBusError):
    """A Ray head could not be started or stopped."""


@dataclass(frozen=True)
class StartedHead:
    """A Ray head started by `ray-broker start`: its `ray start` process and cluster address."""

    pid: int
    address: str


def _ray_executable() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else "ray"


def marker_path() -> Path:
    """Where the started head is recorded (its name is no valid namespace name)."""
    return Path(default_data_dir(".ray-head.json"))


def _log_path() -> Path:
    return Path(default_data_dir(".ray-head.log"))


def started_head() -> StartedHead | None:
    """The head `ray-broker start` started, if its process still runs."""
    try:
        record = json.loads(marker_path().read_text(encoding="utf-8"))
        head = StartedHead(int(record["pid"]), str(record["address"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return head if _is_ray_start(head.pid) else None


def _is_ray_start(pid: int) -> bool:
    """Whether `pid` runs `ray start ... --block` (and is not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"start" in command and b"--block" in command


def start_head(port: int | None, address_of_head: Callable[[], str | None]) -> StartedHead:
    """Run `ray start --head --block` detached and wait until its cluster answers.

    Called when no head runs here; `address_of_head` reads the address of this machine's running
    `ray start` head (None while there is none).
    """
    command = [_ray_executable(), "start", "--head", "--block", "--disable-usage-stats"]
    if port is not None:
        command.append(f"--port={port}")
    log = _log_path()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != SIGNAL_CHECK_ENV}
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, env=env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["no output"]
            raise RayHeadError(f"`{' '.join(command)}` exited with status {process.returncode}: {lines[-1]} "
                               f"(log: {log})")
        address = address_of_head()
        if address is not None:
            break
        if time.monotonic() > deadline:
            process.terminate()
            raise RayHeadError(f"`{' '.join(command)}` did not bring a cluster up in {START_TIMEOUT_S:g} s (log: {log})")
        time.sleep(0.25)
    head = StartedHead(process.pid, address)
    marker_path().write_text(json.dumps({"pid": head.pid, "address": head.address}), encoding="utf-8")
    return head


def stop_head(head: StartedHead) -> None:
    """Stop the head `ray-broker start` started (that process and its children only)."""
    from ray._common.utils import reset_ray_address
    from ray._private.utils import read_ray_address

    os.kill(head.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _is_ray_start(head.pid):
        if time.monotonic() > deadline:
            os.kill(head.pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    if read_ray_address() == head.address:
        reset_ray_address()
    marker_path().unlink(missing_ok=True)
