"""The Spark pipeline of the README: orders from a CSV, through a partitioned queue, to per-customer totals.

1. A Spark job reads a CSV of orders and writes them, keyed by customer, into the partitioned
   queue `orders` (one message an order: the order as JSON, the customer as partition key, the
   order id as message id, the amount as an application property).
2. A second stage reads `orders` in micro-batches (`stream_from_entity`), sums each batch per
   customer and writes those partial totals to the queue `customer-totals`; a batch is completed
   when the next one is asked for, so `orders` has a lock duration longer than a batch takes.
3. The totals are read back (`read_dataframe`), added up per customer and checked against the
   same sums computed by Spark straight from the CSV.

    python examples/orders_pipeline.py [--csv orders.csv] [--rows 5000] [--batch-size 1000]

Runs on an embedded local Ray and a temporary namespace; exits 0 when the totals match.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import warnings
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray_broker as rb  # noqa: E402 - after the path is set, so the script runs from a checkout
from examples.make_orders import write_orders  # noqa: E402
from spark_bridge import init_spark, read_dataframe, stop_spark, stream_from_entity, write_dataframe  # noqa: E402
from spark_bridge.session import start_ray  # noqa: E402

ORDER_SCHEMA = "order_id STRING, customer STRING, item STRING, amount DOUBLE"
TOTAL_SCHEMA = "customer STRING, orders LONG, total DOUBLE"


def load_orders(spark, ns: rb.Namespace, csv_path: str) -> int:  # type: ignore[no-untyped-def]
    """Stage 1: the CSV's orders into the `orders` queue, keyed by customer; returns how many."""
    from pyspark.sql import functions as F

    orders = spark.read.csv(csv_path, header=True, schema=ORDER_SCHEMA)
    messages = orders.withColumn("body", F.to_json(F.struct("order_id", "customer", "item", "amount")))
    return write_dataframe(messages, ns, "orders", body="body", partition_key="customer", message_id="order_id",
                           properties=["amount"])


def total_batches(spark, ns: rb.Namespace, batch_size: int) -> None:  # type: ignore[no-untyped-def]
    """Stage 2: micro-batches of `orders`, summed per customer, into `customer-totals`."""
    from pyspark.sql import functions as F

    for number, batch in enumerate(stream_from_entity(spark, ns, "orders", batch_size=batch_size, max_wait_time=3),
                                   start=1):
        order = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA)
        totals = (batch.select(order.alias("o")).groupBy("o.customer")
                  .agg(F.count("*").alias("orders"), F.round(F.sum("o.amount"), 2).alias("total")))
        rows = totals.withColumn("body", F.to_json(F.struct("customer", "orders", "total"))).cache()
        sent = write_dataframe(rows, ns, "customer-totals", body="body", partition_key="customer")
        print(f"batch {number}: {batch.count()} orders -> {sent} customer totals")
        rows.unpersist()


def check_totals(spark, ns: rb.Namespace, csv_path: str) -> bool:  # type: ignore[no-untyped-def]
    """Stage 3: the partial totals added up per customer, compared with Spark's sums of the CSV."""
    from pyspark.sql import functions as F

    partial = read_dataframe(spark, ns, "customer-totals", max_wait_time=2) \
        .select(F.from_json(F.col("body").cast("string"), TOTAL_SCHEMA).alias("t")).select("t.*")
    got = partial.groupBy("customer").agg(F.sum("orders").alias("orders"), F.round(F.sum("total"), 2).alias("total"))
    want = spark.read.csv(csv_path, header=True, schema=ORDER_SCHEMA).groupBy("customer") \
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
    got_rows = {r.customer: (r.orders, r.total) for r in got.collect()}
    want_rows = {r.customer: (r.orders, r.total) for r in want.collect()}
    print("top customers by total:")
    for customer, (orders, total) in sorted(got_rows.items(), key=lambda kv: -kv[1][1])[:5]:
        print(f"  {customer}  {orders:5d} orders  {total:12,.2f}")
    matches = set(got_rows) == set(want_rows) and all(
        got_rows[c][0] == want_rows[c][0] and abs(got_rows[c][1] - want_rows[c][1]) < 0.05 for c in want_rows)
    print(f"{'OK' if matches else 'MISMATCH'}: {len(got_rows)} customers, "
          f"{sum(o for o, _ in got_rows.values())} orders in the totals, {sum(o for o, _ in want_rows.values())} "
          "in the CSV")
    return matches


def quiet() -> None:
    """Keep the output to the pipeline's own lines: no Ray Data progress logs, no Spark console
    progress bar, no warnings about PySpark's and Ray Data's internals (call before Spark starts)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pyspark\..*|ray\.data\..*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def main() -> int:
    """Run the three stages on a fresh namespace; 0 when the totals match the CSV."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--csv", help="a CSV of orders (order_id,customer,item,amount); default: generate one")
    p.add_argument("--rows", type=int, default=5000, help="orders to generate when no --csv is given")
    p.add_argument("--batch-size", type=int, default=1000, help="orders per micro-batch of stage 2")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="orders-pipeline-")
    csv_path = args.csv or os.path.join(work, "orders.csv")
    if args.csv is None:
        write_orders(csv_path, args.rows, customers=40, seed=7)
    quiet()
    start_ray("local")
    spark = init_spark("orders-pipeline", 1, 1, "1g", configs={"spark.sql.shuffle.partitions": "4",
                                                                "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    ns = rb.start("orders-pipeline", data_dir=os.path.join(work, "broker"))
    try:
        ns.create_queue("orders", enable_partitioning=True, lock_duration=timedelta(minutes=5))
        ns.create_queue("customer-totals", enable_partitioning=True)
        print(f"stage 1: {load_orders(spark, ns, csv_path)} orders from {csv_path} into queue 'orders'")
        print("stage 2: micro-batches of 'orders', totals per customer into 'customer-totals'")
        total_batches(spark, ns, args.batch_size)
        print("stage 3: totals read back from 'customer-totals'")
        return 0 if check_totals(spark, ns, csv_path) else 1
    finally:
        stop_spark()
        rb.stop("orders-pipeline", delete_data=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
