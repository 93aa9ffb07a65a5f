"""The README's Spark pipeline example, run as a user runs it (`--long`: it starts a Ray and a Spark
session of its own, about two minutes): it exits 0, says little besides its own lines, and leaves
no temporary directory behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN_LINES = ("stage ", "batch ", "top customers", "  customer-", "OK: ")
MOST_OTHER_LINES = 20
"""Lines of Spark, its JVM and Ray allowed besides the pipeline's own (113 before they were quieted)."""


def test_the_orders_pipeline_matches_its_totals_quietly_and_cleans_up(long_run: bool) -> None:
    if not long_run:
        pytest.skip("starts a Ray and a Spark session of its own (about two minutes): run with --long")
    tmp_path = Path(tempfile.mkdtemp(prefix="rbx-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "TMPDIR": str(tmp_path), "RAY_BROKER_HOME": str(tmp_path / "home")}
    try:
        run = subprocess.run([sys.executable, "examples/orders_pipeline.py", "--rows", "1000", "--batch-size", "250"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        left = list(tmp_path.glob("orders-pipeline-*"))
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    own = [line for line in run.stdout.splitlines() if line.startswith(OWN_LINES)]
    assert own[0].startswith("stage 1: 1000 orders") and own[-1].startswith("OK: 40 customers, 1000 orders"), own
    other = [line for line in (run.stdout + run.stderr).splitlines() if line.strip() and line not in own]
    assert len(other) <= MOST_OTHER_LINES, "\n".join(other)
    assert not left, "the example's temporary directory is removed"
