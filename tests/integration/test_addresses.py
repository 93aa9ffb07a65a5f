"""Addresses that are no Ray head, `stop --delete-data` with no Ray, and `start` refusing bad options
before it starts a Ray head: `ray-broker` and `rb.connect` run as a user runs them, each in its own
process with its own Ray temp dir and broker home, so that no other Ray on this machine is found or
touched. Every server here is a throwaway one on 127.0.0.1; none of these needs a Ray cluster,
except the last test, which checks the address probe against the session's Ray.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from ray_broker.client.reach import check_ray_head
from ray_broker.config import NamespaceConfig, save_config

from .helpers import isolated_env, short_tmpdir

CLI = str(Path(sys.executable).with_name("ray-broker"))
FAST_S = 30.0
"""How long a refusal may take, Python and Ray imports included, on a busy 2-core machine (12.9 s seen
beside the rest of the suite); what it rules out is waiting on a connection that never comes."""
RAY_LOG_LINES = ("gcs_client.cc", "rpc_client.h", "Failed to connect to GCS", "UserWarning")
CONNECT = """
import sys
import ray_broker as rb
try:
    rb.connect("shop", address=sys.argv[1])
except rb.errors.ClusterUnreachableError as error:
    print(f"TYPED {error}")
    sys.exit(1)
"""


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An isolated environment in which no Ray cluster runs (its own, empty, Ray temp dir)."""
    ray_tmp = short_tmpdir("rba")
    yield isolated_env(ray_tmp, str(tmp_path / "home"))
    shutil.rmtree(ray_tmp, ignore_errors=True)


def timed(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `command` to completion (a minute at most); returns it and the seconds it took."""
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    return result, time.monotonic() - began


@pytest.mark.parametrize(("kind", "words"), [
    ("http", "answers but is not a Ray head (GCS)"),
    ("closed", "no Ray cluster answers at"),
    ("ray-client", "is a Ray Client address"),
])
def test_an_address_that_is_no_ray_head_fails_fast_in_one_line(kind: str, words: str, env: dict[str, str],
                                                               http_address: str, closed_address: str) -> None:
    address = {"http": http_address, "closed": closed_address, "ray-client": "ray://127.0.0.1:10001"}[kind]
    result, took = timed([CLI, "status", "-n", "shop", "--address", address], env)
    assert result.returncode == 1 and took < FAST_S, (took, result.stdout, result.stderr)
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ClusterUnreachableError: ") and words in result.stderr
    assert address in result.stderr

    result, took = timed([sys.executable, "-c", CONNECT, address], env)
    assert result.returncode == 1 and took < FAST_S, (took, result.stdout, result.stderr)
    assert result.stdout.startswith("TYPED ") and words in result.stdout and result.stdout.count("\n") == 1
    for line in RAY_LOG_LINES:
        assert line not in result.stderr, result.stderr


def test_stop_delete_data_with_no_ray_deletes_the_stores(env: dict[str, str]) -> None:
    directory = Path(env["RAY_BROKER_HOME"]) / "shop"
    save_config(NamespaceConfig("shop", "standard", 16, str(directory), "normal", 1, None))
    (directory / "partition-000.sqlite3").write_bytes(b"a store")
    result, _ = timed([CLI, "stop", "-n", "shop", "--delete-data"], env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == "no Ray cluster is running here, so namespace 'shop' is not running; its data is deleted\n"
    assert not directory.exists()

    again, _ = timed([CLI, "stop", "-n", "shop", "--delete-data"], env)
    assert again.returncode == 0 and f"it has no data to delete in {directory}" in again.stdout


def test_stop_delete_data_with_no_ray_refuses_stores_another_process_holds(env: dict[str, str]) -> None:
    directory = Path(env["RAY_BROKER_HOME"]) / "shop"
    save_config(NamespaceConfig("shop", "standard", 16, str(directory), "normal", 1, None))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom ray_broker.engine.store_lock import StoreLock\n"
                               "lock = StoreLock(sys.argv[1], owner='another cluster')\nlock.acquire()\nprint('held', flush=True)\n"
                               "time.sleep(60)", str(directory / "partition-003.sqlite3")],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result, _ = timed([CLI, "stop", "-n", "shop", "--delete-data"], env)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1 and result.stderr.startswith("error: StoreLockedError: "), result.stderr
    assert directory.exists()


def test_start_refuses_bad_options_before_starting_a_ray_head(env: dict[str, str]) -> None:
    marker = Path(env["RAY_BROKER_HOME"]) / ".ray-head.json"
    try:
        result, took = timed([CLI, "start", "-n", "shop", "--partitions", "4"], env)
        assert result.returncode == 1 and took < FAST_S, (took, result.stdout, result.stderr)
        assert result.stderr == ("error: InvalidArgumentError: the standard tier always has 16 partitions; "
                                 "leave out --partitions\n")
        assert result.stdout == ""
        assert not marker.exists() and os.listdir(env["RAY_TMPDIR"]) == [], "a Ray head was started"
    finally:
        if marker.exists():
            os.kill(json.loads(marker.read_text())["pid"], signal.SIGTERM)


def test_start_refuses_more_replicas_than_the_head_it_would_start_can_hold_before_starting_it(
        env: dict[str, str]) -> None:
    marker = Path(env["RAY_BROKER_HOME"]) / ".ray-head.json"
    try:
        result, took = timed([CLI, "start", "-n", "shop", "--replicas", "3"], env)
        assert result.returncode == 1 and took < FAST_S, (took, result.stdout, result.stderr)
        assert result.stderr.startswith("error: InvalidOperationError: replicas=3 needs 3 nodes"), result.stderr
        assert result.stdout == ""
        assert not marker.exists() and os.listdir(env["RAY_TMPDIR"]) == [], "a Ray head was started"
    finally:
        if marker.exists():
            os.kill(json.loads(marker.read_text())["pid"], signal.SIGTERM)


def test_start_refuses_a_tier_its_stores_were_not_made_with_before_starting_a_ray_head(env: dict[str, str]) -> None:
    directory = Path(env["RAY_BROKER_HOME"]) / "shop"
    save_config(NamespaceConfig("shop", "standard", 16, str(directory), "normal", 1, None))
    marker = Path(env["RAY_BROKER_HOME"]) / ".ray-head.json"
    try:
        result, _ = timed([CLI, "start", "-n", "shop", "--sku", "premium", "--partitions", "4"], env)
        assert result.returncode == 1 and result.stderr.startswith("error: InvalidOperationError: "), result.stderr
        assert "the partition count and tier can never change" in result.stderr
        assert not marker.exists() and os.listdir(env["RAY_TMPDIR"]) == [], "a Ray head was started"
    finally:
        if marker.exists():
            os.kill(json.loads(marker.read_text())["pid"], signal.SIGTERM)


def test_the_probe_takes_a_real_ray_head(ray_instance: None) -> None:
    import ray

    port = ray.get_runtime_context().gcs_address.rpartition(":")[2]
    check_ray_head(f"127.0.0.1:{port}")
