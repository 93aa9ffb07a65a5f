"""Ray Serve task consumers on a 3-node cluster with `replicas=3`: a node removed while tasks run
loses none of them (`serve_tasks_run`, run with --long)."""
from __future__ import annotations

from typing import Any

import pytest

from .scenario import Scenario

pytestmark = [pytest.mark.ray, pytest.mark.timeout(660)]


def cluster_scenario(long_run: bool) -> Scenario | None:
    """The Serve node-loss scenario, only with --long."""
    return Scenario("tests.cluster.serve_tasks_run", timeout=600) if long_run else None


def test_a_node_removed_while_tasks_run_loses_none(long_run: bool, request: pytest.FixtureRequest) -> None:
    if not long_run:
        pytest.skip("a 3-node cluster losing a node under Serve task consumers: run with --long")
    observed: dict[str, Any] = request.getfixturevalue("observed")
    assert observed["running_at_loss"] > 0, "tasks were running when the node went"
    assert observed["succeeded"] == observed["tasks"] and observed["wrong"] == []
    assert observed["failed_queue"] == 0
