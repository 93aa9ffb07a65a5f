"""Ray's errors as the broker's callers see them: a partition call's failure is the engine's typed
error or `PartitionUnavailable`, a gateway call's is raised typed, waited out or answered by
making the gateway again; no Ray exception is handed on as it is. And where gateways go, and
where a partition goes when the node it is placed on by id is gone."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

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
from ray.core.generated.common_pb2 import ActorDiedErrorContext

from ray_broker.config import NamespaceConfig, displaced, spread_node, store_node
from ray_broker.engine.store_lock import StoreLock, last_holder
from ray_broker.errors import MessagingEntityNotFoundError
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import (
    GONE_FOR_GOOD,
    REFRESH_EVERY_S,
    RayChannel,
    TableHandles,
    classify_ray_failure,
)
from ray_broker.routing.gateway_retry import Failure
from ray_broker.routing.ray_gateway import GatewayCaller, failure_of
from ray_broker.wire import ListEntities

from .fake_ray import FakeRef

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


REFUSED_UNSENT: list[RayError] = [
    ActorUnschedulableError("The node specified via NodeAffinitySchedulingStrategy doesn't exist any more"),
    ActorPlacementGroupRemoved(),
    ActorUnavailableError("The actor is temporarily unavailable: IOError: The actor is restarting.", b"a" * 16),
    ActorDiedError(ActorDiedErrorContext(actor_id=b"a" * 16, never_started=True)),
]
"""Ray's errors for a call it refused before sending it (what it says while a partition's actor
waits for a node with its store label is the restarting one)."""
MAYBE_RUN: list[BaseException] = [
    ActorUnavailableError("The actor is temporarily unavailable: IOError: The actor was restarted", b"a" * 16),
    ActorDiedError(),
    NodeDiedError("node 1 died"),
    GetTimeoutError("no answer"),
    asyncio.TimeoutError(),
    _task_error(ActorUnschedulableError("raised by a call the partition ran")),
]


@pytest.mark.parametrize("exc", REFUSED_UNSENT, ids=lambda e: type(e).__name__)
def test_a_call_refused_unsent_did_not_reach_its_partition(exc: RayError) -> None:
    outcome = classify_ray_failure(2, exc)
    assert isinstance(outcome, PartitionUnavailable) and not outcome.reached


@pytest.mark.parametrize("exc", MAYBE_RUN, ids=lambda e: type(e).__name__)
def test_any_other_failure_may_have_reached_its_partition(exc: BaseException) -> None:
    outcome = classify_ray_failure(2, exc)
    assert isinstance(outcome, PartitionUnavailable) and outcome.reached


class _FailingSource:
    """One partition whose actor answers its first `answers` calls, then fails every call with
    `error`; its replacement never comes. With `new_handles`, every handle asked for is a new
    object for the same actor, as after each routing table fetch."""

    def __init__(self, error: BaseException, answers: int = 0, new_handles: bool = False) -> None:
        self.calls = 0
        self.answers = answers
        self.error = error
        self.new_handles = new_handles
        self.actor = self._new_handle()
        self.replaced = 0

    def _new_handle(self) -> SimpleNamespace:
        return SimpleNamespace(run=SimpleNamespace(remote=self._run), _actor_id="actor-0")

    def _run(self, *args: Any) -> FakeRef:
        self.calls += 1
        return FakeRef([] if self.calls <= self.answers else self.error)

    def handle(self, index: int) -> Any:
        return self._new_handle() if self.new_handles else self.actor

    async def replace(self, index: int) -> None:
        self.replaced += 1

    async def refresh(self, index: int) -> None:
        pass


def failures_after(source: _FailingSource, calls: int = 2) -> list[PartitionUnavailable]:
    """The failures of `calls` calls through a channel over `source`, after the calls it answers."""
    channel = RayChannel(1, source)

    async def run() -> list[PartitionUnavailable]:
        for _ in range(source.answers):
            await channel.call(0, [ListEntities()], 5.0)
        caught = []
        for _ in range(calls):
            with pytest.raises(PartitionUnavailable) as failure:
                await channel.call(0, [ListEntities()], 5.0)
            caught.append(failure.value)
        return caught

    return asyncio.run(run())


@pytest.mark.parametrize("new_handles", [False, True], ids=["same-handle", "table-reloaded"])
def test_a_call_on_a_handle_already_found_dead_did_not_reach_its_partition(new_handles: bool) -> None:
    source = _FailingSource(ActorDiedError(), new_handles=new_handles)
    first, second = failures_after(source)
    assert first.reached, "the actor may have died running the first call"
    assert not second.reached, "Ray sends nothing to an actor it knows is dead"
    assert source.replaced == 2


@pytest.mark.parametrize("error", [ActorDiedError(), ActorUnschedulableError("The node doesn't exist")],
                         ids=lambda e: type(e).__name__)
def test_calls_under_way_when_another_finds_the_actor_dead_may_have_reached_it(error: RayError) -> None:
    """Two calls in flight on an actor whose node goes: whichever fails second may have run as
    much as the first (it was sent before the death was known), so it must not move elsewhere."""
    source = _FailingSource(error, answers=1)
    held: list[FakeRef] = []
    channel = RayChannel(1, source)

    def held_call(*args: Any) -> FakeRef:
        held.append(FakeRef(silent=True))
        return held[-1]

    async def run() -> list[BaseException]:
        await channel.call(0, [ListEntities()], 5.0)
        source.actor.run = SimpleNamespace(remote=held_call)
        calls = [asyncio.ensure_future(channel.call(0, [ListEntities()], 5.0)) for _ in range(2)]
        await asyncio.sleep(0)
        for ref in held:
            ref.answer(error)
        failures = list(await asyncio.gather(*calls, return_exceptions=True))
        source.actor.run = SimpleNamespace(remote=lambda *args: FakeRef(error))
        with pytest.raises(PartitionUnavailable) as later:
            await channel.call(0, [ListEntities()], 5.0)
        return failures + [later.value]

    *under_way, later = asyncio.run(run())
    assert all(isinstance(f, PartitionUnavailable) and f.reached for f in under_way), under_way
    assert isinstance(later, PartitionUnavailable) and not later.reached, "Ray sends nothing to an actor known dead"


@pytest.mark.parametrize("new_handles", [False, True], ids=["same-handle", "table-reloaded"])
@pytest.mark.parametrize("answered_before", [False, True])
def test_an_unschedulable_actor_that_ran_before_may_have_run_the_call_under_way(answered_before: bool,
                                                                              new_handles: bool) -> None:
    unschedulable = ActorUnschedulableError("The node specified via NodeAffinitySchedulingStrategy doesn't exist")
    source = _FailingSource(unschedulable, answers=1 if answered_before else 0, new_handles=new_handles)
    first, second = failures_after(source)
    assert first.reached is answered_before, \
        "an actor that ran may have run the call before its node went; one that never ran did not"
    assert not second.reached, "once found dead, Ray sends nothing to it"


def test_a_partition_that_answered_with_an_engine_error_gives_that_error() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    assert classify_ray_failure(0, _task_error(error)) is error


def test_a_ray_error_raised_inside_a_partition_is_unavailability_too() -> None:
    outcome = classify_ray_failure(1, _task_error(ActorUnschedulableError("gone")))
    assert isinstance(outcome, PartitionUnavailable) and outcome.index == 1


def test_an_actor_ray_will_not_restart_is_gone_for_good() -> None:
    assert ActorUnschedulableError in GONE_FOR_GOOD and ActorPlacementGroupRemoved in GONE_FOR_GOOD
    for exc in (ActorDiedError(), ActorUnschedulableError("gone"), ActorPlacementGroupRemoved()):
        assert failure_of(exc) == (Failure.GONE, exc)


@pytest.mark.parametrize("exc", [ActorUnavailableError("restarting", None), NodeDiedError("node 1 died"),
                                 OwnerDiedError("ab" * 28, "", ""), RaySystemError("startup failed"),
                                 _task_error(NodeDiedError("inner"))], ids=lambda e: type(e).__name__)
def test_a_gateway_call_meeting_any_other_ray_error_meets_a_passing_failure(exc: RayError) -> None:
    assert failure_of(exc)[0] is Failure.PASSING


def test_a_gateway_error_is_unwrapped_typed_and_a_time_out_is_no_answer() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    assert failure_of(_task_error(error)) == (Failure.TYPED, error)
    assert failure_of(GetTimeoutError("late"))[0] is Failure.UNANSWERED
    assert failure_of(asyncio.TimeoutError())[0] is Failure.UNANSWERED


class _GatewayActor:
    """A fake gateway actor handle whose `call` answers with what the test lines up, in turn."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[Any, ...]] = []
        self.call = SimpleNamespace(remote=self._call)

    def _call(self, *args: Any) -> FakeRef:
        self.calls.append(args)
        return FakeRef(self.outcomes.pop(0))


