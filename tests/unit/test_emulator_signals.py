"""The emulator's stop signals around a start of Ray, whose own SIGTERM handler may be lost."""
from __future__ import annotations

import os
import signal

import pytest

from ray_broker.emulator.signals import ForegroundSignals, Stopping


def test_a_sigterm_whose_handler_was_dropped_during_the_start_still_stops_the_run() -> None:
    """Ray's handler raising inside a fork handler is printed and dropped: the signal must not be."""
    with ForegroundSignals(abort=lambda: None) as signals:
        with pytest.raises(Stopping, match="SIGTERM"):
            with signals.ray_starting():
                signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a handler whose raise was lost
                os.kill(os.getpid(), signal.SIGTERM)
        assert signals.stopping


def test_ray_s_own_handler_raising_sigterm_is_taken_as_the_stop_signal() -> None:
    with ForegroundSignals(abort=lambda: None) as signals:
        with pytest.raises(Stopping, match="SIGTERM"):
            with signals.ray_starting():
                raise SystemExit(signal.SIGTERM)


def test_a_start_without_signals_goes_on_and_the_handlers_come_back_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with ForegroundSignals(abort=lambda: None) as signals:
        with signals.ray_starting():
            pass
        assert not signals.stopping
    assert signal.getsignal(signal.SIGTERM) is before
