"""The `ray-broker` command line: parsing, error reporting, and the commands against a running namespace."""
from __future__ import annotations

import uuid

import pytest

import ray_broker as rb
from ray_broker import cli
from ray_broker.tables import format_table
from ray_broker.client import lifecycle


def test_parser_knows_every_command() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["send", "orders", "--count", "5", "--partition-key", "k", "-n", "ns1"])
    assert (args.queue, args.count, args.partition_key, args.namespace) == ("orders", 5, "k", "ns1")
    args = parser.parse_args(["queue", "create", "q1", "--partitioned", "--sessions", "--lock-duration", "30"])
    assert args.partitioned and args.sessions and args.lock_duration == 30.0
    args = parser.parse_args(["receive", "q1", "--max", "3", "--wait", "1", "--dead-letter"])
    assert (args.max, args.wait, args.dead_letter) == (3, 1.0, True)
    args = parser.parse_args(["stop", "--delete-data", "--ray"])
    assert args.delete_data and args.ray and args.namespace == cli.DEFAULT_NAMESPACE
    assert parser.parse_args(["demo", "--messages", "2000"]).messages == 2000


@pytest.mark.parametrize("argv", [[], ["topic", "list"], ["send", "q", "--count", "0"], ["start", "--sku", "gold"]])
def test_bad_arguments_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "usage: ray-broker" in capsys.readouterr().err


def test_no_cluster_is_one_clean_error_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lifecycle, "cluster_address", lambda address=None: None)
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    assert cli.main(["status", "-n", "shop"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: namespace 'shop' is not running here: no Ray cluster is") and err.count("\n") == 1
    assert "`ray-broker start -n shop`" in err


def test_broker_errors_print_one_line_without_traceback(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    def missing(args: object) -> None:
        raise rb.errors.MessagingEntityNotFoundError("queue 'nope' does not exist", entity="nope")

    monkeypatch.setattr(cli, "_attach", missing)
    assert cli.main(["queue", "delete", "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: queue 'nope' does not exist\n"
    assert "Traceback" not in captured.out + captured.err


def test_bench_passes_its_arguments_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    class Suite:
        @staticmethod
        def main(argv: list[str]) -> int:
            seen.append(argv)
            return 0

    monkeypatch.setattr(cli, "_benchmark_suite", lambda: Suite)
    assert cli.main(["bench", "--quick", "--json", "out.json"]) == 0
    assert seen == [["--quick", "--json", "out.json"]]


def test_format_table_aligns_numbers_right() -> None:
    table = format_table(["name", "count"], [["a", 5], ["bbb", 120]])
    assert table.splitlines() == ["name  count", "----  -----", "a         5", "bbb     120"]


@pytest.fixture
def address() -> str:
    """The address of the test session's Ray (the CLI commands attach to it in-process)."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


@pytest.mark.ray
def test_queue_lifecycle_and_messages(namespace: rb.Namespace, address: str, capsys: pytest.CaptureFixture[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    target = ["-n", namespace.name, "--address", address]
    assert cli.main(["queue", "create", queue, "--partitioned", *target]) == 0
    assert cli.main(["queue", "list", *target]) == 0
    assert queue in capsys.readouterr().out
    assert cli.main(["send", queue, "--count", "30", "--batch", "7", *target]) == 0
    assert cli.main(["send", queue, "--body", "hello", "--partition-key", "k1", *target]) == 0
    assert cli.main(["peek", queue, "--max", "50", *target]) == 0
    peeked = capsys.readouterr()
    assert "peeked 31 message(s)" in peeked.err and "hello" in peeked.out
    assert cli.main(["receive", queue, "--max", "100", "--wait", "2", "--json", *target]) == 0
    received = capsys.readouterr()
    assert "received and completed 31 message(s)" in received.err
    assert namespace.get_queue_runtime_properties(queue).active_message_count == 0
    assert cli.main(["queue", "delete", queue, *target]) == 0
    assert cli.main(["queue", "delete", queue, *target]) == 1
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.ray
def test_status_shows_every_partition_and_queue(namespace: rb.Namespace, address: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(queue, enable_partitioning=True)
    namespace.get_queue_sender(queue).send_messages([rb.Message(f"m{i}") for i in range(5)])
    assert cli.main(["status", "-n", namespace.name, "--address", address]) == 0
    out = capsys.readouterr().out
    partition_rows = [line for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert len(partition_rows) == namespace.partition_count
    assert all(" up " in row for row in partition_rows)
    queue_row = next(line for line in out.splitlines() if line.startswith(queue))
    assert "partitioned" in queue_row and "Available" in queue_row and queue_row.split()[4] == "5"
    namespace.delete_queue(queue)


@pytest.mark.ray
def test_connecting_to_a_missing_namespace_is_a_clean_error(ray_instance: None, address: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "-n", "absent-ns", "--address", address]) == 1
    assert capsys.readouterr().err.startswith("error: namespace 'absent-ns' is not running")
