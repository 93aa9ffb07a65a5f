"""`ray-broker` run as a user runs it, each command its own process, against one real `ray start`
head that `ray-broker start` runs for this module.

Every process gets the module's own Ray temp dir and broker home, so that nothing else on this
machine is found or touched. In order: README's quickstart before `ray-broker start` (embedded
Ray); a shell session (queues, a body from stdin, status, peek, receive as JSON lines); bad input
(an unknown entity, a namespace that is not running, a 300 KB message, an invalid name: each one
line `error: <ErrorType>: ...` and exit status 1); a second driver that connects with no address,
the quickstart again (it joins the head, and ends by stopping the namespace); and `ray-broker
stop --ray` stopping that head alone (the demo itself runs in `test_demo.py`). Ray's own notices
never reach the user. Without any cluster, and at an address where none answers, commands fail
fast with one line.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import ray

from .helpers import free_port, isolated_env, short_tmpdir

pytestmark = pytest.mark.ray
README = Path(__file__).resolve().parents[2] / "README.md"
CLI = [str(Path(sys.executable).with_name("ray-broker"))]
RAY_NOTICES = ("(raylet)", "Token authentication", "WARNING", "INFO")
"""Text of Ray's start-up and worker notices, which must not reach a CLI user."""

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


def run(command: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; fail the test with its output if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    assert result.returncode == 0, f"{command} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def cli(argv: list[str], env: dict[str, str], *, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run `ray-broker argv` (its status unchecked); fails if any of Ray's notices reach its output."""
    result = subprocess.run([*CLI, *argv], input=stdin, capture_output=True, env=env, timeout=240, check=False)
    done = subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(), result.stderr.decode())
    for notice in RAY_NOTICES:
        assert notice not in done.stdout + done.stderr, f"Ray's notice reached the user:\n{done.stdout}\n{done.stderr}"
    return done


def ok(argv: list[str], env: dict[str, str], *, stdin: bytes | None = None) -> str:
    """`cli`, which must exit 0 with no error; returns its standard output."""
    result = cli(argv, env, stdin=stdin)
    assert result.returncode == 0 and "error" not in result.stderr, \
        f"{argv} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def fails(argv: list[str], env: dict[str, str], *, stdin: bytes | None = None) -> str:
    """`cli`, which must exit 1 with one line on standard error and nothing else; returns that line."""
    result = cli(argv, env, stdin=stdin)
    assert result.returncode == 1, f"{argv} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    return result.stderr.rstrip("\n")


