"""Ctrl-C during a `ray-broker` command: one line, status 130 (typer turns the interrupt into a
status; the command line still says what happened)."""
from __future__ import annotations

from typing import Any

import pytest

from ray_broker.cli import main, messages


def test_ctrl_c_during_a_command_is_one_line_and_status_130(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(messages, "attach", interrupted)
    assert main(["receive", "orders", "--wait", "60"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"
