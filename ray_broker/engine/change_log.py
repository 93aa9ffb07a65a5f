"""A leader's recent changes, kept in memory to bring followers that fell behind up to date.

A follower whose position is in the log takes the changes after it; one further behind (or a new
one) takes a full copy of the store instead (`Store.snapshot`).
"""
from __future__ import annotations

from collections import deque
from itertools import islice

from .. import codec
from ..errors import InvalidArgumentError
from .changes import Change

MAX_CHANGES = 10_000
"""How many changes a log keeps by default."""

MAX_BYTES = 64 * 1024 * 1024
"""How many bytes of changes (encoded) a log keeps by default."""


class ChangeLog:
    """The most recent changes of a leader, in order: at most `max_changes` of them and
    `max_bytes` of their encoded size (the oldest go first; a change alone larger than that is not
    kept at all).

    Args:
        position: the position of the last change before the log (the leader's position when it
            started the log).
        max_changes: see `MAX_CHANGES`.
        max_bytes: see `MAX_BYTES`.

    Example:
        >>> log = ChangeLog(0)
        >>> log.append(Change(1, 1, []))
        >>> [c.position for c in log.since(0)], log.since(1)
        ([1], [])
    """

    def __init__(self, position: int, max_changes: int = MAX_CHANGES, max_bytes: int = MAX_BYTES) -> None:
        if position < 0 or max_changes < 1 or max_bytes < 1:
            raise InvalidArgumentError(f"a change log starts at a position of 0 or more and keeps at least one change "
                                       f"and one byte, got {position}, {max_changes} and {max_bytes}")
        self._max_changes = max_changes
        self._max_bytes = max_bytes
        self._entries: deque[tuple[Change, int]] = deque()
        self._before = position
        """The position of the change before the oldest kept."""
        self._last = position
        self.bytes = 0
        """The encoded size of the changes kept."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last(self) -> int:
        """The position of the last change appended (or of the log's start)."""
        return self._last

    def append(self, change: Change) -> None:
        """Keep the next change, dropping the oldest beyond the bounds."""
        if change.position != self._last + 1:
            raise InvalidArgumentError(f"change {change.position} does not follow the log's last change, {self._last}; "
                                       "append the changes in the order the store committed them")
        size = len(codec.packb(change.encode()))
        self._entries.append((change, size))
        self._last = change.position
        self.bytes += size
        while self._entries and (len(self._entries) > self._max_changes or self.bytes > self._max_bytes):
            dropped, dropped_size = self._entries.popleft()
            self._before = dropped.position
            self.bytes -= dropped_size

    def since(self, position: int) -> list[Change] | None:
        """The changes after `position`, in order (none for a follower up to date); None when the
        log no longer holds them all: the follower needs a full copy."""
        if position > self._last or position < 0:
            raise InvalidArgumentError(f"position {position} is outside the log, which ends at {self._last}; "
                                       "ask with a follower's position (0 or more, at most the leader's)")
        if position < self._before:
            return None
        return [change for change, _ in islice(self._entries, position - self._before, None)]