@dataclass(frozen=True)
class Head:
    """The module's Ray head, started by `ray-broker start -n shop` after README's quickstart ran
    on an embedded Ray."""

    env: dict[str, str]
    pid: int
    address: str
    started: str
    """What `ray-broker start` printed."""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An isolated environment in which no Ray cluster runs."""
    ray_tmp = short_tmpdir("rbn")
    yield isolated_env(ray_tmp, str(tmp_path / "home"))
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """README's quickstart on an embedded Ray, then `ray-broker start -n shop` (a Ray head of its
    own); the head is stopped at the end (that process only) unless a test stopped it."""
    home = tmp_path_factory.mktemp("cluster-cli") / "home"
    ray_tmp = short_tmpdir("rbh")
    environment = isolated_env(ray_tmp, str(home))
    marker = home / ".ray-head.json"
    try:
        run([sys.executable, "-c", readme_quickstart()], environment)          # script first: embedded Ray
        started = ok(["start", "-n", "shop", "--port", str(free_port())], environment)
        record = json.loads(marker.read_text())
        yield Head(environment, int(record["pid"]), str(record["address"]), started)
    finally:
        if marker.exists():
            try:
                os.kill(json.loads(marker.read_text())["pid"], signal.SIGTERM)
                time.sleep(5)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_shell_session(head: Head) -> None:
    shop = ["-n", "shop"]
    assert "queue 'cli-orders' created (partitioned)" in ok(["queue", "create", "cli-orders", "--partitioned", *shop],
                                                             head.env)
    body = b'{"order": 7, "lines": ["' + b"x" * 100_000 + b'"]}'
    assert "sent 1 message(s) to queue 'cli-orders'" in ok(
        ["send", "cli-orders", "--body-file", "-", "--partition-key", "customer-7", *shop], head.env, stdin=body)
    assert "sent 20 message(s)" in ok(["send", "cli-orders", "--count", "20", *shop], head.env)
    status = ok(["status", *shop], head.env).splitlines()
    assert next(line for line in status if line.startswith("partition")).split()[:5] == [
        "partition", "node", "pid", "health", "restarts"]
    assert sum(1 for line in status if line.split()[:1] and line.split()[0].isdigit() and " up " in line) == 16
    assert next(line for line in status if line.startswith("cli-orders")).split()[5] == "21"
    peeked = ok(["peek", "cli-orders", "--count", "5", *shop], head.env).splitlines()
    assert peeked[0].split()[:2] == ["sequence", "partition"] and len(peeked) == 2 + 5
    lines = ok(["receive", "cli-orders", "--count", "50", "--wait", "2", "--json", *shop], head.env).splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 21
    assert next(r for r in records if r["partition_key"] == "customer-7")["body"].encode() == body


def test_bad_input_is_one_line_and_exit_status_1(head: Head) -> None:
    shop = ["-n", "shop"]
    ok(["queue", "create", "small", *shop], head.env)
    assert fails(["queue", "delete", "nosuch", *shop], head.env) == (
        "error: MessagingEntityNotFoundError: queue 'nosuch' does not exist in namespace 'shop' (names are "
        "case-insensitive); `ray-broker queue list -n shop` lists them")
    assert fails(["status", "-n", "absent"], head.env).startswith(
        "error: NamespaceNotRunningError: namespace 'absent' is not running on the Ray cluster at")
    assert fails(["send", "small", "--body-file", "-", *shop], head.env, stdin=b"m" * 300_000).startswith(
        "error: MessageSizeExceededError: a message is 300")
    assert fails(["queue", "create", "bad name!", *shop], head.env).startswith(
        "error: InvalidArgumentError: queue name 'bad name!' is invalid")
    assert fails(["send", "small", "--body", "x", "--partition-key", "k" * 200, *shop], head.env) == (
        "error: InvalidArgumentError: --partition-key is 200 characters long; the limit is 128")
    assert fails(["demo", "--messages", "500"], head.env) == (
        "error: InvalidArgumentError: the demo needs at least 1000 messages, got 500")


@pytest.mark.ray
def test_cli_start_then_drivers_and_scripts(ray_instance: None, head: Head) -> None:
    assert "started a Ray head at" in head.started and "namespace 'shop' running" in head.started
    second = run([sys.executable, "-c", SECOND_DRIVER], head.env)           # no address: finds the CLI's head
    assert "PARTITIONS 16 10" in second.stdout
    assert "from-driver" in ok(["status", "-n", "shop"], head.env)
    run([sys.executable, "-c", readme_quickstart()], head.env)               # CLI first: the same script joins it
    assert ray.get(ray.put("still here")) == "still here", "the test session's own Ray kept running"


def test_stop_ray_stops_that_head_alone(head: Head) -> None:
    stopped = ok(["stop", "-n", "shop", "--ray"], head.env)
    assert f"Ray head at {head.address} (pid {head.pid}) stopped" in stopped
    assert not Path(f"/proc/{head.pid}").exists() or b"--block" not in Path(f"/proc/{head.pid}/cmdline").read_bytes()
    assert "no Ray head started by `ray-broker start` is running" in ok(["stop", "--ray"], head.env)


def test_with_no_cluster_a_command_says_how_to_start(env: dict[str, str]) -> None:
    assert fails(["queue", "list", "-n", "shop"], env) == (
        "error: NamespaceNotRunningError: namespace 'shop' is not running here: no Ray cluster is (no address, "
        "RAY_ADDRESS or `ray start` head). Start it with `ray-broker start -n shop`, or give the address of the "
        "cluster it runs on")


def test_a_bad_address_fails_fast_with_a_typed_error(env: dict[str, str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    line = fails(["status", "-n", "shop", "--address", address], env)
    assert time.monotonic() - began < 30
    assert line.startswith(f"error: ClusterUnreachableError: no Ray cluster answers at {address}")
    code = f"import ray_broker as rb\ntry:\n    rb.connect('shop', address={address!r})\nexcept rb.ClusterUnreachableError as e:\n    print('TYPED', e)"
    began = time.monotonic()
    typed = run([sys.executable, "-c", code], env, timeout=120)
    assert time.monotonic() - began < 30 and f"TYPED no Ray cluster answers at {address}" in typed.stdout
