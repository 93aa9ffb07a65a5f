"""Ctrl-C during a `ray-broker` command: one line, status 130 (typer turns the interrupt into a
status; the command line still says what happened); run as the program, the process ends at once."""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from ray_broker.cli import main, messages
from ray_broker.cli.app import SIGNAL_CHECK_MS
from ray_broker.ray_head import SIGNAL_CHECK_ENV


def test_ctrl_c_during_a_command_is_one_line_and_status_130(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(messages, "attach", interrupted)
    assert main(["receive", "orders", "--wait", "60"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"


INTERRUPTED_PROGRAM = f"""
import atexit, os, sys, time
from ray_broker.cli import main, messages

atexit.register(time.sleep, 30)  # as Ray's disconnect at exit, which takes a second or more

def interrupted(*args, **kwargs):
    print(os.environ.get({SIGNAL_CHECK_ENV!r}), flush=True)
    raise KeyboardInterrupt

messages.attach = interrupted
sys.argv = ["ray-broker", "receive", "orders", "--wait", "60"]
sys.exit(main())
"""


def test_the_program_interrupted_ends_at_once_and_ray_looks_for_ctrl_c_often() -> None:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_PROGRAM], capture_output=True, text=True,
                            timeout=60, check=False)
    took = time.monotonic() - started
    assert (result.returncode, result.stderr) == (130, "error: interrupted\n"), result.stderr
    assert result.stdout == f"{SIGNAL_CHECK_MS}\n", "Ray would look for Ctrl-C once a second only"
    assert took < 20, f"the process took {took:.0f} s to end: it ran the work at exit"
