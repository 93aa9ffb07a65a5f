"""Running a cluster scenario in a process of its own (a test process may already be attached to
the test session's Ray) and reading the one JSON line it prints of what it observed.

A scenario mostly waits (on nodes dying and coming back, on paced sends), so the session starts
the selected ones in the background as soon as it has collected its tests, one after another, and
runs their tests last (`tests/cluster/conftest.py`): by then they have usually finished."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 60.0
"""How long a scenario interrupted at the session's end has to shut its cluster down."""


@dataclass(frozen=True)
class Scenario:
    """`python -m module WORKDIR *args`, run from the repository root within `timeout` seconds."""

    module: str
    timeout: float
    args: tuple[str, ...] = ()


class Outcome:
    """What one scenario observed, once its process ended, or why it observed nothing."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.observed: dict[str, Any] | None = None
        self.failure: str | None = None
        self.seconds: float | None = None
        """How long its process ran."""


class BackgroundScenarios:
    """Runs scenarios one after another in a thread, each in a process of its own under `root`.

    Args:
        scenarios: in the order to run them (each once).
        root: a directory for their work directories (removed by `close`).
    """

    def __init__(self, scenarios: list[Scenario], root: Path) -> None:
        self.root = root
        self._outcomes = {scenario: Outcome() for scenario in scenarios}
        self._running: subprocess.Popen[str] | None = None
        self._closing = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run_all, name="cluster-scenarios", daemon=True)

    def start(self) -> None:
        """Start the first scenario now and the others as each one before it ends."""
        self._thread.start()

    def observed(self, scenario: Scenario) -> dict[str, Any]:
        """Wait for `scenario` and return what it observed (asserting it ran to its end without an error)."""
        outcome = self._outcomes[scenario]
        outcome.done.wait()
        assert outcome.failure is None, outcome.failure
        assert outcome.observed is not None
        return outcome.observed

    def timings(self) -> list[str]:
        """A line for each scenario: how long it ran, or that it did not."""
        return [f"{scenario.module}: " + ("did not run" if outcome.seconds is None else
                                          f"{outcome.seconds:.0f} s" + (" (failed)" if outcome.failure else ""))
                for scenario, outcome in self._outcomes.items()]

    def close(self) -> None:
        """Interrupt a scenario still running (it shuts its cluster down on Ctrl-C) and remove the
        work directories."""
        with self._lock:
            self._closing = True
            running = self._running
        if running is not None and running.poll() is None:
            running.send_signal(signal.SIGINT)
            try:
                running.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                running.kill()
        self._thread.join(timeout=STOP_GRACE_S)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run_all(self) -> None:
        for index, (scenario, outcome) in enumerate(self._outcomes.items()):
            began = time.monotonic()
            try:
                outcome.observed = self._run(scenario, self.root / f"{index}-{scenario.module.rsplit('.', 1)[-1]}")
            except Exception as exc:  # noqa: BLE001 - reported to the scenario's tests
                outcome.failure = f"{type(exc).__name__}: {exc}"
            finally:
                outcome.seconds = time.monotonic() - began
                outcome.done.set()

    def _run(self, scenario: Scenario, workdir: Path) -> dict[str, Any]:
        workdir.mkdir(parents=True)
        with self._lock:
            if self._closing:
                raise RuntimeError("the test session ended before this scenario ran")
            process = self._running = subprocess.Popen(
                [sys.executable, "-m", scenario.module, str(workdir), *scenario.args], cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = process.communicate(timeout=scenario.timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            raise AssertionError(f"{scenario.module} ran over {scenario.timeout:g} s:\n{err[-3000:]}") from None
        return observed_in(scenario, process.returncode, out, err)


def observed_in(scenario: Scenario, status: int, out: str, err: str) -> dict[str, Any]:
    """The JSON line a scenario process printed last, asserting it ended well and reported no error."""
    assert status == 0, f"{scenario.module} exited with {status}:\n{err[-3000:]}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert "error" not in result, result
    return result


def interruptible() -> None:
    """Make Ctrl-C raise KeyboardInterrupt in a scenario process even when it was started with
    SIGINT ignored (as a test run in the background of a non-interactive shell starts its
    commands), so that `BackgroundScenarios.close` ends it through its clean-up (its cluster shut down)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def work_root() -> Path:
    """A new directory for a session's scenario work directories."""
    return Path(tempfile.mkdtemp(prefix="rb-cluster-"))
