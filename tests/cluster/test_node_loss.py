"""Losing a node on a 3-node cluster: unkeyed sends (sync client, async client, the Spark sink's
sender) carry on for more than a minute with no error at all, keyed sends to the lost node's
partitions raise `PartitionUnavailableError` within their timeout and are never placed elsewhere,
runtime properties say `Limited` and name the partitions that are down, and the node's return
brings its partitions back, on it, with every message they held, none stored twice but in a
batch the client said it moved on in doubt (`tests.moved_in_doubt`). Partitions placed by node id
(a node without a store label, its stores on a disk of its own) are never started on another
node's disk: while their node is gone keyed sends to them fail, and they come back, with every
message they held, when the node returns under a new id. Gateways run one per node.

The cluster (`ray.cluster_utils.Cluster`) runs once for the module, in a process of its own
(`node_loss_run`) started in the background (`conftest.py`), since this one may already be attached
to the test session's Ray.
"""
from __future__ import annotations

from typing import Any

import pytest

from .node_loss_run import ASYNC_EVERY, BATCHES_AFTER_LOSS, PER_BATCH, SINK_EVERY
from .scenario import Scenario

pytestmark = [pytest.mark.ray, pytest.mark.timeout(960)]
LOADED_GRACE_S = 5.0


def cluster_scenario(long_run: bool) -> Scenario:
    """The node-loss scenario (one cluster for every test here)."""
    return Scenario("tests.cluster.node_loss_run", timeout=900)


def test_a_lost_node_takes_only_its_partitions_away_and_brings_them_back(observed: dict[str, Any]) -> None:
    result = observed
    on_b = [k for k, home in enumerate(result["placement"]) if home == "label:disk-b"]
    assert on_b and result["placed_on_b"] == on_b, "partitions run on the node their label names"
    assert result["stores_on_b"] == [f"partition-{k:03d}.sqlite3" for k in on_b], "in that node's own data dir"
    assert result["keyed_while_down"].startswith("PartitionUnavailableError")
    assert float(result["keyed_while_down"].split()[-1].rstrip("s")) < 10.0
    assert result["keyed_error_partition"] in on_b
    assert result["availability_while_down"] == "Limited" and result["down_partitions"] == on_b
    assert result["back_on_new_node"] == on_b, "they came back on the returning node, nowhere else"
    assert result["distinct"] == result["expected"], "every message"
    assert set(result["twice"]) <= set(result["moved_in_doubt"]), \
        f"stored twice, yet not in a batch the client moved on in doubt: {result['twice']}"


def test_unkeyed_sends_never_fail_for_a_minute_after_the_loss(observed: dict[str, Any]) -> None:
    assert observed["failures_after_loss"] == [], "no send failed, and no Ray exception reached a caller"
    assert observed["sent_after_loss"] == {
        "sync": BATCHES_AFTER_LOSS * PER_BATCH,
        "async": -(-BATCHES_AFTER_LOSS // ASYNC_EVERY) * PER_BATCH,
        "sink": -(-BATCHES_AFTER_LOSS // SINK_EVERY) * PER_BATCH,
    }
    assert observed["seconds_sending"] > 60


def test_partitions_placed_by_node_id_stay_down_until_their_disk_returns(observed: dict[str, Any]) -> None:
    on_plain = observed["on_plain"]
    assert on_plain, "the unlabelled worker held partitions"
    for when in ("plain_keyed_at_once", "plain_keyed_after_unkeyed"):
        assert observed[when].startswith("PartitionUnavailableError"), (when, observed[when])
        # the send's 10 s timeout, and what a machine loaded by the whole suite adds to the last try
        assert float(observed[when].split()[-1].rstrip("s")) <= 10.0 + LOADED_GRACE_S, (when, observed[when])
    assert observed["plain_unkeyed_failures"] == [], "unkeyed sends went to the partitions that are up"
    stores = [f"partition-{k:03d}.sqlite3" for k in on_plain]
    for moment in ("plain_stores_while_down", "plain_stores_after_return"):
        assert {d: names for d, names in observed[moment].items() if names} == {"plain": stores}, \
            f"{moment}: a store of the lost node's partitions appeared elsewhere: {observed[moment]}"
    assert sorted(int(k) for k in observed["plain_resumed_after"]) == on_plain, observed["plain_resumed_after"]
    assert set(observed["plain_nodes_after_return"].values()) == {observed["plain_returned_node"]}, \
        observed["plain_nodes_after_return"]
    assert observed["plain_missing"] == [], "every message the partitions held, and every unkeyed one"
    assert observed["plain_unexpected"] == [], "nothing keyed to them was stored while they were down"
    assert set(observed["plain_twice"]) <= set(observed["plain_moved_in_doubt"]), observed["plain_twice"]


def test_gateways_run_one_per_node(observed: dict[str, Any]) -> None:
    assert len(observed["alive_nodes"]) == 3
    assert sorted(observed["gateway_nodes"]) == observed["alive_nodes"]
