"""The chaos run on replicated partitions (`replicated_chaos_run`): keyed, session and unkeyed
messages with consumer crashes while nodes of a 4-node cluster are removed and new ones added,
one at a time (each once the namespace recovered from the one before), `replicas=3`: nothing acknowledged is lost, nothing acknowledged at the first
try is stored twice, and every guarantee the ledger checks holds. The CI run sends 4,000
messages; `--long` sends 100,000."""
from __future__ import annotations

from typing import Any

import pytest

from .replicated_chaos_run import CI_MESSAGES
from .scenario import Scenario

pytestmark = [pytest.mark.ray, pytest.mark.timeout(4 * 3600)]
LONG_MESSAGES = 100_000


def messages(long_run: bool) -> int:
    return LONG_MESSAGES if long_run else CI_MESSAGES


def cluster_scenario(long_run: bool) -> Scenario:
    """The replicated chaos run, CI-sized or (`--long`) long."""
    return Scenario("tests.cluster.replicated_chaos_run", 4 * 3600 if long_run else 600, (str(messages(long_run)),))


def test_losing_and_adding_nodes_under_load_loses_nothing(observed: dict[str, Any], long_run: bool) -> None:
    total = messages(long_run)
    summary = {k: observed[k] for k in ("duration_s", "node_losses", "recoveries_s", "stats")}
    assert not observed["failures"] and not observed["hung_threads"], observed
    assert observed["finished"], (observed["outstanding"], observed["leftovers"], summary)
    assert observed["violations"] == [], (observed["violations"], summary)
    assert observed["stats"]["acknowledged"] == total
    assert observed["node_losses"] >= 2, f"the chaos did not happen: {summary}"
