"""Clocks for the broker engine: the system clock and a manual clock for tests.

Times are float seconds since the Unix epoch (UTC) throughout the engine.
"""
from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

MAX_DURATION_SECONDS = 10_675_199 * 86_400.0
"""The longest duration the broker takes (a TTL, a default TTL): about 29,000 years, the largest
whole number of days a .NET TimeSpan holds, which Service Bus uses for "never expires"."""
_LATEST = datetime.max.replace(tzinfo=timezone.utc)
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


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


class OffsetClock:
    """The wall clock moved forward by an offset that only grows: a partition's clock, which tests
    move ahead (`ray_broker.testing.advance_clock`) instead of waiting.

    >>> clock = OffsetClock()
    >>> before = clock.now(); clock.advance(3600); clock.now() - before >= 3600
    True
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds` (a finite number, at least 0)."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a clock moves forward by a finite number of seconds, got {seconds!r}")
        self.offset += seconds


def to_datetime(epoch: float | None) -> datetime | None:
    """Convert epoch seconds to an aware UTC datetime (None stays None).

    A time beyond the range of `datetime` (an expiry 29,000 years ahead) is shown as the latest or
    earliest datetime, as Service Bus shows a message that never expires.
    """
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return _LATEST if epoch > 0 else _EARLIEST


def duration_seconds(value: Any) -> float | None:
    """A duration (a timedelta or a real number of seconds) as float seconds; None for anything else.

    An int too large for a float comes back as infinity, so that range checks refuse it.
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def to_epoch(value: datetime) -> float:
    """Convert a datetime to epoch seconds; a naive datetime is taken as UTC.

    Raises OverflowError for a time that falls outside datetime's range once in UTC (year 1 at
    +14:00), so that every epoch this returns converts back with `to_datetime`.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc).timestamp()
    return value.astimezone(timezone.utc).timestamp()
