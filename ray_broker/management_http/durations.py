"""ISO 8601 durations as Service Bus writes them (`PT1M`, `P14D`, `P10675199DT2H48M5.4775807S`),
to and from seconds. Pure.

The broker says "never" (no time to live, never deleted when idle) with None; Service Bus says it
with the largest .NET TimeSpan, `P10675199DT2H48M5.4775807S`, which is what `format_duration`
writes for None and what `parse_duration` reads back as None (as does anything at least 10,675,199
days long).
"""
from __future__ import annotations

import re

from ..clock import MAX_DURATION_SECONDS
from ..errors import InvalidArgumentError

NEVER = "P10675199DT2H48M5.4775807S"
"""Service Bus's longest duration (.NET `TimeSpan.MaxValue`), which stands for "never"."""

_DURATION = re.compile(r"P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def format_duration(seconds: float | None) -> str:
    """`seconds` as an ISO 8601 duration (days, hours, minutes, seconds); None as `NEVER`.

    >>> format_duration(60), format_duration(90061.5), format_duration(0), format_duration(None)
    ('PT1M', 'P1DT1H1M1.5S', 'PT0S', 'P10675199DT2H48M5.4775807S')
    """
    if seconds is None or seconds >= MAX_DURATION_SECONDS:
        return NEVER
    whole, fraction = divmod(seconds, 1)
    days, rest = divmod(int(whole), 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    text = f"{days}D" if days else ""
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if secs or fraction:
        clock += f"{secs + fraction:g}S" if fraction else f"{secs}S"
    if clock or not text:
        text += "T" + (clock or "0S")
    return "P" + text


def parse_duration(text: str, what: str) -> float | None:
    """The seconds an ISO 8601 duration of weeks, days, hours, minutes and seconds stands for; None
    for `NEVER` or longer. `what` names the property in the error a bad text raises.

    >>> parse_duration("PT30S", "lock_duration"), parse_duration("P1DT1H", "x"), parse_duration(NEVER, "x")
    (30.0, 90000.0, None)
    """
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or text.strip() in ("P", "PT") or text.strip().endswith("T"):
        raise InvalidArgumentError(f"{what} must be an ISO 8601 duration such as PT1M or P1DT2H (years and "
                                   f"months are not supported), got {text!r}")
    weeks, days, hours, minutes, secs = (float(part) if part else 0.0 for part in match.groups())
    seconds = (weeks * 7 + days) * 86_400 + hours * 3_600 + minutes * 60 + secs
    return None if seconds >= MAX_DURATION_SECONDS else seconds
