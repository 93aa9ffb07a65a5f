"""`ray-broker purge`, `ray-broker deadletter resubmit` and `ray-broker peek` run as their own
processes against the session's namespace: confirmation, --json, filters, partitions, Ctrl-C
between batches, and bad input."""
from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import time
import uuid

import pytest

import ray_broker as rb

from .test_cli_commands import CLI, ok, run_cli


@pytest.fixture
def target(namespace: rb.Namespace) -> list[str]:
    """The options that point a command at the session's namespace."""
    import ray

    return ["-n", namespace.name, "--address", str(ray.get_runtime_context().gcs_address)]


def queue_with(namespace: rb.Namespace, count: int, dead: int = 0, session_id: str | None = None,
               **options: bool) -> str:
    """A new queue holding `count` messages, the first `dead` of them dead-lettered."""
    q = f"op-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(q, requires_session=session_id is not None, **options)
    with namespace.get_queue_sender(q) as sender:
        for start in range(0, count, 1000):
            sender.send_messages([rb.Message(f"m{i}", subject="s", application_properties={"i": i},
                                             session_id=session_id)
                                  for i in range(start, min(count, start + 1000))])
    with namespace.get_queue_receiver(q) as receiver:
        while dead:
            for message in receiver.receive_messages(dead, max_wait_time=5):
                receiver.dead_letter_message(message, reason="bad")
                dead -= 1
    return q


def one_error_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    assert result.returncode == status, f"exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_purge_with_yes_empties_the_queue_and_prints_one_line(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 30, dead=2)
    assert ok(["purge", q, "--yes", *target]) == f"removed 28 message(s) from queue {q!r}\n"
    document = json.loads(ok(["purge", q, "--dead-letter", "--yes", "--json", *target]))
    assert document == {"entity": q, "dead_letter": True, "removed": 2, "interrupted": False}
    counts = namespace.get_queue_runtime_properties(q)
    assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 0)


def test_purge_without_yes_and_without_a_terminal_is_refused(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 3)
    line = one_error_line(run_cli(["purge", q, *target]), 2)
    assert "pass --yes" in line
    assert namespace.get_queue_runtime_properties(q).active_message_count == 3


def test_purge_of_a_subscription_in_service_bus_path_form(namespace: rb.Namespace, target: list[str]) -> None:
    topic = f"op-{uuid.uuid4().hex[:10]}"
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "all")
    with namespace.get_topic_sender(topic) as sender:
        sender.send_messages([rb.Message("a"), rb.Message("b")])
    assert "removed 2 message(s)" in ok(["purge", f"{topic}/Subscriptions/all", "--yes", *target])


def test_unknown_entity_is_one_line(target: list[str]) -> None:
    missing = f"nothing-{uuid.uuid4().hex[:8]}"
    for argv in (["purge", missing, "--yes"], ["deadletter", "resubmit", missing, "--yes"]):
        line = one_error_line(run_cli([*argv, *target]), 1)
        assert line.startswith("error: MessagingEntityNotFoundError:") and missing in line


def test_resubmit_back_to_the_queue_and_to_another(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 3, dead=3)
    seqs = [m.sequence_number for m in namespace.get_queue_receiver(q, sub_queue=rb.SubQueue.DEAD_LETTER)
            .peek_messages(10)]
    document = json.loads(ok(["deadletter", "resubmit", q, "--sequence-number", str(seqs[0]), "--yes", "--json",
                              *target]))
    assert document == {"entity": q, "to": None, "filter": None, "resubmitted": 1, "interrupted": False}
    (back,) = namespace.get_queue_receiver(q).peek_messages(10)
    assert (bytes(back.body), back.subject, back.application_properties) == (b"m0", "s", {"i": 0})
    other = f"op-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(other)
    assert ok(["deadletter", "resubmit", q, "--to", other, "--yes", *target]) == \
        f"resubmitted 2 dead letter(s) of queue {q!r} to queue {other!r}\n"
    assert namespace.get_queue_runtime_properties(other).active_message_count == 2
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 0


def test_nothing_to_resubmit_is_one_line(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 1)
    line = one_error_line(run_cli(["deadletter", "resubmit", q, "--yes", *target]), 1)
    assert line.startswith("error: MessageNotFoundError:") and "no dead letters to resubmit" in line
    q = queue_with(namespace, 1, dead=1)
    line = one_error_line(run_cli(["deadletter", "resubmit", q, "--sequence-number", "999999", "--yes", *target]), 1)
    assert "no dead letter with sequence number(s) 999999" in line
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 1


