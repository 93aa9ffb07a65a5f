"""Session hooks for the fuzz tests: time limits sized by --long, and a count of the cases run."""
from __future__ import annotations

from pathlib import Path

import pytest

from .support import CASES_RUN

CI_TIMEOUT_S = 600
LONG_TIMEOUT_S = 3600
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give the fuzz tests a time limit that fits their size (the long run takes minutes per test)."""
    limit = LONG_TIMEOUT_S if config.getoption("--long") else CI_TIMEOUT_S
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.timeout(limit))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report how many fuzz cases ran (generated, replayed and shrunk examples), per test."""
    if CASES_RUN:
        per_test = ", ".join(f"{name} {count}" for name, count in sorted(CASES_RUN.items()))
        terminalreporter.write_line(f"fuzz cases run: {sum(CASES_RUN.values())} ({per_test})")
