"""Structured Streaming into entities exactly once, and micro-batch DataFrames out of them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

import ray_broker as rb
from spark_bridge import stream_from_entity, stream_to_entity

pytestmark = pytest.mark.spark

SCHEMA = "body STRING, customer STRING, n LONG"


def write_orders_file(directory: Path, index: int, rows: int) -> None:
    """One JSON-lines file of orders numbered index*rows ... index*rows + rows - 1."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"body": f"order-{n}", "customer": f"c{n % 7}", "n": n})
             for n in range(index * rows, (index + 1) * rows)]
    (directory / f"orders-{index:03d}.json").write_text("\n".join(lines) + "\n")


def run_available(spark: Any, ns: rb.Namespace, queue: str, source: Path, checkpoint: Path) -> Any:
    """Run the orders stream until it has written every file there (one file a micro-batch)."""
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    query = stream_to_entity(stream, ns, queue, checkpoint_location=str(checkpoint), partition_key="customer",
                             properties=["n"], trigger={"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    return query


def receive_all(ns: rb.Namespace, queue: str) -> list[rb.ReceivedMessage]:
    got: list[rb.ReceivedMessage] = []
    with ns.get_queue_receiver(queue, max_wait_time=1) as receiver:
        while batch := receiver.receive_messages(500):
            got.extend(batch)
            for message in batch:
                receiver.complete_message(message)
    return got


def send_numbered(ns: rb.Namespace, queue: str, count: int) -> None:
    with ns.get_queue_sender(queue) as sender:
        sender.send_messages([rb.Message(f"m{i}", partition_key=f"k{i % 11}", application_properties={"i": i})
                              for i in range(count)])


def test_restart_after_a_lost_commit_delivers_each_row_once(spark: Any, namespace: rb.Namespace,
                                                            partitioned_queue: str, tmp_path: Path) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    for index in range(3):
        write_orders_file(source, index, 50)
    run_available(spark, namespace, partitioned_queue, source, checkpoint)
    # Batch 2 was stored, but its commit is lost: Spark runs it again on restart.
    commit = checkpoint / "commits" / "2"
    assert commit.exists()
    commit.unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    replay = run_available(spark, namespace, partitioned_queue, source, checkpoint)
    assert any(p["batchId"] == 2 and p["numInputRows"] == 50 for p in replay.recentProgress)
    got = receive_all(namespace, partitioned_queue)
    assert sorted(m.application_properties["n"] for m in got) == list(range(150))
    assert all(str(m) == f"order-{m.application_properties['n']}" for m in got)
    assert all(m.partition_key == f"c{m.application_properties['n'] % 7}" for m in got)


def test_stream_to_entity_checks_before_starting(spark: Any, namespace: rb.Namespace, partitioned_queue: str,
                                                 tmp_path: Path) -> None:
    write_orders_file(tmp_path / "in", 0, 5)
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    with pytest.raises(rb.errors.InvalidArgumentError, match="'nope' is not in the streaming DataFrame"):
        stream_to_entity(stream, namespace, partitioned_queue, checkpoint_location=str(tmp_path / "c"),
                         partition_key="nope")
    with pytest.raises(rb.errors.InvalidArgumentError, match="unsupported type"):
        stream_to_entity(stream, namespace, partitioned_queue, checkpoint_location=str(tmp_path / "c"), body="n")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        stream_to_entity(stream, namespace, "no-such-queue", checkpoint_location=str(tmp_path / "c"))
    with pytest.raises(rb.errors.InvalidArgumentError, match="streaming DataFrame"):
        stream_to_entity(spark.range(3), namespace, partitioned_queue, checkpoint_location=str(tmp_path / "c"))
    assert not spark.streams.active
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 0


def test_receive_batches_complete_on_next_and_abandon_on_error(spark: Any, namespace: rb.Namespace,
                                                               partitioned_queue: str) -> None:
    send_numbered(namespace, partitioned_queue, 250)
    sizes = [batch.count() for batch in stream_from_entity(spark, namespace, partitioned_queue, batch_size=100,
                                                           max_wait_time=1)]
    assert sum(sizes) == 250 and max(sizes) <= 100
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 0

    send_numbered(namespace, partitioned_queue, 30)
    with pytest.raises(RuntimeError, match="the job failed"):
        for batch in stream_from_entity(spark, namespace, partitioned_queue, batch_size=10, max_wait_time=1):
            assert batch.count() == 10
            raise RuntimeError("the job failed")
    again = receive_all(namespace, partitioned_queue)         # abandoned, so receivable at once
    assert len(again) == 30
    assert sorted(m.delivery_count for m in again).count(2) == 10


def test_peek_batches_continue_after_the_last_one_yielded(spark: Any, namespace: rb.Namespace,
                                                          partitioned_queue: str, tmp_path: Path) -> None:
    send_numbered(namespace, partitioned_queue, 120)
    checkpoint = str(tmp_path / "peek")
    seen: list[int] = []
    for number, batch in enumerate(stream_from_entity(spark, namespace, partitioned_queue, batch_size=50,
                                                      mode="peek", checkpoint=checkpoint, max_wait_time=1)):
        seen += [r.sequence_number for r in batch.select("sequence_number").collect()]
        if number == 1:
            break
    assert len(seen) == 100
    rest = [r.sequence_number for batch in stream_from_entity(spark, namespace, partitioned_queue, batch_size=50,
                                                              mode="peek", checkpoint=checkpoint, max_wait_time=1)
            for r in batch.select("sequence_number").collect()]
    assert len(rest) == 20 and len(set(seen + rest)) == 120
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 120
    with pytest.raises(rb.errors.InvalidArgumentError, match="checkpoint"):
        stream_from_entity(spark, namespace, partitioned_queue, checkpoint=checkpoint)


def rss_with_children(pid: int) -> int:
    process = psutil.Process(pid)
    return process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))


def test_reader_memory_stays_flat_over_50_batches(spark: Any, namespace: rb.Namespace,
                                                  partitioned_queue: str) -> None:
    import ray
    from ray._private import state

    master = ray.get_actor(spark.sparkContext.appName + "_SPARK_MASTER")
    master_pid = state.actors(master._actor_id.hex())["Pid"]
    driver_pid = spark.sparkContext._gateway.proc.pid
    send_numbered(namespace, partitioned_queue, 50 * 40)
    samples: list[tuple[int, int]] = []
    for batch in stream_from_entity(spark, namespace, partitioned_queue, batch_size=40, max_wait_time=1):
        assert batch.count() >= 1
        samples.append((rss_with_children(driver_pid), rss_with_children(master_pid)))
    assert len(samples) >= 50
    for which in (0, 1):
        assert samples[-1][which] < 1.5 * samples[4][which], [s[which] for s in samples]
