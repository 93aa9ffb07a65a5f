"""Ray Data through the connectors alone: `EntityDatasink` writes a Dataset, `EntityDatasource` reads it."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

import ray_broker as rb
from spark_bridge import EntityDatasink, EntityDatasource

pytestmark = pytest.mark.spark


def items(count: int) -> list[dict[str, Any]]:
    return [{"payload": f"item-{i}", "key": f"k{i % 5}", "n": i} for i in range(count)]


def test_dataset_written_and_read_back(ray_instance: None, namespace: rb.Namespace, partitioned_queue: str) -> None:
    import ray.data

    sink = EntityDatasink(namespace, partitioned_queue, body="payload", partition_key="key", properties=["n"])
    ray.data.from_items(items(300), override_num_blocks=3).write_datasink(sink)
    assert sink.rows_written == 300

    peeked = ray.data.read_datasource(EntityDatasource(namespace, partitioned_queue, mode="peek")).take_all()
    assert len(peeked) == 300
    assert {"body", "message_id", "session_id", "partition_key", "correlation_id", "subject", "content_type", "to",
            "reply_to", "sequence_number", "partition", "enqueued_time_utc", "delivery_count",
            "application_properties"} <= set(peeked[0])
    by_n = {int(dict(r["application_properties"])["n"]): r for r in peeked}
    assert sorted(by_n) == list(range(300))
    assert all(r["body"] == f"item-{n}".encode() and r["partition_key"] == f"k{n % 5}" for n, r in by_n.items())
    assert all(len({r["partition"] for r in peeked if r["partition_key"] == k}) == 1 for k in ("k0", "k1", "k4"))
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 300

    source = EntityDatasource(namespace, partitioned_queue, mode="receive", max_messages=120, max_wait_time=1)
    assert ray.data.read_datasource(source).count() == 120
    rest = ray.data.read_datasource(EntityDatasource(namespace, partitioned_queue, mode="receive", max_wait_time=1))
    assert rest.count() == 180
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 0


def test_connectors_check_before_any_row_is_sent(ray_instance: None, namespace: rb.Namespace,
                                                 partitioned_queue: str) -> None:
    import ray.data

    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        EntityDatasource(namespace, f"missing-{uuid.uuid4().hex[:6]}")
    with pytest.raises(rb.errors.InvalidArgumentError, match="max_messages"):
        EntityDatasource(namespace, partitioned_queue, max_messages=0)
    with pytest.raises(rb.errors.InvalidArgumentError, match="'nope' is not in the Dataset"):
        ray.data.from_items(items(10)).write_datasink(EntityDatasink(namespace, partitioned_queue, body="nope"))
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        ray.data.from_items(items(10)).write_datasink(EntityDatasink(namespace, "missing-queue", body="payload"))
    assert namespace.get_queue_runtime_properties(partitioned_queue).active_message_count == 0


@pytest.mark.parametrize("partitioned", [True, False])
def test_a_peek_reads_what_each_partition_held_when_planned(ray_instance: None, namespace: rb.Namespace,
                                                            partitioned: bool) -> None:
    name = f"peek-plan-{uuid.uuid4().hex[:8]}"
    namespace.create_queue(name, enable_partitioning=partitioned)
    with namespace.get_queue_sender(name) as sender:
        sender.send_messages([rb.Message(f"before-{i}", partition_key=f"k{i % 7}") for i in range(200)])
        tasks = EntityDatasource(namespace, name, mode="peek").get_read_tasks(namespace.partition_count)
        sender.send_messages([rb.Message(f"after-{i}", partition_key=f"k{i % 7}") for i in range(200)])
    assert len(tasks) == (namespace.partition_count if partitioned else 1)
    bodies = sorted(bytes(b) for task in tasks for block in task() for b in block.column("body").to_pylist())
    assert bodies == sorted(f"before-{i}".encode() for i in range(200))
    namespace.delete_queue(name)
