"""`write_dataframe` and `read_dataframe`: Spark DataFrames to and from entities, through Ray Data."""
from __future__ import annotations

from typing import Sequence

import ray.data
from pyspark.sql import DataFrame, SparkSession, types
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

import ray_broker as rb

from .datasink import EntityDatasink
from .datasource import EntityDatasource
from .entity import entity_to_write
from .rows import (
    BINARY,
    JSON,
    JSON_SCHEMA,
    MAP,
    NULL,
    OTHER,
    PROPERTIES_JSON,
    READ_SCHEMA,
    SCALAR,
    STRING,
)

TASK_CPUS = 0.25
"""Logical CPUs of a read or write task: they mostly wait on the broker, so several share a CPU."""
TASK_CONCURRENCY = 4
"""The most read or write tasks at once (each is a worker process of its own)."""

_SCALAR_TYPES = (types.NumericType, types.BooleanType, types.TimestampType, types.TimestampNTZType, types.DateType)


def spark_kind(data_type: types.DataType) -> str:
    """The kind (`spark_bridge.rows`) of a Spark column type."""
    if isinstance(data_type, types.BinaryType):
        return BINARY
    if isinstance(data_type, types.StringType):
        return STRING
    if isinstance(data_type, types.MapType):
        return MAP
    if isinstance(data_type, (types.StructType, types.ArrayType)):
        return JSON
    if isinstance(data_type, types.NullType):
        return NULL
    if isinstance(data_type, _SCALAR_TYPES):
        return SCALAR
    return OTHER


def spark_kinds(schema: types.StructType) -> dict[str, str]:
    """Each column's kind, by name."""
    return {f.name: spark_kind(f.dataType) for f in schema.fields}


READ_SPARK_SCHEMA = from_arrow_schema(READ_SCHEMA)
"""The Spark schema of a DataFrame read from an entity."""
JSON_SPARK_SCHEMA = from_arrow_schema(JSON_SCHEMA)
"""The Spark schema of read rows whose properties travel as JSON text (`spark_bridge.rows.PROPERTIES_JSON`)."""
_PROPERTIES_TYPE = READ_SPARK_SCHEMA["application_properties"].dataType


def with_properties_map(df: DataFrame) -> DataFrame:
    """Read rows with the properties' JSON text made into the map column again."""
    return df.withColumn("application_properties", F.from_json(PROPERTIES_JSON, _PROPERTIES_TYPE)) \
        .select(*READ_SCHEMA.names)


def write_dataframe(df: DataFrame, ns: rb.Namespace, entity: str, *, body: str = "body",
                    partition_key: str | None = None, session_id: str | None = None, message_id: str | None = None,
                    properties: str | Sequence[str] | None = None) -> int:
    """Send a DataFrame's rows to a queue or topic, one message a row; returns the rows sent.

    The DataFrame goes to Ray Data through RayDP and each block is sent in batches by
    `EntityDatasink`; RayDP's cached copy is released afterwards. The columns and the entity are
    checked before any row is sent: `InvalidArgumentError` for a missing column or an unsupported
    type, `MessagingEntityNotFoundError` for an entity that does not exist.

    Example:
        write_dataframe(orders_df, ns, "orders", body="payload", partition_key="customer")
    """
    from raydp.spark import from_spark_recoverable, release_spark_recoverable

    sink = EntityDatasink(ns, entity, body=body, partition_key=partition_key, session_id=session_id,
                          message_id=message_id, properties=properties)
    sink.spec.validate(spark_kinds(df.schema), "the DataFrame")
    entity_to_write(ns, entity)
    dataset = from_spark_recoverable(df)
    try:
        dataset.write_datasink(sink, ray_remote_args={"num_cpus": TASK_CPUS}, concurrency=TASK_CONCURRENCY)
    finally:
        release_spark_recoverable(df)
    return sink.rows_written


def read_dataframe(spark: SparkSession, ns: rb.Namespace, entity: str, *, mode: str = "receive",
                   max_messages: int | None = None, subscription: str | None = None,
                   max_wait_time: float = 5) -> DataFrame:
    """A DataFrame of an entity's messages (API.md's read columns), read by `EntityDatasource`.

    `mode="receive"` consumes the messages (completed once their rows are in Ray's object store);
    `"peek"` browses without consuming. `max_messages=None` reads what is there until
    `max_wait_time` seconds pass without a message. The rows stay in Ray's object store, pinned
    by RayDP, until the Spark session stops.

    Example:
        df = read_dataframe(spark, ns, "orders", mode="peek")
    """
    source = EntityDatasource(ns, entity, mode=mode, subscription=subscription, max_messages=max_messages,
                              max_wait_time=max_wait_time, properties_as_json=True)
    dataset = ray.data.read_datasource(source, override_num_blocks=source.most_tasks, num_cpus=TASK_CPUS,
                                       concurrency=TASK_CONCURRENCY).materialize()
    if dataset.count() == 0:
        return spark.createDataFrame([], READ_SPARK_SCHEMA)
    blocks = max(1, spark.sparkContext.defaultParallelism)
    return with_properties_map(dataset.repartition(blocks, shuffle=False).materialize().to_spark(spark))


__all__ = ["write_dataframe", "read_dataframe", "spark_kind", "spark_kinds", "with_properties_map", "READ_SPARK_SCHEMA",
           "JSON_SPARK_SCHEMA"]
