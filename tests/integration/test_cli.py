"""The `ray-broker` command line in this process: parsing, error lines and exit codes, the shell
wording of library errors, tables, Ray's notices, and the commands against the session's namespace."""
from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

import ray_broker as rb
from ray_broker.cli import main
from ray_broker.cli import tools
from ray_broker.cli.failures import error_line, shell_wording
from ray_broker.cli.quiet import DropRayNotices
from ray_broker.client import lifecycle
from ray_broker.tables import format_table

from .helpers import kill_partition, wait_partition_back


def one_error_line(err: str) -> str:
    """The single line of an error report; fails unless there is exactly one and it is one."""
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err.rstrip("\n")


@pytest.mark.parametrize(("argv", "words"), [
    (["send"], "Missing argument 'ENTITY'"),
    (["topic", "list", "--bogus"], "No such option: --bogus"),
    (["send", "q", "--count", "0"], "'--count'"),
    (["start", "--sku", "gold"], "'gold' is not one of 'basic', 'standard', 'premium'"),
    (["queue", "create", "q", "--lock-duration", "-5"], "'--lock-duration'"),
    (["send", "q", "--body", "a", "--body-file", "f"], "give --body or --body-file, not both"),
    (["send", "q", "--property", "novalue"], "'novalue' is not KEY=VALUE"),
])
def test_a_command_line_that_does_not_parse_is_one_usage_line(argv: list[str], words: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: UsageError: ") and words in line and "--help`" in line
    assert "day" not in line


def test_no_arguments_print_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert "Usage: ray-broker" in captured.out + captured.err and "error:" not in captured.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("ray-broker ")


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["start"], ["stop"], ["status"], ["queue", "create"], ["topic", "show"],
                 ["subscription", "create"], ["send"], ["receive"], ["peek"], ["demo"]):
        assert main([*argv, "--help"]) == 0
        assert "Usage: ray-broker " + " ".join(argv) in capsys.readouterr().out


def test_the_demo_refuses_too_few_messages_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--messages", "500"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line == "error: InvalidArgumentError: the demo needs at least 1000 messages, got 500"


def test_bench_passes_its_arguments_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    class Suite:
        @staticmethod
        def main(argv: list[str]) -> int:
            seen.append(argv)
            return 3

    monkeypatch.setattr(tools, "benchmark_suite", lambda: Suite)
    assert main(["bench", "--quick", "--json", "out.json", "--help"]) == 3
    assert seen == [["--quick", "--json", "out.json", "--help"]]


@pytest.mark.parametrize(("library", "shell"), [
    ("namespace 'x' is not running here. Start it with ray_broker.start('x'), or give its address",
     "namespace 'x' is not running here. Start it with `ray-broker start -n x`, or give its address"),
    ("the standard tier always has 16 partitions; leave partitions=None",
     "the standard tier always has 16 partitions; leave out --partitions"),
    ("the messages total 300000 bytes; the standard tier allows 262144 bytes per batch: send them in smaller "
     "batches (create_message_batch() packs them for you)",
     "the messages total 300000 bytes; the standard tier allows 262144 bytes per batch: send them in smaller "
     "batches (lower --batch)"),
    ("namespace 'x' requires an auth token: pass auth_token= or set RAY_BROKER_AUTH_TOKEN",
     "namespace 'x' requires an auth token: set RAY_BROKER_AUTH_TOKEN to its token"),
    ("partition_key is 200 characters long; the limit is 128", "--partition-key is 200 characters long; the limit is 128"),
    ("lock_duration must be from 0:00:01 to 0:05:00", "--lock-duration must be from 0:00:01 to 0:05:00"),
])
def test_library_advice_is_worded_for_the_shell(library: str, shell: str) -> None:
    assert shell_wording(library) == shell


def test_an_error_is_one_line_with_its_type() -> None:
    error = rb.errors.PartitionUnavailableError("partition 3 did not answer\nwithin 60 s: retry", partition=3)
    assert error_line(error) == "error: PartitionUnavailableError: partition 3 did not answer within 60 s: retry"
    assert error_line(RuntimeError("x" * 2000)).endswith("... (run with --debug for all of it)")


def test_debug_adds_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lifecycle, "cluster_address", lambda address=None: None)
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    assert main(["--debug", "status", "-n", "shop"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("error: NamespaceNotRunningError: ")


def test_no_cluster_is_one_clean_error_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lifecycle, "cluster_address", lambda address=None: None)
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    assert main(["queue", "list", "-n", "shop"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("error: NamespaceNotRunningError: namespace 'shop' is not running here: no Ray cluster")
    assert "`ray-broker start -n shop`" in line and "ray_broker.start" not in line


def test_ray_notices_are_dropped_and_everything_else_kept() -> None:
    target = io.StringIO()
    stream = DropRayNotices(target)
    stream.write("kept 1\n\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started\n")
    stream.write("(raylet) another notice\nbody mentions (raylet) inside\npartial")
    stream.flush()
    assert target.getvalue() == "kept 1\nbody mentions (raylet) inside\npartial"


def test_format_table_has_a_header_and_aligns_numbers_right() -> None:
    lines = format_table(["name", "count"], [["a", 5], ["bbb", 120], ["c", None]]).splitlines()
    assert lines[0].split() == ["name", "count"] and set(lines[1]) == {"─"}
    assert [line.split() for line in lines[2:]] == [["a", "5"], ["bbb", "120"], ["c", "-"]]
    assert lines[2].endswith("  5") and lines[3].endswith("120")


# ---------------------------------------------------------------------------------------------- on the session's namespace


@pytest.fixture
def target(namespace: rb.Namespace) -> list[str]:
    """The options that point a command at the session's namespace (on the Ray of this process)."""
    import ray

    return ["-n", namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]


def test_queue_lifecycle_and_messages(namespace: rb.Namespace, target: list[str], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    assert main(["queue", "create", queue, "--partitioned", "--lock-duration", "30", *target]) == 0
    assert main(["queue", "list", *target]) == 0
    assert queue in capsys.readouterr().out
    assert namespace.get_queue(queue).lock_duration.total_seconds() == 30
    assert main(["send", queue, "--count", "30", "--batch", "7", *target]) == 0
    body = tmp_path / "body.json"
    body.write_bytes(b'{"id": 7}')
    assert main(["send", queue, "--body-file", str(body), "--partition-key", "k1", "--property", "tier=gold",
                 *target]) == 0
    assert "sent 1 message(s) to queue" in capsys.readouterr().out
    assert main(["peek", queue, "--count", "50", *target]) == 0
    peeked = capsys.readouterr()
    assert "peeked 31 message(s)" in peeked.err and '{"id": 7}' in peeked.out
    assert peeked.out.splitlines()[0].split()[:3] == ["sequence", "partition", "message"]
    assert main(["receive", queue, "--count", "3", "--no-complete", *target]) == 0
    assert "received and abandoned 3 message(s)" in capsys.readouterr().err
    assert namespace.get_queue_runtime_properties(queue).active_message_count == 31
    assert main(["receive", queue, "--count", "100", "--wait", "2", "--json", *target]) == 0
    received = capsys.readouterr()
    records = [json.loads(line) for line in received.out.splitlines()]
    assert len(records) == 31 and "received and completed 31 message(s)" in received.err
    keyed = next(r for r in records if r["partition_key"] == "k1")
    assert keyed["body"] == '{"id": 7}' and keyed["application_properties"] == {"tier": "gold"}
    assert namespace.get_queue_runtime_properties(queue).active_message_count == 0
    assert main(["queue", "show", queue, *target]) == 0
    assert "lock_duration" in capsys.readouterr().out
    assert main(["queue", "delete", queue, *target]) == 0
    capsys.readouterr()
    assert main(["queue", "delete", queue, *target]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: MessagingEntityNotFoundError: queue '{queue}' does not exist in namespace")
    assert "create it first" not in line


def test_topics_and_subscriptions(namespace: rb.Namespace, target: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"clit-{uuid.uuid4().hex[:10]}"
    assert main(["topic", "create", topic, "--partitioned", *target]) == 0
    assert main(["subscription", "create", topic, "all", *target]) == 0
    assert main(["subscription", "create", topic, "gold", "--sql-filter", "tier = 'gold'", *target]) == 0
    assert main(["send", topic, "--count", "3", "--property", "tier=gold", *target]) == 0
    assert main(["send", topic, "--count", "2", *target]) == 0
    assert "sent 2 message(s) to topic" in capsys.readouterr().out
    assert main(["subscription", "list", topic, *target]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["all"][-2] == "5" and rows["gold"][-2] == "3"   # active, then dead-letter
    assert main(["peek", f"{topic}/subscriptions/gold", "--json", *target]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["receive", f"{topic}/subscriptions/all", "--count", "10", "--wait", "1", *target]) == 0
    assert "received and completed 5 message(s) from subscription" in capsys.readouterr().err
    assert main(["topic", "list", *target]) == 0
    assert main(["subscription", "show", topic, "gold", *target]) == 0
    assert "tier = 'gold'" in capsys.readouterr().out
    assert main(["subscription", "delete", topic, "gold", *target]) == 0
    assert main(["topic", "delete", topic, *target]) == 0
    assert namespace.list_topics() == [] or topic not in [t.name for t in namespace.list_topics()]


def test_status_shows_every_partition_and_entity(namespace: rb.Namespace, target: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, enable_partitioning=True)
    namespace.get_queue_sender(queue).send_messages([rb.Message(f"m{i}") for i in range(5)])
    assert main(["status", *target]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in lines if line.startswith("partition"))
    assert header == ["partition", "node", "pid", "health", "restarts", "active", "dead-letter", "scheduled"]
    partition_rows = [line.split() for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert [int(row[0]) for row in partition_rows] == list(range(namespace.partition_count))
    assert all(row[4] == "up" and row[5].isdigit() for row in partition_rows)   # node is "ip (id)": two words
    assert sum(int(row[6]) for row in partition_rows) >= 5
    queue_row = next(line.split() for line in lines if line.startswith(queue))
    assert queue_row[1:6] == ["queue", "partitioned", "Active", "Available", "5"]
    namespace.delete_queue(queue)


def test_status_counts_a_partition_restart(namespace: rb.Namespace, target: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def row(index: int) -> list[str]:
        assert main(["status", *target]) == 0
        lines = capsys.readouterr().out.splitlines()
        return next(line.split() for line in lines if line.split()[:1] == [str(index)])

    before = row(5)
    old_pid = kill_partition(namespace, 5)
    wait_partition_back(namespace, 5, old_pid)
    after = row(5)
    assert before[3] == str(old_pid) and after[3] != str(old_pid) and after[4] == "up"
    assert int(after[5]) == int(before[5]) + 1


def test_start_with_other_options_on_a_running_namespace_is_refused(namespace: rb.Namespace, target: list[str],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["start", *target, "--sku", "standard"]) == 0
    assert "already running" in capsys.readouterr().out
    assert main(["start", *target, "--sku", "premium", "--partitions", "4", "--durability", "memory"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: InvalidOperationError: namespace '{namespace.name}' is already running with other")
    assert "--sku premium (it runs with standard)" in line and "--partitions 4 (it runs with 16)" in line
    assert "--durability memory (it runs with normal)" in line


@pytest.mark.parametrize(("argv", "start"), [
    (["send", "nosuch", "--body", "x"], "error: MessagingEntityNotFoundError: namespace '{ns}' has no queue or topic"),
    (["receive", "nosuch"], "error: MessagingEntityNotFoundError: queue 'nosuch' does not exist in namespace"),
    (["peek", "t/subscriptions/s"], "error: MessagingEntityNotFoundError: subscription 't/subscriptions/s' does not"),
    (["queue", "create", "bad name!"], "error: InvalidArgumentError: queue name 'bad name!' is invalid"),
    (["send", "q", "--body", "x", "--partition-key", "k" * 200],
     "error: InvalidArgumentError: --partition-key is 200 characters"),
    (["status", "-n", "absent-ns"], "error: NamespaceNotRunningError: namespace 'absent-ns' is not running"),
])
def test_bad_input_is_one_error_line(namespace: rb.Namespace, target: list[str], argv: list[str], start: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, *target] if "-n" not in argv else [*argv, *target[2:]]) == 1
    assert one_error_line(capsys.readouterr().err).startswith(start.format(ns=namespace.name))