def _caller(gateways: int, actors: dict[int, list[_GatewayActor]], moves: bool) -> tuple[GatewayCaller, list[int]]:
    """A caller of gateway 0 whose `find` hands out each gateway's fake actors in turn, and the
    gateways it was asked for."""
    found: list[int] = []

    def find(index: int) -> _GatewayActor:
        found.append(index)
        return actors[index].pop(0)

    config = NamespaceConfig("ns", "premium", 1, None, "normal", gateways, None)
    return GatewayCaller(config, 0, find, moves=moves), found


def test_the_gateway_caller_finds_a_gateway_gone_for_good_again_and_waits_out_a_restart() -> None:
    dead = _GatewayActor(ActorDiedError())
    alive = _GatewayActor(ActorUnavailableError("restarting", None), {"handles": [], "epochs": []})
    caller, found = _caller(1, {0: [dead, alive]}, moves=False)
    assert asyncio.run(caller.call_async("routing_table", timeout=5.0)) == {"handles": [], "epochs": []}
    assert found == [0, 0], "found again once, after it was gone for good; not after it restarted"
    assert len(alive.calls) == 2


def test_the_gateway_caller_raises_the_gateway_s_own_error_typed_at_once() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    caller, found = _caller(1, {0: [_GatewayActor(_task_error(error))]}, moves=False)
    with pytest.raises(MessagingEntityNotFoundError) as raised:
        asyncio.run(caller.call_async("get_entity", "q", timeout=5.0))
    assert raised.value is error and found == [0]


