"""Running a cluster scenario in a process of its own (a test process may already be attached to
the test session's Ray) and reading the one JSON line it prints of what it observed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def observe(module: str, workdir: Path, timeout: float, *args: str) -> dict[str, Any]:
    """Run `python -m module workdir *args` from the repository root; what it observed (asserting
    it ran to its end without an error)."""
    run = subprocess.run([sys.executable, "-m", module, str(workdir), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    return result
