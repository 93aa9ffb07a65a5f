"""The benchmark instruments in tiny configurations: each produces a well-formed JSON document.

No timing is asserted: these runs are far too small (and the machine too shared) to mean anything.
The instruments that take longest even when tiny run with --long; the default run keeps the
scale matrix, the Redis baseline and the operator actions with the console open.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks import (async_senders, emulator_start, group_commit, operator_actions, p5_memory, p6_recovery,
                        projection, scale, suite, topic_fanout)
from benchmarks.baselines import redis_server
from benchmarks.console_watch import browser_missing

pytestmark = pytest.mark.ray


def well_formed(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """The document survives a JSON round trip, names its benchmark and the machine, and its
    targets carry a value, a threshold and a verdict."""
    doc = json.loads(json.dumps(doc))
    assert doc["benchmark"] == name
    assert doc["machine"]["cpu_count"] >= 1
    for target in doc.get("targets", []):
        assert isinstance(target["value"], (int, float))
        assert isinstance(target["threshold"], (int, float))
        assert isinstance(target["met"], bool)
    return doc


@pytest.mark.slow
def test_suite_main_prints_one_json_document_with_p1_p3_and_the_engine(ray_instance: None,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--rounds", "1", "--batches", "2", "--warmup", "1", "--samples", "3", "--gap", "0.01", "--no-redis"]
    assert suite.main(argv) == 0
    captured = capsys.readouterr()
    doc = well_formed(json.loads(captured.out), "suite")
    assert "P1 throughput" in captured.err and "P3 latency" in captured.err
    p1, p3 = well_formed(doc["p1"], "p1_throughput"), well_formed(doc["p3"], "p3_latency")
    assert set(p1["results"]) == {"ray_queue", "raw_actor", "durable_floor", "partitioned_16", "non_partitioned_1"}
    assert all(r["msgs_per_s"] > 0 for r in p1["results"].values())
    assert p1["messages_left_after_run"] == {"partitioned_16": 0, "non_partitioned_1": 0}
    assert set(p3["results"]) == {"raw_actor_round_trip", "partitioned_16", "non_partitioned_1", "ray_queue",
                                  "durable_floor"}
    assert all(r["n"] == 3 for r in p3["results"].values())
    assert p1["notes"] == p3["notes"] == ["Redis baseline switched off (--no-redis)"]
    assert set(doc["ratios"]) == {"p1_partitioned_16_vs_ray_queue", "p1_non_partitioned_1_vs_ray_queue",
                                  "p1_partitioned_16_vs_redis_streams", "p3_partitioned_16_vs_non_partitioned_1",
                                  "p3_partitioned_16_vs_ray_queue", "engine_vs_raw_sqlite"}
    engine = well_formed(doc["engine"], "engine_cycle")
    assert engine["targets"][0]["value"] > 0 and "Engine" in captured.err
    assert len(doc["targets"]) == 5, "P1 (16 and 1 partitions), P3 (vs 1 partition and the queue), engine"


def test_redis_baseline_runs_or_says_why_not() -> None:
    with redis_server() as (client, note):
        assert (client is None) == (note is not None)
        if client is not None:
            assert client.ping()


def test_scale_covers_every_partition_and_client_count(ray_instance: None) -> None:
    config = scale.ScaleConfig(partitions=[1, 2], clients=[1, 2], batches=2, warmup=1, batch_size=10)
    doc = well_formed(scale.run(config), "scale")
    assert [(p["partitions"], p["clients"]) for p in doc["results"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(len(p["per_client_msgs_per_s"]) == p["clients"] for p in doc["results"])
    assert set(doc["baselines"]["ray_queue_by_clients"]) == {"1", "2"}
    assert scale.table(doc)


@pytest.mark.slow
def test_p5_samples_every_partition(ray_instance: None) -> None:
    config = p5_memory.P5Config(messages=300, batch_size=100, sample_every=100)
    doc = well_formed(p5_memory.run(config), "p5_memory")
    assert doc["fill"]["backlog_reported"] == 300
    assert [s["label"] for s in doc["results"]["samples"]][0] == "idle"
    assert len(doc["results"]["peak_rss_mb_by_partition"]) == 16
    assert p5_memory.table(doc)


@pytest.mark.slow
def test_p6_recovers_without_losing_messages(ray_instance: None) -> None:
    config = p6_recovery.P6Config(messages=200, trials=1, batch_size=100)
    doc = well_formed(p6_recovery.run(config), "p6_recovery")
    assert doc["results"]["messages_lost"] == 0
    assert doc["results"]["trials"][0]["restarted"] is True
    assert p6_recovery.table(doc)


@pytest.mark.slow
def test_async_senders_compares_async_and_sync_sending(ray_instance: None) -> None:
    config = async_senders.AsyncSendersConfig(batches=4, warmup=1, senders=2, rounds=1, batch_size=10)
    doc = well_formed(async_senders.run(config), "async_senders")
    assert set(doc["results"]) == {"sync_1", "async_2"}
    assert all(r["msgs_per_s"] > 0 for r in doc["results"].values())
    assert [t["threshold"] for t in doc["targets"]] == [1.5]


@pytest.mark.slow
def test_group_commit_compares_both_ways_of_taking_calls(ray_instance: None) -> None:
    config = group_commit.GroupCommitConfig(senders=2, receivers=2, batches=3, rounds=1, engine_calls=5,
                                            durabilities=["normal"])
    doc = well_formed(group_commit.run(config), "group_commit")
    layouts = ("one_partition", "spread", "engine")
    assert set(doc["results"]) == {f"normal/{layout}/{mode}" for layout in layouts
                                   for mode in ("group_commit", "one_at_a_time")}
    assert all(value > 0 for r in doc["results"].values() for value in r["rounds_msgs_per_s" if "msgs_per_s" in r
                                                                          else "rounds_calls_per_s"])
    assert [t["threshold"] for t in doc["targets"]] == [1.3, 1.3]


@pytest.mark.slow
def test_topic_fanout_measures_the_engine_and_a_namespace(ray_instance: None) -> None:
    config = topic_fanout.FanoutConfig(subscriptions=[1, 3], rounds=1, batches=2, warmup=1, batch_size=20)
    doc = well_formed(topic_fanout.run(config), "topic_fanout")
    assert set(doc["results"]) == {"engine", "namespace"}
    assert all(set(r) == {"1", "3"} for r in doc["results"].values())
    assert doc["results"]["engine"]["3"]["stored_bytes_per_message"] == doc["results"]["engine"]["1"][
        "stored_bytes_per_message"]
    assert [t["threshold"] for t in doc["targets"]] == [2.0, 2.0]
    assert topic_fanout.table(doc)


@pytest.mark.slow
def test_projection_reports_cpu_per_message_by_process_and_projects_it(ray_instance: None) -> None:
    config = projection.ProjectionConfig(partitions=[1, 2], clients=[1, 2], cores=[4, 64], batches=4, warmup=1,
                                         batch_size=50, min_window=0.5)
    doc = well_formed(projection.run(config), "projection")
    assert [(r["system"], r["partitions"], r["clients"]) for r in doc["results"]] == [
        ("ray_queue", None, 1), ("ray_queue", None, 2), ("broker", 1, 1), ("broker", 1, 2), ("broker", 2, 1),
        ("broker", 2, 2)]
    for r in doc["results"]:
        assert r["messages"] % (r["clients"] * 4 * 50) == 0, "whole passes of every client"
        assert r["messages"] > 0 and r["msgs_per_s"] > 0 and r["window_s"] >= 0.5
        assert {"clients", "raylet", "gcs_server", "driver"} <= set(r["cpu_us_per_msg"])
        assert ("queue_actor" in r["cpu_us_per_msg"]) == (r["system"] == "ray_queue")
        assert ("partitions" in r["cpu_us_per_msg"]) == ("gateway" in r["cpu_us_per_msg"]) == (r["system"] == "broker")
        assert all(v >= 0 for v in r["cpu_us_per_msg"].values()) and r["total_cpu_us_per_msg"] > 0
        assert r["total_cpu_us_per_msg"] == pytest.approx(sum(r["cpu_us_per_msg"].values()), abs=0.1)
        for variant in ("projected", "projected_clients_elsewhere"):
            assert set(r[variant]) == {"4", "16", "64"}, "the target's 16 cores are always projected"
            rates = [r[variant][n]["msgs_per_s"] for n in ("4", "16", "64")]
            assert 0 < rates[0] <= rates[1] <= rates[2], "more cores never project less"
        assert r["projected"]["4"]["msgs_per_s"] <= r["projected_clients_elsewhere"]["4"]["msgs_per_s"]
    headline = doc["projection"]
    assert (headline["clients"], headline["partitions_low"], headline["partitions_high"]) == (2, 1, 2)
    assert all(v > 0 for v in headline["ratios"].values())
    assert set(headline["ratios_by_clients"]) == {"1", "2"}
    assert headline["ratios_by_clients"]["2"]["projected"] == headline["ratios"]
    assert [t["threshold"] for t in doc["targets"]] == [6.0, 4.0]
    assert "busiest part." in projection.table(doc)


def test_operator_actions_purges_and_resubmits_everything_it_counts_with_the_console_open_too(
        ray_instance: None) -> None:
    """Each action measured, and again with the web console open in a headless Chromium where one
    is installed (`.ci/run` installs it)."""
    console = browser_missing() is None
    config = operator_actions.OperatorConfig(purge=600, resubmit=30, partitions=2, console=console)
    doc = well_formed(operator_actions.run(config), "operator_actions")
    for results in [doc["results"]] + ([doc["console_open"]] if console else []):
        assert (results["purge"]["messages"], results["resubmit"]["messages"]) == (600, 30)
        assert results["resubmit_filtered"]["messages"] == 15 and results["resubmit_filtered"]["read"] == 30
        assert all(results[action]["msgs_per_s"] > 0 for action in ("purge", "resubmit", "resubmit_filtered"))
    assert "purge" in operator_actions.table(doc)
    if console:
        assert doc["console_open"]["console"]["refreshed"], "the page kept refreshing while it was open"
        assert set(doc["console_open"]["vs_closed"]) == {"purge", "resubmit", "resubmit_filtered"}
        assert "console open" in operator_actions.table(doc)


@pytest.mark.slow
def test_emulator_start_times_a_start_and_a_stop() -> None:
    doc = well_formed(emulator_start.run(emulator_start.EmulatorStartConfig(starts=1)), "emulator_start")
    (start,) = doc["starts"]
    assert 0 < start["healthy_s"] <= start["ready_s"] and start["stopped_s"] > 0
    assert "/health 200" in emulator_start.table(doc)
