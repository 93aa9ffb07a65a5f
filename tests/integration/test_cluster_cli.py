"""Start and connect find the namespace: a real `ray start` head run by `ray-broker start`.

Each step runs as its own process, as a user would run it, with its own Ray temp dir and broker
home so that nothing else on this machine is found or touched: README's quickstart before and
after `ray-broker start`, a second driver that connects with no address, `ray-broker demo` while
the head runs, `ray-broker stop --ray` stopping that head alone, and a bad address failing fast.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import ray

from .helpers import isolated_env, short_tmpdir

README = Path(__file__).resolve().parents[2] / "README.md"
CLI = [str(Path(sys.executable).with_name("ray-broker"))]

SECOND_DRIVER = """
import ray_broker as rb
ns = rb.connect("shop")
ns.create_queue("from-driver", enable_partitioning=True)
with ns.get_queue_sender("from-driver") as sender:
    sender.send_messages([rb.Message(f"m{i}") for i in range(10)])
print("PARTITIONS", ns.partition_count, ns.get_queue_runtime_properties("from-driver").active_message_count)
"""


def readme_quickstart() -> str:
    """The Python block of README's Quickstart section, exactly as written."""
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An isolated environment; any Ray head started in it is stopped (that process only) at the end."""
    ray_tmp = short_tmpdir("rbh")
    environment = isolated_env(ray_tmp, str(tmp_path / "home"))
    yield environment
    marker = tmp_path / "home" / ".ray-head.json"
    if marker.exists():
        pid = json.loads(marker.read_text())["pid"]
        try:
            os.kill(pid, signal.SIGTERM)
            time.sleep(5)
        except ProcessLookupError:
            pass
    shutil.rmtree(ray_tmp, ignore_errors=True)


def run(command: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; fail the test with its output if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    assert result.returncode == 0, f"{command} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.ray
def test_script_first_then_cli_then_script_demo_and_stop(ray_instance: None, env: dict[str, str],
                                                         tmp_path: Path) -> None:
    quickstart = readme_quickstart()
    run([sys.executable, "-c", quickstart], env)                       # script first: embedded Ray

    started = run([*CLI, "start", "-n", "shop", "--port", str(free_port())], env)
    assert "started a Ray head at" in started.stdout
    head = json.loads((tmp_path / "home" / ".ray-head.json").read_text())

    second = run([sys.executable, "-c", SECOND_DRIVER], env)            # no address: finds the CLI's head
    assert "PARTITIONS 16 10" in second.stdout
    status = run([*CLI, "status", "-n", "shop"], env)
    assert "from-driver" in status.stdout

    run([sys.executable, "-c", quickstart], env)                       # CLI first: the same script joins it
    demo = run([*CLI, "demo", "--messages", "1000"], env)
    assert "demo PASSED" in demo.stdout

    stopped = run([*CLI, "stop", "-n", "shop", "--ray"], env)
    assert f"Ray head at {head['address']} (pid {head['pid']}) stopped" in stopped.stdout
    assert not Path(f"/proc/{head['pid']}").exists() or b"--block" not in Path(f"/proc/{head['pid']}/cmdline").read_bytes()
    assert ray.get(ray.put("still here")) == "still here", "the test session's own Ray kept running"
    again = run([*CLI, "stop", "--ray"], env)
    assert "no Ray head started by `ray-broker start` is running" in again.stdout


def test_a_bad_address_fails_fast_with_a_typed_error(env: dict[str, str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    result = subprocess.run([*CLI, "status", "-n", "shop", "--address", address], capture_output=True, text=True,
                            env=env, timeout=120, check=False)
    assert time.monotonic() - began < 30
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: no Ray cluster answers at {address}") and result.stderr.count("\n") == 1
    code = f"import ray_broker as rb\ntry:\n    rb.connect('shop', address={address!r})\nexcept rb.ClusterUnreachableError as e:\n    print('TYPED', e)"
    began = time.monotonic()
    typed = run([sys.executable, "-c", code], env, timeout=120)
    assert time.monotonic() - began < 30 and f"TYPED no Ray cluster answers at {address}" in typed.stdout
