"""Keeping Ray's own notices out of a console program's output.

Ray's driver prints notices about its processes to standard output, each line tagged "(raylet)"
(worker start-up warnings, a killed worker), and logs start-up warnings (the token authentication
notice) through its loggers. Inside `quiet_ray()` only errors are logged and the tagged lines are
dropped; everything else passes through unchanged.
"""
from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from typing import Iterator, TextIO

_RAY_NOTICE = re.compile(r"^(\x1b\[[0-9;]*m)*\(raylet")
"""A line Ray's driver prints for its raylet (possibly coloured)."""


def is_ray_notice(line: str) -> bool:
    """Whether `line` is one of Ray's "(raylet)" notices."""
    return _RAY_NOTICE.match(line) is not None


class DropRayNotices(io.TextIOBase):
    """A text stream that passes everything on to `target` except Ray's "(raylet)" lines."""

    def __init__(self, target: TextIO) -> None:
        self._target = target
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not is_ray_notice(line):
                self._target.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending and not is_ray_notice(self._pending):
            self._target.write(self._pending)
        self._pending = ""
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")


@contextlib.contextmanager
def quiet_ray() -> Iterator[None]:
    """Within the block, log records below ERROR are dropped (Ray resets its own logger's level
    when it is first imported, so the threshold is set for every logger) and Ray's "(raylet)"
    lines are dropped from standard output."""
    threshold, stdout = logging.root.manager.disable, sys.stdout
    logging.disable(logging.WARNING)
    sys.stdout = DropRayNotices(stdout)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stdout = stdout
        logging.disable(threshold)
