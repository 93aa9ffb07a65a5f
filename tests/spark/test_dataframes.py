"""DataFrames to entities and back through RayDP: keys, properties, peek and receive, bad input."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

import ray_broker as rb
from spark_bridge import read_dataframe, write_dataframe

pytestmark = pytest.mark.spark

ROWS = 10_000
CUSTOMERS = 97


def orders(spark: Any, rows: int) -> Any:
    """Orders: a binary body, a customer key (every 10th null), an amount and a region."""
    from pyspark.sql import functions as F

    return (spark.range(0, rows, numPartitions=4)
            .withColumn("body", F.concat(F.lit("order-"), F.col("id").cast("string")).cast("binary"))
            .withColumn("customer", F.when(F.col("id") % 10 == 0, F.lit(None))
                        .otherwise(F.concat(F.lit("c"), (F.col("id") % CUSTOMERS).cast("string"))))
            .withColumn("amount", F.col("id") * 2)
            .withColumn("region", F.when(F.col("id") % 2 == 0, F.lit("eu")).otherwise(F.lit("us"))))


def active(ns: rb.Namespace, queue: str) -> int:
    return ns.get_queue_runtime_properties(queue).active_message_count


def test_round_trip_keeps_keys_and_properties(spark: Any, namespace: rb.Namespace, partitioned_queue: str) -> None:
    sent = write_dataframe(orders(spark, ROWS), namespace, partitioned_queue, body="body", partition_key="customer",
                           properties=["id", "amount", "region"])
    assert sent == ROWS
    df = read_dataframe(spark, namespace, partitioned_queue, mode="receive", max_wait_time=2)
    rows = df.select("body", "partition_key", "partition", "sequence_number", "application_properties",
                     "delivery_count", "enqueued_time_utc").collect()
    assert len(rows) == ROWS
    assert active(namespace, partitioned_queue) == 0
    by_id = {int(r.application_properties["id"]): r for r in rows}
    assert sorted(by_id) == list(range(ROWS))
    partitions_of: dict[str, set[int]] = {}
    for i, row in by_id.items():
        assert bytes(row.body) == f"order-{i}".encode()
        assert row.application_properties == {"id": str(i), "amount": str(2 * i), "region": "eu" if i % 2 == 0 else "us"}
        assert row.partition == rb.partition_of(row.sequence_number)
        assert row.delivery_count == 1 and row.enqueued_time_utc is not None
        if i % 10 == 0:
            assert row.partition_key is None
        else:
            assert row.partition_key == f"c{i % CUSTOMERS}"
            partitions_of.setdefault(row.partition_key, set()).add(row.partition)
    assert len(partitions_of) == CUSTOMERS
    assert all(len(p) == 1 for p in partitions_of.values())      # a key's rows share one partition
    assert len({row.partition for row in rows}) > 1


def test_peek_leaves_the_entity_and_receive_empties_it(spark: Any, namespace: rb.Namespace,
                                                         partitioned_queue: str) -> None:
    write_dataframe(orders(spark, 600), namespace, partitioned_queue, partition_key="customer")
    peeked = read_dataframe(spark, namespace, partitioned_queue, mode="peek")
    assert peeked.count() == 600
    assert peeked.filter("delivery_count = 0").count() == 600
    assert active(namespace, partitioned_queue) == 600
    first = read_dataframe(spark, namespace, partitioned_queue, mode="peek", max_messages=250)
    seqs = sorted(r.sequence_number for r in first.select("sequence_number").collect())
    all_seqs = sorted(r.sequence_number for r in peeked.select("sequence_number").collect())
    assert seqs == all_seqs[:250]                                  # the first ones in browsing order
    some = read_dataframe(spark, namespace, partitioned_queue, mode="receive", max_messages=100, max_wait_time=2)
    assert some.count() == 100
    assert active(namespace, partitioned_queue) == 500
    rest = read_dataframe(spark, namespace, partitioned_queue, mode="receive", max_wait_time=2)
    assert rest.count() == 500
    assert active(namespace, partitioned_queue) == 0
    empty = read_dataframe(spark, namespace, partitioned_queue, mode="receive", max_wait_time=0.5)
    assert empty.columns == peeked.columns and empty.count() == 0


def test_struct_body_is_json_and_map_column_is_properties(spark: Any, namespace: rb.Namespace,
                                                          partitioned_queue: str) -> None:
    import json

    from pyspark.sql import functions as F

    df = (spark.range(0, 5).withColumn("doc", F.struct(F.col("id").alias("n"), F.lit("x").alias("s")))
          .withColumn("props", F.create_map(F.lit("n"), F.col("id").cast("string")))
          .withColumn("session", F.lit("s1")))
    assert write_dataframe(df, namespace, partitioned_queue, body="doc", session_id="session", properties="props") == 5
    rows = read_dataframe(spark, namespace, partitioned_queue, mode="peek").collect()
    assert sorted(json.loads(bytes(r.body))["n"] for r in rows) == list(range(5))
    assert {r.content_type for r in rows} == {"application/json"}
    assert {r.session_id for r in rows} == {"s1"}
    assert sorted(int(r.application_properties["n"]) for r in rows) == list(range(5))


def test_bad_input_raises_before_any_row_is_sent(spark: Any, namespace: rb.Namespace, partitioned_queue: str) -> None:
    df = orders(spark, 50)
    with pytest.raises(rb.errors.InvalidArgumentError, match="'nope' is not in the DataFrame"):
        write_dataframe(df, namespace, partitioned_queue, partition_key="nope")
    with pytest.raises(rb.errors.InvalidArgumentError, match="unsupported type"):
        write_dataframe(df, namespace, partitioned_queue, body="amount")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError, match="no queue or topic"):
        write_dataframe(df, namespace, f"missing-{uuid.uuid4().hex[:6]}")
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        read_dataframe(spark, namespace, f"missing-{uuid.uuid4().hex[:6]}")
    with pytest.raises(rb.errors.InvalidArgumentError, match="mode"):
        read_dataframe(spark, namespace, partitioned_queue, mode="browse")
    assert active(namespace, partitioned_queue) == 0


def test_topic_in_subscription_out(spark: Any, namespace: rb.Namespace) -> None:
    topic = f"st-{uuid.uuid4().hex[:8]}"
    namespace.create_topic(topic, enable_partitioning=True)
    namespace.create_subscription(topic, "eu", rule=rb.SqlFilter("region = 'eu'"))
    try:
        write_dataframe(orders(spark, 40), namespace, topic, partition_key="customer", properties=["region"])
        with pytest.raises(rb.errors.MessagingEntityNotFoundError, match="pass subscription="):
            read_dataframe(spark, namespace, topic)
        rows = read_dataframe(spark, namespace, topic, subscription="eu", max_wait_time=2).collect()
        assert len(rows) == 20 and {r.application_properties["region"] for r in rows} == {"eu"}
    finally:
        namespace.delete_topic(topic)
