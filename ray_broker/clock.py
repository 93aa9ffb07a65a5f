"""Clocks for the broker engine: the system clock and a manual clock for tests.

Times are float seconds since the Unix epoch (UTC) throughout the engine.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Protocol


class Clock(Protocol):
    """A source of the current time in epoch seconds."""

    def now(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to; for tests of time-based rules."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds`."""
        if seconds < 0:
            raise ValueError("a clock cannot move backwards")
        self._now += seconds


def to_datetime(epoch: float | None) -> datetime | None:
    """Convert epoch seconds to an aware UTC datetime (None stays None)."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def to_epoch(value: datetime) -> float:
    """Convert a datetime to epoch seconds; a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()
