"""Where a peeking reader is in each partition, kept in a checkpoint directory."""
from __future__ import annotations

import json
import os
import tempfile

import ray_broker as rb
from ray_broker.errors import InvalidArgumentError

POSITIONS_FILE = "positions.json"
"""The file in a checkpoint directory that holds the next sequence number to read per partition."""


class PeekPositions:
    """The next sequence number to read in each partition, loaded from and saved to `checkpoint`.

    Args:
        checkpoint: a directory (created if missing), or None to keep positions in memory only.
        partitions: the partition indexes of the entity read.
    """

    def __init__(self, checkpoint: str | None, partitions: tuple[int, ...]) -> None:
        self._path = None if checkpoint is None else os.path.join(checkpoint, POSITIONS_FILE)
        self._next = {k: rb.sequence_number(k) for k in partitions}
        if self._path is not None and os.path.exists(self._path):
            with open(self._path, encoding="utf-8") as f:
                saved = {int(k): int(v) for k, v in json.load(f).items()}
            if set(saved) != set(self._next):
                raise InvalidArgumentError(
                    f"checkpoint {checkpoint!r} holds positions of partitions {sorted(saved)}, but the entity has "
                    f"{sorted(self._next)}: it belongs to another entity; use a new checkpoint directory")
            self._next = saved

    def __getitem__(self, partition: int) -> int:
        return self._next[partition]

    def __setitem__(self, partition: int, sequence_number: int) -> None:
        self._next[partition] = sequence_number

    def as_dict(self) -> dict[int, int]:
        """The positions, by partition."""
        return dict(self._next)

    def save(self) -> None:
        """Write the positions to the checkpoint directory at once (a reader that stops at any
        moment leaves either the previous positions or these)."""
        if self._path is None:
            return
        directory = os.path.dirname(self._path)
        os.makedirs(directory, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=".positions-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({str(k): v for k, v in self._next.items()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self._path)