def test_a_client_moves_on_to_the_next_gateway_and_a_forwarder_sticks_to_its_own() -> None:
    restarting = ActorUnavailableError("restarting", None)
    client, found = _caller(2, {0: [_GatewayActor(restarting)], 1: [_GatewayActor("answer")]}, moves=True)
    assert asyncio.run(client.call_async("routing_table", timeout=5.0)) == "answer"
    assert found == [0, 1] and client.index == 1
    forwarder, found = _caller(2, {0: [_GatewayActor(restarting, "answer")]}, moves=False)
    assert asyncio.run(forwarder.call_async("routing_table", timeout=5.0)) == "answer"
    assert found == [0] and forwarder.index == 0


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


def test_a_displaced_partition_goes_only_where_its_own_store_is_seen() -> None:
    views = {"b2": None, "c3": "a1", "d4": "c3", "e5": "a1"}
    assert store_node(0, views, "a1") == "c3" and store_node(1, views, "a1") == "e5", \
        "nodes that see the store the lost node held, spread by partition"
    assert store_node(0, {"b2": None, "d4": "d4"}, "a1") is None, \
        "a node with no store, or with a store another node held, never takes the partition"
    assert store_node(0, {}, "a1") is None


def test_a_store_lock_records_the_node_that_held_it_last(tmp_path: Any) -> None:
    path = str(tmp_path / "partition-000.sqlite3")
    assert last_holder(path) is None
    lock = StoreLock(path, owner="actor ns.partition.0", node="a1")
    lock.acquire()
    assert last_holder(path) is not None and last_holder(path).node == "a1"  # type: ignore[union-attr]
    lock.release()
    assert last_holder(path).node == "a1", "the record outlives the lock"  # type: ignore[union-attr]


class _Gateway:
    """A gateway that serves a routing table and counts the calls."""

    def __init__(self, replicated: bool) -> None:
        self.replicated = replicated
        self.calls: list[str] = []

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        self.calls.append(operation)
        return {"handles": [object()], "epochs": [len(self.calls)], "replicated": self.replicated}


def test_a_partition_that_does_not_answer_refetches_the_table_only_when_leaders_can_change() -> None:
    async def refreshes(replicated: bool) -> list[str]:
        now = [0.0]
        gateway = _Gateway(replicated)
        handles = TableHandles(gateway, clock=lambda: now[0])
        await handles.load()
        for step in (0.0, 0.1, REFRESH_EVERY_S + 0.2):
            now[0] = step
            await handles.refresh(0)
        return gateway.calls

    assert asyncio.run(refreshes(True)) == ["routing_table", "routing_table", "routing_table"], \
        "at once, then not again within the interval, then again"
    assert asyncio.run(refreshes(False)) == ["routing_table"], "one replica: where a partition runs never moves"
