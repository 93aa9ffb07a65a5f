"""Ray's errors as the broker's callers see them: a partition call's failure is the engine's typed
error or `PartitionUnavailable`, a gateway call's is raised typed, waited out or answered by
making the gateway again; no Ray exception is handed on as it is. And where gateways go, and
where a partition goes when the node it is placed on by id is gone."""
from __future__ import annotations

import pytest
from ray.exceptions import (
    ActorDiedError,
    ActorPlacementGroupRemoved,
    ActorUnavailableError,
    ActorUnschedulableError,
    GetTimeoutError,
    NodeDiedError,
    ObjectLostError,
    OwnerDiedError,
    RayError,
    RaySystemError,
    RayTaskError,
    WorkerCrashedError,
)

from actors.seeding import away_from_home
from ray_broker.client.link import RetryAction, classify_gateway_failure
from ray_broker.config import NamespaceConfig, displaced, spread_node
from ray_broker.errors import MessagingEntityNotFoundError
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import GONE_FOR_GOOD, classify_ray_failure

NODE_LOSS_ERRORS: list[RayError] = [
    ActorUnschedulableError("The node specified via NodeAffinitySchedulingStrategy doesn't exist any more"),
    ActorPlacementGroupRemoved(),
    ActorDiedError(),
    ActorUnavailableError("restarting", None),
    NodeDiedError("node 1 died"),
    OwnerDiedError("ab" * 28, "", ""),
    ObjectLostError("ab" * 28, "", ""),
    WorkerCrashedError(),
    RaySystemError("worker startup failed"),
    GetTimeoutError("no answer"),
]


def _task_error(cause: BaseException) -> RayTaskError:
    return RayTaskError("run", "Traceback ...", cause)


@pytest.mark.parametrize("exc", NODE_LOSS_ERRORS, ids=lambda e: type(e).__name__)
def test_every_ray_error_of_a_partition_call_is_partition_unavailable(exc: RayError) -> None:
    outcome = classify_ray_failure(3, exc)
    assert isinstance(outcome, PartitionUnavailable) and not isinstance(outcome, RayError)
    assert outcome.index == 3 and outcome.reason == type(exc).__name__


def test_a_partition_that_answered_with_an_engine_error_gives_that_error() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    assert classify_ray_failure(0, _task_error(error)) is error


def test_a_ray_error_raised_inside_a_partition_is_unavailability_too() -> None:
    outcome = classify_ray_failure(1, _task_error(ActorUnschedulableError("gone")))
    assert isinstance(outcome, PartitionUnavailable) and outcome.index == 1


def test_an_actor_ray_will_not_restart_is_made_again() -> None:
    assert ActorUnschedulableError in GONE_FOR_GOOD and ActorPlacementGroupRemoved in GONE_FOR_GOOD
    for exc in (ActorDiedError(), ActorUnschedulableError("gone"), ActorPlacementGroupRemoved()):
        assert classify_gateway_failure(exc)[0] is RetryAction.RECREATE


@pytest.mark.parametrize("exc", [ActorUnavailableError("restarting", None), NodeDiedError("node 1 died"),
                                 OwnerDiedError("ab" * 28, "", ""), RaySystemError("startup failed"),
                                 _task_error(NodeDiedError("inner"))], ids=lambda e: type(e).__name__)
def test_a_gateway_call_meeting_any_other_ray_error_backs_off(exc: RayError) -> None:
    assert classify_gateway_failure(exc)[0] is RetryAction.BACKOFF


def test_a_gateway_error_is_raised_typed() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    assert classify_gateway_failure(_task_error(error)) == (RetryAction.RAISE, error)


def test_gateways_take_a_node_each_while_there_are_enough() -> None:
    nodes = ["c3", "a1", "b2"]
    assert [spread_node(i, nodes) for i in range(3)] == ["a1", "b2", "c3"]
    assert [spread_node(i, nodes + ["d4"]) for i in range(3)] == ["a1", "b2", "c3"]


def test_more_gateways_than_nodes_share_them_round_robin() -> None:
    assert [spread_node(i, ["b", "a"]) for i in range(5)] == ["a", "b", "a", "b", "a"]
    assert spread_node(0, []) is None


def test_a_partition_is_displaced_only_when_the_node_it_is_pinned_to_by_id_is_gone() -> None:
    config = NamespaceConfig("ns", "premium", 3, "/data", "normal", 1, ("node:a1", "label:disk-b", "node:c3"))
    assert [displaced(config, k, ["a1", "b2"]) for k in range(3)] == [False, False, True]
    assert not any(displaced(config, k, []) for k in (1,))
    shared = NamespaceConfig("ns", "premium", 3, "/shared", "normal", 1, None)
    assert not any(displaced(shared, k, []) for k in range(3))


def test_a_partition_knows_when_it_runs_away_from_the_node_it_is_placed_on() -> None:
    config = NamespaceConfig("ns", "premium", 2, "/data", "normal", 1, ("node:a1", "label:disk-b"))
    assert not away_from_home(config, 0, "a1") and away_from_home(config, 0, "b2")
    assert not away_from_home(config, 1, "b2"), "a partition placed by label is where its label is"
