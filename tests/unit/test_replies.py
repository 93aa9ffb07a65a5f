"""Typed replies of the control plane (`ray_broker.replies`): they cross Ray as the dicts gateways
and replicas always answered with, and are read back typed."""
from __future__ import annotations

import threading
from typing import Any

from actors.replica import Replica
from ray_broker.config import NamespaceConfig
from ray_broker.engine.queries import EpochStart
from ray_broker.engine.store import Store
from ray_broker.replies import ReplicaState, RoutingTable


def test_a_routing_table_crosses_as_handles_and_epochs_with_replicated_only_when_true() -> None:
    assert RoutingTable(["h0", "h1"], [0, 2]).encode() == {"handles": ["h0", "h1"], "epochs": [0, 2]}
    replicated = RoutingTable([None, "h1"], [3, 1], replicated=True)
    assert replicated.encode() == {"handles": [None, "h1"], "epochs": [3, 1], "replicated": True}
    assert RoutingTable.decode(replicated.encode()) == replicated
    assert RoutingTable.decode({"handles": ["h0"], "epochs": [4]}) == RoutingTable(["h0"], [4], False)


def test_a_replica_state_reads_what_a_replica_answers() -> None:
    answer: dict[str, Any] = {"epoch": 3, "position": 40, "history": [[1, 1], [3, 31]], "followed": 4,
                              "leading": 5, "lag": {"1": 0, 2: None}, "node": "n1"}
    got = ReplicaState.decode(answer)
    assert got == ReplicaState(3, 40, (EpochStart(1, 1), EpochStart(3, 31)), 4, 5, {1: 0, 2: None}, "n1")
    assert got.last_epoch == 3 and ReplicaState(0, 0, (), 0, None).last_epoch == 0


def test_a_replica_state_crosses_as_the_dict_a_replica_answers_lag_and_node_only_when_known() -> None:
    fenced = ReplicaState(2, 9, (EpochStart(1, 1), EpochStart(2, 7)), 2, None)
    assert fenced.encode() == {"epoch": 2, "position": 9, "history": [[1, 1], [2, 7]], "followed": 2, "leading": None}
    assert ReplicaState.decode(fenced.encode()) == fenced
    surveyed = fenced._replace(leading=2, lag={1: 0}, node="n2")
    assert surveyed.encode() == {**fenced.encode(), "leading": 2, "lag": {1: 0}, "node": "n2"}
    assert list(surveyed.encode()) == ["epoch", "position", "history", "followed", "leading", "lag", "node"]
    assert ReplicaState.decode(surveyed.encode()) == surveyed


def test_a_new_leader_reads_the_states_its_followers_answered_as_they_cross_ray() -> None:
    config = NamespaceConfig("ns", "premium", 1, None, "memory", 1, None, replicas=3)
    leader, follower = (Replica(config, 0, r, Store(None, "memory", replicated=True), threading.RLock())
                        for r in (0, 1))
    answered = follower.state().encode()
    assert answered == {"epoch": 0, "position": 0, "history": [], "followed": 0, "leading": None}
    leader.lead(1, [1, 2], {1: ReplicaState.decode(answered)})
    assert leader.lag() == {1: 0, 2: None}, "the follower that answered is in step; the other waits for a copy"
    assert leader.state() == ReplicaState(1, 0, (EpochStart(1, 1),), 1, 1)