def test_ctrl_c_stops_a_long_purge_between_batches_and_reports_what_it_removed(namespace: rb.Namespace,
                                                                               target: list[str]) -> None:
    total = 30_000
    q = queue_with(namespace, total, session_id="one")  # a message per row: a batch of 1,000 rows to delete
    process = subprocess.Popen([CLI, "purge", q, "--yes", "--json", *target], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while namespace.get_queue_runtime_properties(q).active_message_count == total:
        assert time.monotonic() < deadline and process.poll() is None, "the purge never started"
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    left = namespace.get_queue_runtime_properties(q).active_message_count
    assert process.returncode == 130, stderr
    document = json.loads(stdout)
    assert document["interrupted"] is True and 0 < document["removed"] < total
    assert document["removed"] == total - left and document["removed"] % 1000 == 0  # whole batches
    assert "interrupted" in stderr


@pytest.mark.parametrize(("answer", "status", "left"), [("n", 1, 4), ("y", 0, 0)])
def test_purge_on_a_terminal_asks_first(namespace: rb.Namespace, target: list[str], answer: str, status: int,
                                        left: int) -> None:
    q = queue_with(namespace, 4)
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen([CLI, "purge", q, *target], stdin=terminal, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        os.write(controller, f"{answer}\n".encode())
        stdout, stderr = process.communicate(timeout=120)
    finally:
        os.close(controller)
        os.close(terminal)
    assert process.returncode == status, stderr
    assert f"Remove all 4 message(s) of queue {q!r}?" in stderr
    assert namespace.get_queue_runtime_properties(q).active_message_count == left
    assert ("removed 4 message(s)" in stdout) == (answer == "y")


def test_resubmit_by_filter_and_nothing_matching(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 5, dead=5)
    chosen = "i >= 3 AND sys.label = 's' AND DeadLetterReason = 'bad'"
    document = json.loads(ok(["deadletter", "resubmit", q, "--filter", chosen, "--yes", "--json", *target]))
    assert document == {"entity": q, "to": None, "filter": chosen, "resubmitted": 2, "interrupted": False}
    assert sorted(m.application_properties["i"] for m in namespace.get_queue_receiver(q).peek_messages(10)) == [3, 4]
    line = one_error_line(run_cli(["deadletter", "resubmit", q, "--filter", "i = 99", "--yes", *target]), 1)
    assert line.startswith("error: MessageNotFoundError:") and "no dead letter with the filter 'i = 99'" in line
    line = one_error_line(run_cli(["deadletter", "resubmit", q, "--filter", "i = = 1", "--yes", *target]), 1)
    assert line.startswith("error: RuleSyntaxError: cannot parse the SQL filter")
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 3


def test_peek_with_a_filter_or_one_partition_and_the_table_shows_subject_and_properties(
        namespace: rb.Namespace, target: list[str]) -> None:
    q = f"op-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(q, enable_partitioning=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key=f"k{i % 3}", subject=f"s{i}",
                                         application_properties={"i": i, "tag": "x"}) for i in range(40)])
    lines = ok(["peek", q, "--filter", "i % 10 = 5", "--json", *target]).splitlines()
    assert sorted(json.loads(line)["body"] for line in lines) == ["m15", "m25", "m35", "m5"]
    partition = json.loads(lines[0])["partition"]
    held = sorted(m.sequence_number for m in namespace.peek_messages(q, 100) if m.partition_index == partition)
    from_second = [json.loads(line) for line in
                   ok(["peek", q, "--partition", str(partition), "--from-sequence", str(held[1]), "--count", "100",
                       "--json", *target]).splitlines()]
    assert [m["sequence_number"] for m in from_second] == held[1:]
    table = run_cli(["peek", q, "--filter", "i = 7", *target])
    assert table.returncode == 0, table.stderr
    header, row = [line for line in table.stdout.splitlines() if "subject" in line or "m7" in line]
    assert "properties" in header and "s7" in row and "i=7, tag='x'" in row
    assert "peeked 1 message(s) matching 'i = 7'" in table.stderr
    line = one_error_line(run_cli(["peek", q, "--filter", "i >", *target]), 1)
    assert line.startswith("error: RuleSyntaxError:")
    line = one_error_line(run_cli(["peek", q, "--partition", "9999", *target]), 1)
    assert line.startswith("error: InvalidArgumentError: partition must be")


def test_resubmit_on_a_terminal_asks_first_naming_the_filter(namespace: rb.Namespace, target: list[str]) -> None:
    q = queue_with(namespace, 3, dead=3)
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen([CLI, "deadletter", "resubmit", q, "--filter", "i = 1", *target], stdin=terminal,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(controller, b"y\n")
        stdout, stderr = process.communicate(timeout=120)
    finally:
        os.close(controller)
        os.close(terminal)
    assert process.returncode == 0, stderr
    assert f"Resubmit all 3 dead letter(s) of queue {q!r} that match 'i = 1' to their entity?" in stderr
    assert f"resubmitted 1 dead letter(s) of queue {q!r} to their entity\n" in stdout
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 2
