"""`ray_broker.testing` as an application uses it: the order service in `examples/emulator_app`
runs its own test suite, written for Microsoft's emulator, on the pytest plugin's fixtures (found
through the package's `pytest11` entry point, no conftest): one broker for its session, emptied
queues per test, a queue of a test's own, the clock moved forward, the administration client."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .helpers import isolated_env, short_tmpdir

APP = Path(__file__).resolve().parents[2] / "examples" / "emulator_app"


def test_an_applications_own_suite_runs_on_the_plugins_fixtures() -> None:
    scratch = short_tmpdir("rbt-")
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=APP,
                             env=isolated_env(scratch, os.path.join(scratch, "home")), capture_output=True, text=True,
                             timeout=300)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "5 passed" in run.stdout, run.stdout[-2000:]
