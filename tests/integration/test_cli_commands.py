"""`ray-broker` run as its own process against the session's namespace: receiving from a topic,
typed application properties, the message options of `send`, `--json` documents, and `bench`
outside the source checkout."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import ray_broker as rb

from .helpers import free_port, isolated_env, short_tmpdir

CLI = str(Path(sys.executable).with_name("ray-broker"))


def run_cli(argv: list[str], *, cwd: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run `ray-broker argv` in a process of its own (its exit status unchecked)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([CLI, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          check=False)


def ok(argv: list[str]) -> str:
    """`run_cli`, which must succeed; its standard output."""
    result = run_cli(argv)
    assert result.returncode == 0, f"{argv} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture
def target(namespace: rb.Namespace) -> list[str]:
    """The options that point a command at the session's namespace."""
    import ray

    return ["-n", namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]


def test_bench_runs_outside_the_source_checkout(tmp_path: Path) -> None:
    installed = subprocess.run([sys.executable, "-c", "import benchmarks.suite"], capture_output=True, text=True,
                               cwd=str(tmp_path), timeout=60, check=False)
    assert installed.returncode == 0, f"the benchmarks are not installed with the package:\n{installed.stderr}"
    result = run_cli(["bench", "--help"], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "--quick" in result.stdout and "--rounds" in result.stdout


@pytest.mark.parametrize("command", ["receive", "peek"])
def test_receiving_from_a_topic_says_to_name_a_subscription(namespace: rb.Namespace, target: list[str],
                                                            command: str) -> None:
    topic = f"clit-{uuid.uuid4().hex[:10]}"
    namespace.create_topic(topic)
    try:
        result = run_cli([command, topic, *target])
    finally:
        namespace.delete_topic(topic)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: InvalidOperationError: '{topic}' is a topic: {command} from one of "
                                    f"its subscriptions (`ray-broker {command} {topic}/subscriptions/SUBSCRIPTION")
    assert "does not exist" not in result.stderr and result.stderr.count("\n") == 1


def test_typed_properties_meet_a_numeric_filter(namespace: rb.Namespace, target: list[str]) -> None:
    topic = f"clit-{uuid.uuid4().hex[:10]}"
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "big", rule=rb.SqlFilter("amount > 100 AND vip = TRUE"))
    try:
        ok(["send", topic, "--body", "typed", "--property", "amount:int=250", "--property", "vip:bool=true",
            *target])
        ok(["send", topic, "--body", "small", "--property", "amount:float=99.5", "--property", "vip:bool=true",
            *target])
        ok(["send", topic, "--body", "text", "--property", "amount=250", "--property", "vip:bool=true", *target])
        with namespace.get_subscription_receiver(topic, "big", max_wait_time=2) as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
            for message in got:
                receiver.complete_message(message)
    finally:
        namespace.delete_topic(topic)
    assert [str(m) for m in got] == ["typed"]
    assert got[0].application_properties == {"amount": 250, "vip": True}


def test_send_sets_message_id_correlation_id_subject_and_time_to_live(namespace: rb.Namespace,
                                                                      target: list[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue)
    try:
        ok(["send", queue, "--body", "x", "--message-id", "order-7", "--correlation-id", "corr-1",
            "--subject", "eu", "--ttl", "90.5", *target])
        records = [json.loads(line) for line in ok(["receive", queue, "--json", "--wait", "2", *target]).splitlines()]
    finally:
        namespace.delete_queue(queue)
    assert len(records) == 1
    record = records[0]
    assert (record["message_id"], record["correlation_id"], record["subject"]) == ("order-7", "corr-1", "eu")
    assert record["time_to_live"] == 90.5 and record["expires_at_utc"] > record["enqueued_time_utc"]


def test_status_and_lists_print_json(namespace: rb.Namespace, target: list[str]) -> None:
    queue, topic = f"cli-{uuid.uuid4().hex[:10]}", f"clit-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, enable_partitioning=True)
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "all")
    namespace.get_queue_sender(queue).send_messages([rb.Message(f"m{i}") for i in range(3)])
    try:
        status: dict[str, Any] = json.loads(ok(["status", "--json", *target]))
        queues = json.loads(ok(["queue", "list", "--json", *target]))
        topics = json.loads(ok(["topic", "list", "--json", *target]))
        subscriptions = json.loads(ok(["subscription", "list", topic, "--json", *target]))
    finally:
        namespace.delete_queue(queue)
        namespace.delete_topic(topic)
    assert status["namespace"] == namespace.name and status["partition_count"] == namespace.partition_count
    assert status["amqp_port"] is None and status["management_port"] is None, "no AMQP front end"
    assert [p["index"] for p in status["partitions"]] == list(range(namespace.partition_count))
    assert all(p["health"] == "up" and isinstance(p["pid"], int) for p in status["partitions"])
    by_path = {e["path"]: e for e in status["entities"]}
    assert by_path[queue]["kind"] == "queue" and by_path[queue]["runtime"]["active_message_count"] == 3
    assert by_path[f"{topic}/subscriptions/all"]["kind"] == "subscription"
    listed = next(q for q in queues if q["name"] == queue)
    assert listed["enable_partitioning"] is True and listed["lock_duration"] == 60.0
    assert listed["runtime"]["active_message_count"] == 3 and listed["auto_delete_on_idle"] is None
    assert next(t for t in topics if t["name"] == topic)["runtime"]["subscription_count"] == 1
    assert [s["name"] for s in subscriptions] == ["all"] and subscriptions[0]["topic_name"] == topic


