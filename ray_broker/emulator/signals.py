"""SIGINT and SIGTERM as a container's main process takes them: the first asks for an orderly stop
(`Stopping` is raised in the main thread, wherever it is: starting, serving), any later one ends
the process at once, after the `abort` callback (which kills what must not outlive it).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import contextmanager
from types import FrameType
from typing import Any, Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
ABORT_EXIT_CODE = 130
"""The status of a run a second signal ended (interrupted, as the shell counts it)."""


class Stopping(BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM: stop what was started, exit 0.
    A `BaseException`, as `KeyboardInterrupt` is, so that no `except Exception` swallows it."""


class ForegroundSignals:
    """Takes SIGINT and SIGTERM while installed (`with`); the handlers they had come back after.

    Args:
        abort: called on the second signal, just before the process ends with `ABORT_EXIT_CODE`.
    """

    def __init__(self, abort: Callable[[], None]) -> None:
        self._abort = abort
        self._stopping = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> ForegroundSignals:
        self._previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def install(self) -> None:
        """(Re)install the handlers: starting Ray sets a SIGTERM handler of its own."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    @contextmanager
    def ray_starting(self) -> Iterator[None]:
        """Around a start of Ray, which takes SIGTERM with a handler of its own until it is up
        (`sys.exit(SIGTERM)`): a SIGTERM then is taken as the first stop signal (`Stopping`).

        Ray's handler may raise where Python can only print and drop the exception (in a fork
        handler as it starts a process): the signals that arrive meanwhile are also written to a
        wake-up pipe at the C level, and one found there once the start returned stops the run."""
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        try:
            yield
        except SystemExit as exc:
            if exc.code != signal.SIGTERM or self._stopping:
                raise
            self._stopping = True
            raise Stopping(signal.SIGTERM.name) from None
        finally:
            signal.set_wakeup_fd(previous)
            arrived = _drain(read_end)
            os.close(read_end)
            os.close(write_end)
        stop = next((sig for sig in STOP_SIGNALS if sig in arrived), None)
        if stop is not None and not self._stopping:
            self._stopping = True
            raise Stopping(signal.Signals(stop).name)

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for."""
        return self._stopping

    def wait(self) -> None:
        """Block until a signal asks to stop (it raises `Stopping` here)."""
        while True:
            time.sleep(3600)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._stopping:
            self._stopping = True
            raise Stopping(signal.Signals(signum).name)
        try:
            self._abort()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(ABORT_EXIT_CODE)


def _drain(fd: int) -> set[int]:
    """The signal numbers written to a non-blocking wake-up pipe so far."""
    arrived: set[int] = set()
    while True:
        try:
            chunk = os.read(fd, 512)
        except BlockingIOError:
            return arrived
        if not chunk:
            return arrived
        arrived.update(chunk)
