"""The figures of the JetStream comparison: the replication round's split and CPU per message."""
from __future__ import annotations

import os

import pytest

from benchmarks.jetstream import round_split
from benchmarks.process_cpu import CpuSnapshot, cpu_seconds


def times(**fields: float) -> dict[str, float]:
    base = {"rounds": 0, "ship_s": 0.0, "held_s": 0.0, "shipments": 0, "changes": 0, "take_s": 0.0, "write_s": 0.0,
            "commits": 0, "commit_s": 0.0}
    return {**base, **fields}


def test_the_round_is_split_into_its_steps_per_round() -> None:
    leader = times(rounds=10, ship_s=0.010, held_s=0.050, commits=10, commit_s=0.005)
    follower = times(shipments=20, changes=40, take_s=0.010, write_s=0.020, commits=10, commit_s=0.010)
    split = round_split([leader, follower, times()])
    assert split["rounds"] == 10 and split["shipments"] == 20
    assert split["leader_commit_ms"] == pytest.approx(0.5)
    assert split["ship_ms"] == pytest.approx(1.0)
    assert split["follower_take_ms"] == pytest.approx(0.5)
    assert split["held_ms"] == pytest.approx(5.0)
    assert split["answer_ms"] == pytest.approx(3.5), "what the other steps leave of the round"
    assert split["follower_write_ms"] == pytest.approx(2.0) and split["follower_commit_ms"] == pytest.approx(1.0)
    assert split["changes_per_write"] == 4.0


def test_a_run_without_rounds_has_no_split() -> None:
    assert round_split([times()]) == {"rounds": 0, "shipments": 0}


def test_cpu_per_message_is_the_difference_by_role_with_a_total() -> None:
    before = CpuSnapshot({"client": 1.0, "leaders": 2.0})
    after = CpuSnapshot({"client": 1.5, "leaders": 2.25})
    assert after.per_message_us(before, 1000) == {"client": 500.0, "leaders": 250.0, "total": 750.0}


def test_cpu_seconds_reads_a_live_process_and_counts_a_gone_one_as_none() -> None:
    assert cpu_seconds(os.getpid()) > 0
    assert cpu_seconds(2**22 + 12345) == 0.0
