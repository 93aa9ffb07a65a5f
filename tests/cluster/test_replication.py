"""Replicated partitions on a 4-node cluster: a start asking more replicas than nodes is refused
naming the count needed; the loss of the node running a partition's leader loses no acknowledged
message, keyed sends to that partition go on after the failover within their timeout, messages
locked on the old leader are still locked on the new one (their completes succeed), and every
message is received exactly once.

The cluster (`ray.cluster_utils.Cluster`) runs once for the module, in a process of its own
(`replication_run`), since this one may already be attached to the test session's Ray.
"""
from __future__ import annotations

from typing import Any

import pytest

from .replication_run import HELD, PARTITIONS, REPLICAS
from .scenario import observe

pytestmark = [pytest.mark.ray, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the replication scenario observed (one cluster for every test here)."""
    return observe("tests.cluster.replication_run", tmp_path_factory.mktemp("replicas"), timeout=360)


def test_more_replicas_than_nodes_is_refused_naming_the_nodes_needed(observed: dict[str, Any]) -> None:
    assert observed["refused"] is not None and "needs 5 nodes" in observed["refused"] and "has 4" in observed["refused"]


def test_replicas_of_a_partition_run_on_distinct_nodes_and_followers_keep_up(observed: dict[str, Any]) -> None:
    before = observed["states_before"]
    for k in range(PARTITIONS):
        states = [before[f"{k}.{r}"] for r in range(REPLICAS)]
        assert len({s["node"] for s in states}) == REPLICAS, "each replica on a node of its own"
        leader = next(s for s in states if s["leading"] is not None)
        in_sync = [s for s in states if s["position"] == leader["position"]]
        assert len(in_sync) >= 2, "a majority holds every acknowledged change"


def test_losing_the_leaders_node_loses_nothing_and_the_partition_keeps_serving(observed: dict[str, Any]) -> None:
    assert observed["received"] == observed["distinct"] == observed["expected"], observed["missing"]
    victim = observed["victim_partition"]
    assert observed["new_epoch"] == 2, "one leader change, one new epoch"
    assert observed["new_leader_node"] != observed["victim_node"]
    assert observed["keyed_send_after_loss_s"] < 30, "keyed sends follow the new leader within their timeout"
    survivors = [observed["states_after"][f"{victim}.{r}"] for r in range(REPLICAS)]
    alive = [s for s in survivors if isinstance(s, dict)]
    assert len(alive) == REPLICAS - 1 and all(s["epoch"] == 2 for s in alive)


def test_messages_locked_on_the_old_leader_stay_locked_on_the_new_one(observed: dict[str, Any]) -> None:
    assert observed["held"] == HELD and observed["held_partitions"] == [observed["victim_partition"]]
    assert observed["held_settled"] == {"completed": HELD, "lock_lost": 0}, "same lock tokens after the failover"
