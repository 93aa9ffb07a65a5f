"""Structured Streaming into entities (`stream_to_entity`) and micro-batch DataFrames out of them
(`stream_from_entity`)."""
from __future__ import annotations

import hashlib
import os
import time
from typing import Any, Iterator, Sequence
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

import ray_broker as rb
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessageLockLostError

from .dataframes import JSON_SPARK_SCHEMA, spark_kinds, with_properties_map
from .datasource import partition_end, peek_partition
from .entity import Entity, check_count, check_mode, entity_to_read, entity_to_write
from .positions import PeekPositions
from .rows import WriteSpec, arrow_kinds, json_table_from_messages, sort_envelopes
from .batch_sending import batches

CHUNKS_PER_BATCH = 32
"""The most send calls one micro-batch is written in: a partition remembers a named producer's
last 32 batch numbers, so the chunks of the batch being replayed are all still remembered."""
IDLE_POLL_S = 0.5
"""How often a peeking reader looks again while the entity has nothing new."""


def sink_producer_id(checkpoint_location: str) -> str:
    """The idempotent producer id of a stream sink: a hash of its checkpoint location, so a query
    restarted from its checkpoint writes as the same producer."""
    location = checkpoint_location if urlparse(checkpoint_location).scheme else os.path.abspath(checkpoint_location)
    return "sink:" + hashlib.sha1(location.encode("utf-8")).hexdigest()


class MicroBatchWriter:
    """The `foreachBatch` function of `stream_to_entity`: each micro-batch's rows, sent exactly once.

    A micro-batch's messages are put in an order that depends only on their content, packed into
    at most `CHUNKS_PER_BATCH` batches, and chunk i of micro-batch b is sent as batch number
    `b * CHUNKS_PER_BATCH + i` of the sink's idempotent producer; a replayed micro-batch (the
    query restarted after storing it but before Spark committed it) is the same chunks under the
    same numbers, which the partitions that stored them drop.
    """

    def __init__(self, ns: rb.Namespace, entity: Entity, spec: WriteSpec, producer_id: str) -> None:
        self._ns = ns
        self._entity = entity
        self._spec = spec
        self._producer_id = producer_id

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        record_batches = batch_df.select(*self._spec.columns())._collect_as_arrow()
        if not record_batches:
            return
        table = pa.Table.from_batches(record_batches)
        self._spec.validate(arrow_kinds(table.schema), f"micro-batch {batch_id}")
        envelopes = sort_envelopes(self._spec.envelopes(table))
        with self._entity.sender(self._ns) as sender:
            chunks = list(batches(sender.create_message_batch().max_size_in_bytes, envelopes))
            if len(chunks) > CHUNKS_PER_BATCH:
                raise InvalidOperationError(
                    f"micro-batch {batch_id} holds {len(envelopes)} rows, {len(chunks)} send batches; at most "
                    f"{CHUNKS_PER_BATCH} can be written exactly once: make micro-batches smaller (for example "
                    "with the source's maxOffsetsPerTrigger, maxFilesPerTrigger or rowsPerSecond option)")
            for index, chunk in enumerate(chunks):
                sender.send_idempotent(chunk, producer_id=self._producer_id,
                                       batch_number=batch_id * CHUNKS_PER_BATCH + index)


def stream_to_entity(streaming_df: DataFrame, ns: rb.Namespace, entity: str, *, checkpoint_location: str,
                     body: str = "body", partition_key: str | None = None, session_id: str | None = None,
                     message_id: str | None = None, properties: str | Sequence[str] | None = None,
                     trigger: dict[str, Any] | None = None) -> StreamingQuery:
    """Start a streaming query that sends each micro-batch's rows to a queue or topic, exactly once.

    Each micro-batch is written through `foreachBatch` by `MicroBatchWriter`: the sink (named by
    `checkpoint_location`) is an idempotent producer of the broker, so a micro-batch that Spark
    replays after a restart is not stored twice. `trigger` goes to `DataStreamWriter.trigger(**trigger)`.
    The columns and the entity are checked before the query starts.

    Example:
        query = stream_to_entity(events, ns, "orders", checkpoint_location="/tmp/orders-sink",
                                 partition_key="customer", trigger={"availableNow": True})
        query.awaitTermination()
    """
    if not streaming_df.isStreaming:
        raise InvalidArgumentError("stream_to_entity takes a streaming DataFrame (spark.readStream...); "
                                   "use write_dataframe for a batch DataFrame")
    if not isinstance(checkpoint_location, str) or not checkpoint_location:
        raise InvalidArgumentError(f"checkpoint_location must be a non-empty path, got {checkpoint_location!r}")
    spec = WriteSpec(body, partition_key, session_id, message_id, properties)
    spec.validate(spark_kinds(streaming_df.schema), "the streaming DataFrame")
    target = entity_to_write(ns, entity)
    writer = streaming_df.writeStream.foreachBatch(
        MicroBatchWriter(ns, target, spec, sink_producer_id(checkpoint_location)))
    writer = writer.option("checkpointLocation", checkpoint_location)
    if trigger is not None:
        writer = writer.trigger(**trigger)
    return writer.start()


