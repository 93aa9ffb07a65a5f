"""ISO 8601 durations as the emulator's `Config-schema.json` writes them: `P[nY][nM][nD][T[nH][nM][nS]]`
(weeks and fractional seconds are taken too). A year counts 365 days and a month 30, as .NET's
`XmlConvert.ToTimeSpan` counts them. Pure.
"""
from __future__ import annotations

import re

_DURATION = re.compile(r"P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?"
                       r"(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")
_UNIT_SECONDS = (365 * 86_400, 30 * 86_400, 7 * 86_400, 86_400, 3_600, 60, 1)


def duration_seconds(text: str) -> float | None:
    """The seconds an ISO 8601 duration stands for, or None when `text` is not one.

    >>> duration_seconds("PT1M"), duration_seconds("P1DT1H"), duration_seconds("PT0.5S")
    (60.0, 90000.0, 0.5)
    >>> duration_seconds("1 hour") is None, duration_seconds("PT") is None, duration_seconds("P") is None
    (True, True, True)
    """
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    return float(sum(float(part) * unit for part, unit in zip(match.groups(), _UNIT_SECONDS) if part))