def one_error_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The single line a failed run printed on standard error; fails unless it exited `status`."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stderr.rstrip("\n")


def peeked(namespace: rb.Namespace, queue: str) -> list[rb.ReceivedMessage]:
    """Every message of `queue`, browsed."""
    with namespace.get_queue_receiver(queue) as receiver:
        return receiver.peek_messages(100)


@pytest.mark.parametrize("argv", [
    ["receive", "--session-id", "s1"],
    ["receive", "--no-complete", "--session-id", "s1"],
    ["peek", "--session-id", "s1"],
], ids=["receive", "receive-no-complete", "peek"])
def test_a_session_id_on_an_entity_without_sessions_is_refused_before_anything_is_read(
        namespace: rb.Namespace, target: list[str], argv: list[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue)
    namespace.get_queue_sender(queue).send_messages([rb.Message(f"m{i}") for i in range(3)])
    try:
        result = run_cli([argv[0], queue, *argv[1:], "--wait" if argv[0] == "receive" else "--count", "2", *target])
        left = peeked(namespace, queue)
    finally:
        namespace.delete_queue(queue)
    line = one_error_line(result, 1)
    assert line == (f"error: InvalidOperationError: queue '{queue}' does not require sessions, so it has no session "
                    f"'s1': {argv[0]} it without --session-id")
    assert result.stdout == ""
    assert [m.delivery_count for m in left] == [0, 0, 0], "messages were received"


@pytest.mark.parametrize("command", ["receive", "peek"])
def test_a_session_id_on_a_dead_letter_sub_queue_is_refused(namespace: rb.Namespace, target: list[str],
                                                           command: str) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, requires_session=True)
    try:
        result = run_cli([command, queue, "--dead-letter", "--session-id", "s1", *target])
    finally:
        namespace.delete_queue(queue)
    assert one_error_line(result, 1) == (f"error: InvalidOperationError: the dead-letter sub-queue of queue '{queue}' "
                                         f"has no sessions: {command} it without --session-id")


def test_peek_and_receive_with_a_session_id_read_that_session_alone(namespace: rb.Namespace,
                                                                    target: list[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, requires_session=True, enable_partitioning=True)
    namespace.get_queue_sender(queue).send_messages(
        [rb.Message(f"{session}-{i}", session_id=session) for i in range(3) for session in ("s1", "s2", "s3")])
    try:
        peeks = [json.loads(line) for line in ok(["peek", queue, "--session-id", "s2", "--count", "20", "--json",
                                                  *target]).splitlines()]
        receives = [json.loads(line) for line in ok(["receive", queue, "--session-id", "s3", "--wait", "1",
                                                     "--json", *target]).splitlines()]
        left = peeked(namespace, queue)
    finally:
        namespace.delete_queue(queue)
    assert sorted(r["body"] for r in peeks) == ["s2-0", "s2-1", "s2-2"]
    assert sorted(r["body"] for r in receives) == ["s3-0", "s3-1", "s3-2"]
    assert sorted(str(m) for m in left) == ["s1-0", "s1-1", "s1-2", "s2-0", "s2-1", "s2-2"]


@pytest.mark.parametrize("lock_duration", [60, 1], ids=["locks-held", "locks-lapse"])
def test_receive_no_complete_shows_each_message_once_and_abandons_it_once(namespace: rb.Namespace,
                                                                        target: list[str], lock_duration: int) -> None:
    """With locks of 1 s, the messages come back to the waiting receive while the command holds them."""
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, enable_partitioning=True, lock_duration=timedelta(seconds=lock_duration))
    namespace.get_queue_sender(queue).send_messages([rb.Message(f"m{i}") for i in range(3)])
    try:
        result = run_cli(["receive", queue, "--no-complete", "--count", "10", "--wait", "3", "--json", *target])
        left = peeked(namespace, queue)
    finally:
        namespace.delete_queue(queue)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["body"] for r in records) == ["m0", "m1", "m2"]
    assert [r["delivery_count"] for r in records] == [1, 1, 1]
    assert f"received and abandoned 3 message(s) from queue '{queue}'" in result.stderr
    assert sorted(str(m) for m in left) == ["m0", "m1", "m2"]
    if lock_duration == 60:
        assert [m.delivery_count for m in left] == [1, 1, 1]


