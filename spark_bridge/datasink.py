"""`EntityDatasink`: a Ray Data sink that sends each block's rows to a queue or topic."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import pyarrow as pa
from ray.data import Datasink
from ray.data.block import Block, BlockAccessor
from ray.data.datasource.datasink import WriteResult

import ray_broker as rb

from .entity import Entity, entity_to_write
from .heap import freeze_startup_objects
from .rows import WriteSpec, arrow_kinds
from .batch_sending import send_spread


class EntityDatasink(Datasink[int]):
    """Writes a Dataset's rows as messages: one message a row, each block sent in batches, several
    partitions at once (a key's messages stay in row order).

    Args:
        ns: the namespace (the handle pickles into the write tasks).
        entity: the queue, else topic, to send to; it must exist.
        body, partition_key, session_id, message_id, properties: the columns that make a message
            (see `spark_bridge.rows.WriteSpec`); a null key is an unkeyed message.

    The entity and the columns are checked before any row is sent (`MessagingEntityNotFoundError`,
    `InvalidArgumentError`). After the write, `rows_written` says how many rows were sent.

    Example:
        ds = ray.data.from_items([{"body": b"a", "customer": "c1"}])
        ds.write_datasink(EntityDatasink(ns, "orders", partition_key="customer"))
    """

    def __init__(self, ns: rb.Namespace, entity: str, *, body: str = "body", partition_key: str | None = None,
                 session_id: str | None = None, message_id: str | None = None,
                 properties: str | Sequence[str] | None = None) -> None:
        self._ns = ns
        self._entity_name = entity
        self._spec = WriteSpec(body, partition_key, session_id, message_id, properties)
        self._entity: Entity | None = None
        self.rows_written = 0

    @property
    def spec(self) -> WriteSpec:
        """The columns that make a message."""
        return self._spec

    def get_name(self) -> str:
        """The sink's name in Ray Data's progress output."""
        return f"Entity({self._entity_name})"

    def on_write_start(self, schema: Any = None) -> None:
        """Check the entity, and the columns against the first block's schema, before any write."""
        self._entity = entity_to_write(self._ns, self._entity_name)
        arrow_schema = getattr(schema, "base_schema", schema)
        if isinstance(arrow_schema, pa.Schema):
            self._spec.validate(arrow_kinds(arrow_schema), "the Dataset")

    def write(self, blocks: Iterable[Block], ctx: Any) -> int:
        """Send every row of the blocks; returns how many were sent."""
        freeze_startup_objects()
        entity = self._entity or entity_to_write(self._ns, self._entity_name)
        sent = 0
        for block in blocks:
            table = BlockAccessor.for_block(block).to_arrow()
            self._spec.validate(arrow_kinds(table.schema), "the Dataset")
            sent += send_spread(self._ns, entity, self._spec.envelopes(table))
        return sent

    def on_write_complete(self, write_result: WriteResult[int]) -> None:
        """Record how many rows the write tasks sent."""
        self.rows_written = sum(write_result.write_returns)
