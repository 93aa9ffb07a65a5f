"""Cluster scenarios start in the background once the session has collected its tests, and their
tests run last: each test module names its scenario with `cluster_scenario(long_run)` and reads
what it observed from the `observed` fixture."""
from __future__ import annotations

from typing import Any

import pytest

from .scenario import BackgroundScenarios, Scenario, work_root

BACKGROUND = pytest.StashKey[BackgroundScenarios]()


def _scenario_of(item: pytest.Item, config: pytest.Config) -> Scenario | None:
    named = getattr(getattr(item, "module", None), "cluster_scenario", None)
    return None if named is None else named(bool(config.getoption("--long")))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After selection: start the selected tests' scenarios, and move their tests to the end."""
    scenarios = list(dict.fromkeys(s for item in items if (s := _scenario_of(item, config)) is not None))
    if not scenarios or config.option.collectonly:
        return
    background = BackgroundScenarios(scenarios, work_root())
    config.stash[BACKGROUND] = background
    background.start()
    items[:] = [i for i in items if _scenario_of(i, config) is None] + \
               [i for i in items if _scenario_of(i, config) is not None]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long each background cluster scenario ran (they share the machine with the other tests)."""
    background = terminalreporter.config.stash.get(BACKGROUND, None)
    if background is not None:
        terminalreporter.write_sep("-", "cluster scenarios")
        for line in background.timings():
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    background = session.config.stash.get(BACKGROUND, None)
    if background is not None:
        background.close()


@pytest.fixture(scope="module")
def observed(request: pytest.FixtureRequest) -> dict[str, Any]:
    """What the module's scenario observed (one cluster for every test of the module)."""
    scenario = _scenario_of(request.node, request.config)
    assert scenario is not None, "a module using `observed` names its scenario with `cluster_scenario`"
    return request.config.stash[BACKGROUND].observed(scenario)
