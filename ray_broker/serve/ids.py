"""Task ids for enqueues that name none, placed in runs on one partition (Ray-free).

A task id is its message's id, and the task queue (with duplicate detection) places a message by
its id, as the results queue places the task's records: so an id decides the one partition a
task's enqueue, records and status reads all go to. `StickyTaskIds` draws random ids (uuid4) until
one lands on the partition of the current run, and moves the run to the next partition after
`run` ids: a producer's consecutive enqueues meet a partition process that is already busy with
them rather than a different, idle one each time (on a small machine that halves the partition
work per task), while the load still turns over every partition. An id a caller names
(`task_id=`) is placed by its hash, as any message id is.
"""
from __future__ import annotations

import random
import uuid
from typing import Callable

from ..protocol import partition_for_key

RUN = 32
"""How many consecutive generated ids land on one partition."""


class StickyTaskIds:
    """A callable giving new task ids, `run` at a time on one partition of `partition_count`.

    Args:
        partition_count: the namespace's partitions.
        run: ids per partition before moving to the next.
        start: the first run's partition (default: a random one, so producers spread).
        draw: a new random id.

    Example:
        >>> ids = StickyTaskIds(4, run=2, start=1)
        >>> [partition_for_key(ids(), 4) for _ in range(5)]
        [1, 1, 2, 2, 3]
    """

    def __init__(self, partition_count: int, *, run: int = RUN, start: int | None = None,
                 draw: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self._count = max(1, partition_count)
        self._run = max(1, run)
        self._partition = random.randrange(self._count) if start is None else start % self._count
        self._given = 0
        self._draw = draw

    def __call__(self) -> str:
        if self._given == self._run:
            self._partition, self._given = (self._partition + 1) % self._count, 0
        self._given += 1
        while True:
            task_id = self._draw()
            if self._count == 1 or partition_for_key(task_id, self._count) == self._partition:
                return task_id