def stream_from_entity(spark: SparkSession, ns: rb.Namespace, entity: str, *, batch_size: int = 1000,
                       mode: str = "receive", subscription: str | None = None, checkpoint: str | None = None,
                       max_wait_time: float | None = 5) -> Iterator[DataFrame]:
    """Micro-batch DataFrames (API.md's read columns) of at most `batch_size` messages each.

    `"receive"`: a batch's messages are completed when the caller asks for the next batch; if the
    loop ends otherwise (an exception, a break), they are abandoned and delivered again
    (at-least-once). A batch must be handled within the entity's lock duration (`lock_duration`
    of the queue or subscription; completing it later raises `MessageLockLostError`, and its
    messages are delivered again).
    `"peek"`: browses without consuming; with `checkpoint` (a directory) the next position of each
    partition is saved as each batch is handed over, so a restarted reader continues right after
    the last batch it yielded.
    The iterator ends after `max_wait_time` seconds without a new message (None: never).
    Batches are built in the driver, so no per-batch data stays pinned in Ray.

    Example:
        for batch in stream_from_entity(spark, ns, "orders", batch_size=500):
            batch.groupBy("partition_key").count().show()
    """
    size = check_count("batch_size", batch_size, optional=False)
    if check_mode(mode) == "receive" and checkpoint is not None:
        raise InvalidArgumentError("checkpoint keeps peek positions; mode='receive' consumes what it reads and "
                                   "keeps no positions: leave checkpoint=None")
    source = entity_to_read(ns, entity, subscription)
    if mode == "receive":
        return _received_batches(spark, ns, source, size, max_wait_time)
    return _peeked_batches(spark, ns, source, size, max_wait_time, PeekPositions(checkpoint, source.partitions))


def _dataframe(spark: SparkSession, messages: Sequence[rb.ReceivedMessage]) -> DataFrame:
    frame = json_table_from_messages(messages).to_pandas()
    return with_properties_map(spark.createDataFrame(frame, JSON_SPARK_SCHEMA))


def _received_batches(spark: SparkSession, ns: rb.Namespace, entity: Entity, size: int,
                      max_wait_time: float | None) -> Iterator[DataFrame]:
    with entity.receiver(ns, max_wait_time) as receiver:
        held: list[rb.ReceivedMessage] = []
        try:
            while True:
                for message in held:
                    receiver.complete_message(message)
                held = []  # completed: a receive that fails next has nothing to give back
                held = receiver.receive_messages(size)
                if not held:
                    return
                yield _dataframe(spark, held)
        except BaseException:
            _abandon(receiver, held)
            raise


def _abandon(receiver: rb.Receiver, messages: Sequence[rb.ReceivedMessage]) -> None:
    """Give the messages back at once; those whose lock already ran out are back anyway."""
    for message in messages:
        try:
            receiver.abandon_message(message)
        except MessageLockLostError:
            continue


def _peeked_batches(spark: SparkSession, ns: rb.Namespace, entity: Entity, size: int, max_wait_time: float | None,
                    positions: PeekPositions) -> Iterator[DataFrame]:
    with entity.receiver(ns, None) as receiver:
        idle_since = time.monotonic()
        first = 0
        while True:
            batch: list[rb.ReceivedMessage] = []
            order = entity.partitions[first:] + entity.partitions[:first]
            first = (first + 1) % len(entity.partitions)
            for partition in order:
                if len(batch) == size:
                    break
                for page in peek_partition(receiver, positions[partition], partition_end(partition),
                                           size - len(batch)):
                    batch.extend(page)
                    positions[partition] = page[-1].sequence_number + 1
            if batch:
                positions.save()
                yield _dataframe(spark, batch)
                idle_since = time.monotonic()
            elif max_wait_time is not None and time.monotonic() - idle_since >= max_wait_time:
                return
            else:
                time.sleep(IDLE_POLL_S)
