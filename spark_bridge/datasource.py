"""`EntityDatasource`: a Ray Data source that reads a queue or subscription, peeking or receiving."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pyarrow as pa
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata

import ray_broker as rb
from ray_broker.errors import PartitionUnavailableError

from .entity import check_count, check_mode, entity_to_read
from .heap import freeze_startup_objects
from .rows import JSON_SCHEMA, READ_SCHEMA, json_table_from_messages, table_from_messages

RECEIVE_PAGE = 8000
"""Messages asked for in one receive call; each answer becomes one block."""
RECEIVE_TASKS = 4
"""The most read tasks in "receive" mode, each taking the messages of its share of the partitions:
more tasks only add processes, and silent waits at the end."""
PEEK_PAGE = 1000
"""Messages asked for in one peek call (of the one partition whose range the task reads)."""


def peek_partition(receiver: rb.Receiver, start: int, end: int,
                   limit: int | None) -> Iterator[list[rb.ReceivedMessage]]:
    """Pages of the messages with sequence numbers in [`start`, `end`) (a range inside one
    partition), at most `limit` in all, browsed without locking them."""
    left = limit
    start = max(start, 1)  # sequence number 0 would ask the receiver to continue where it stopped
    while start < end and (left is None or left > 0):
        count = PEEK_PAGE if left is None else min(PEEK_PAGE, left)
        page = receiver.peek_messages(count, sequence_number=start, end_sequence_number=end)
        if page:
            yield page
            start = page[-1].sequence_number + 1
            left = None if left is None else left - len(page)
        if len(page) < count:
            return


def partition_end(partition: int) -> int:
    """The sequence number after the last one partition `partition` can give."""
    return rb.sequence_number(partition + 1)


class EntityDatasource(Datasource):
    """Reads a queue (or a topic's subscription) into a Dataset of API.md's read columns.

    Args:
        ns: the namespace (the handle pickles into the read tasks).
        entity: the queue, or the topic of `subscription`; it must exist.
        mode: "peek" browses without consuming, one read task per partition, each reading its
            partition's messages in sequence-number order; "receive" consumes, with up to
            `RECEIVE_TASKS` read tasks, each emptying its share of the partitions (with
            `max_messages`, each takes its share of the count from all of them): each receives
            (peek-lock) and completes a block's messages once the block is handed to Ray Data,
            so a task that dies leaves them to be delivered again.
        subscription: the subscription to read, when `entity` is a topic.
        max_messages: the most messages read in all (None: whatever is there). With "peek", they
            are the first ones in browsing order (partition 0's, then partition 1's, ...).
        max_wait_time: in "receive" mode, a task ends after this many seconds without a message.
        properties_as_json: give `application_properties` as one JSON text column
            (`spark_bridge.rows.PROPERTIES_JSON`), the form Spark takes from Ray Data.

    Example:
        ds = ray.data.read_datasource(EntityDatasource(ns, "orders", mode="peek"))
    """

    def __init__(self, ns: rb.Namespace, entity: str, mode: str = "peek", subscription: str | None = None,
                 max_messages: int | None = None, *, max_wait_time: float = 5,
                 properties_as_json: bool = False) -> None:
        self._ns = ns
        self._schema = JSON_SCHEMA if properties_as_json else READ_SCHEMA
        self._json = properties_as_json
        self._mode = check_mode(mode)
        self._max_messages = check_count("max_messages", max_messages, optional=True)
        self._max_wait_time = max_wait_time
        self._entity = entity_to_read(ns, entity, subscription)

    def get_name(self) -> str:
        """The source's name in Ray Data's progress output."""
        return f"Entity({self._entity.name})"

    @property
    def most_tasks(self) -> int:
        """The most read tasks this source makes: one per partition to peek, up to
        `RECEIVE_TASKS` to receive (ask Ray Data for as many blocks: more would split each one)."""
        count = len(self._entity.partitions)
        return count if self._mode == "peek" else min(count, RECEIVE_TASKS)

    def estimate_inmemory_data_size(self) -> int | None:
        """Unknown until read."""
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """One task per partition to peek, each reading what its partition held now; to receive,
        `parallelism` tasks, at most `RECEIVE_TASKS` and no more than there are partitions."""
        if self._mode == "peek":
            fns = [self._peek_fn(k, end, limit) for k, (end, limit) in self._peek_ranges().items() if limit != 0]
        else:
            tasks = max(1, min(self.most_tasks, parallelism if parallelism > 0 else 1))
            fns = [self._receive_fn(self._receive_partitions(i, tasks), share)
                   for i, share in enumerate(self._shares(tasks)) if share != 0]
        metadata = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
        return [ReadTask(fn, metadata, schema=self._schema, per_task_row_limit=per_task_row_limit) for fn in fns]

    def _receive_partitions(self, task: int, tasks: int) -> tuple[int, ...] | None:
        """The partitions receive task `task` of `tasks` empties: every `tasks`-th one, so that
        each partition serves one reader (fewer, larger calls); with `max_messages`, every task
        takes its share of the count from all of them (None)."""
        return self._entity.partitions[task::tasks] if self._max_messages is None else None

    def _shares(self, tasks: int) -> list[int | None]:
        """Each receive task's share of `max_messages` (None: no limit)."""
        if self._max_messages is None:
            return [None] * tasks
        base, extra = divmod(self._max_messages, tasks)
        return [base + (1 if i < extra else 0) for i in range(tasks)]

    def _peek_ranges(self) -> dict[int, tuple[int, int | None]]:
        """For each partition, where its task stops (the sequence number the partition gives next:
        messages sent while the Dataset is read are not in it) and how many messages it reads
        (with `max_messages`, the first ones in browsing order, from each partition's active
        count)."""
        entity = self._entity
        props = self._ns.get_queue_runtime_properties(entity.name) if entity.subscription is None else \
            self._ns.get_subscription_runtime_properties(entity.name, entity.subscription)
        missing = [p.index for p in props.partitions if not p.available]
        if missing:
            raise PartitionUnavailableError(
                f"partition(s) {missing} of {entity.describe()} did not answer, so their messages cannot be "
                "peeked now; read again once the namespace reports them available")
        # A non-partitioned entity lives on one partition, whose sequence numbers name partition 0.
        answers = dict(zip(entity.partitions, props.partitions)) if len(entity.partitions) == 1 else \
            {p.index: p for p in props.partitions}
        ranges: dict[int, tuple[int, int | None]] = {}
        left = self._max_messages
        for k in entity.partitions:
            limit = left if left is None or len(entity.partitions) == 1 else min(left, answers[k].active_message_count)
            ranges[k] = (answers[k].next_sequence_number, limit)
            left = None if left is None else left - (limit or 0)
        return ranges

    def _table(self) -> Callable[[list[rb.ReceivedMessage]], pa.Table]:
        """How a page of messages becomes a block."""
        return json_table_from_messages if self._json else table_from_messages

    def _peek_fn(self, partition: int, end: int, limit: int | None) -> Callable[[], Iterator[pa.Table]]:
        ns, entity, table = self._ns, self._entity, self._table()

        def read() -> Iterator[pa.Table]:
            freeze_startup_objects()
            with entity.receiver(ns, None) as receiver:
                for page in peek_partition(receiver, rb.sequence_number(partition), end, limit):
                    yield table(page)

        return read

    def _receive_fn(self, partitions: tuple[int, ...] | None, share: int | None) -> Callable[[], Iterator[pa.Table]]:
        ns, entity, wait, table = self._ns, self._entity, self._max_wait_time, self._table()

        def read() -> Iterator[pa.Table]:
            freeze_startup_objects()
            left = share
            with entity.receiver(ns, wait, partitions) as receiver:
                while left is None or left > 0:
                    page = receiver.receive_messages(RECEIVE_PAGE if left is None else min(RECEIVE_PAGE, left))
                    if not page:
                        return
                    yield table(page)
                    for message in page:
                        receiver.complete_message(message)
                    left = None if left is None else left - len(page)

        return read