def test_send_without_a_body_is_a_usage_error(namespace: rb.Namespace, target: list[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue)
    try:
        bare = run_cli(["send", queue, *target])
        numbered = run_cli(["send", queue, "--count", "2", *target])
        left = peeked(namespace, queue)
    finally:
        namespace.delete_queue(queue)
    line = one_error_line(bare, 2)
    assert line == ("error: UsageError: give --body, --body-file or --count (numbered bodies): a message needs a "
                    "body (see `ray-broker send --help`)")
    assert numbered.returncode == 0, numbered.stderr
    assert [str(m) for m in left] == ["message 0", "message 1"]


def test_create_names_the_fixed_options_only_when_there_are_some(namespace: rb.Namespace, target: list[str]) -> None:
    plain, fixed, topic = (f"cli-{uuid.uuid4().hex[:10]}" for _ in range(3))
    try:
        lines = [ok(["queue", "create", plain, *target]), ok(["queue", "create", fixed, "--partitioned", "--sessions",
                                                              *target]),
                 ok(["topic", "create", topic, *target]), ok(["subscription", "create", topic, "all", *target]),
                 ok(["subscription", "create", topic, "chats", "--sessions", *target])]
    finally:
        for queue in (plain, fixed):
            namespace.delete_queue(queue)
        namespace.delete_topic(topic)
    assert lines == [f"queue '{plain}' created\n", f"queue '{fixed}' created (partitioned,sessions)\n",
                     f"topic '{topic}' created\n", f"subscription 'all' of topic '{topic}' created\n",
                     f"subscription 'chats' of topic '{topic}' created (sessions)\n"]


@pytest.mark.parametrize("command", [[], ["start"], ["queue", "create"], ["receive"], ["queue"]],
                         ids=["ray-broker", "start", "queue-create", "receive", "queue"])
def test_help_shows_no_value_type_after_a_flag(command: list[str]) -> None:
    shown = ok([*command, "--help"])
    assert "--help" in shown and "<bool>" not in shown, shown
    assert "<str>" in shown or not command or command == ["queue"], "options that take a value keep their type"


@pytest.mark.parametrize("cluster", ["running", "none"])
def test_start_on_a_busy_port_fails_at_once_naming_it(ray_instance: None, tmp_path: Path, cluster: str) -> None:
    """On the session's cluster, and where no cluster runs (before `start` would run a Ray head)."""
    home, ray_tmp = short_tmpdir("rbh-"), short_tmpdir("rbr-")
    env = isolated_env(ray_tmp, home) if cluster == "none" else \
        {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    data_dir = tmp_path / "busy"
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", free_port()))
        holder.listen()
        busy = holder.getsockname()[1]
        argv = ["start", "-n", "busy", "--data-dir", str(data_dir), "--amqp-port", str(free_port()),
                "--management-port", str(busy)]
        if cluster == "running":
            import ray

            argv += ["--address", str(ray.get_runtime_context().gcs_address)]
        try:
            started = time.monotonic()
            result = subprocess.run([CLI, *argv], capture_output=True, text=True, env=env, timeout=180, check=False)
            took = time.monotonic() - started
            ray_made = os.listdir(ray_tmp)
        finally:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    assert one_error_line(result, 1).startswith(
        f"error: PortUnavailableError: port {busy} (the management port) cannot be listened on: Address already "
        "in use")
    assert took < 30, f"it failed after {took:.0f} s"
    assert not data_dir.exists(), "the start wrote its configuration or stores"
    if cluster == "none":
        assert ray_made == [], "a Ray head was started"


def test_start_with_a_min_in_sync_above_the_replicas_is_refused_in_one_line_before_anything_starts() -> None:
    home, ray_tmp = short_tmpdir("rbh-"), short_tmpdir("rbr-")
    try:
        result = subprocess.run([CLI, "start", "-n", "two", "--replicas", "2", "--min-in-sync", "3"],
                                capture_output=True, text=True, env=isolated_env(ray_tmp, home), timeout=120,
                                check=False)
        started = os.listdir(ray_tmp)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: InvalidArgumentError: min_in_sync must be None or an int from 1 to replicas (2), got 3"], result.stderr
    assert started == [], "no Ray was started"


def test_start_with_two_replicas_notes_in_one_line_that_they_cannot_fail_over() -> None:
    """Where no cluster runs: the note comes before the refusal of the head it would start (one node)."""
    home, ray_tmp = short_tmpdir("rbh-"), short_tmpdir("rbr-")
    try:
        result = subprocess.run([CLI, "start", "-n", "two", "--replicas", "2"], capture_output=True, text=True,
                                env=isolated_env(ray_tmp, home), timeout=120, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "warning: --replicas 2 cannot fail over: a change is acknowledged only once both replicas hold it (a majority "
        "of 2), so losing either node stops each partition's keyed traffic until that node returns; use --replicas 3 "
        "for failover, or --min-in-sync 1 to go on with the replica that holds every acknowledged change",
        "error: InvalidOperationError: replicas=2 needs 2 nodes with distinct stores (distinct ray-broker-store "
        "labels where nodes have one); the cluster has 1. Add nodes, or start with replicas <= 1"], result.stderr
