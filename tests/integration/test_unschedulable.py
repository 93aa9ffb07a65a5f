"""A partition whose actor Ray cannot schedule (pinned to a node that is gone): its calls come back
as the partition being unavailable, never as Ray's `ActorUnschedulableError`; unkeyed sends go to
another partition and keyed ones to it end in `PartitionUnavailableError`."""
from __future__ import annotations

import asyncio
from typing import Any, Iterator

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray_broker as rb
from actors.handles import find_actor
from actors.partition_actor import PartitionActor
from ray_broker.errors import PartitionUnavailableError
from ray_broker.router_requests import SendRequest
from ray_broker.routing import partition_for_key, planner
from ray_broker.routing.channel import PartitionUnavailable
from ray_broker.routing.ray_channel import RayChannel
from ray_broker.routing.router import Router
from ray_broker.sku import get_sku
from ray_broker.wire import ListEntities

GONE_NODE = "ab" * 28
"""A node id no node of the cluster has (as after the node was removed)."""


class _Handles:
    """Partition 0 is an actor pinned to a node that does not exist; the others are the namespace's."""

    def __init__(self, ns: rb.Namespace) -> None:
        config = ns.config
        self.handles: list[Any] = [find_actor(config.partition_name(k)) for k in range(config.partition_count)]
        self.handles[0] = PartitionActor.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=GONE_NODE, soft=False),
        ).remote(config.to_dict(), 0)
        self.replaced: list[int] = []

    def handle(self, index: int) -> Any:
        return self.handles[index]

    async def replace(self, index: int) -> None:
        self.replaced.append(index)

    async def refresh(self, index: int) -> None:
        pass


@pytest.fixture
def stranded(ray_instance: None) -> Iterator[tuple[rb.Namespace, _Handles]]:
    ns = rb.start("stranded", sku="premium", partitions=2, durability="memory")
    ns.create_queue("q", enable_partitioning=True)
    handles = _Handles(ns)
    yield ns, handles
    ray.kill(handles.handles[0])
    rb.stop("stranded")


def test_calls_to_an_unschedulable_partition_are_unavailability(stranded: tuple[rb.Namespace, _Handles]) -> None:
    ns, handles = stranded
    channel = RayChannel(ns.partition_count, handles)
    (outcome,) = channel.call_now([(0, [ListEntities()])], 30.0)
    assert isinstance(outcome, PartitionUnavailable) and outcome.reason == "ActorUnschedulableError"
    assert not outcome.reached, "Ray sent nothing to an actor with nowhere to run"

    async def call() -> PartitionUnavailable:
        with pytest.raises(PartitionUnavailable) as caught:
            await channel.call(0, [ListEntities()], 30.0)
        return caught.value

    failure = asyncio.run(call())
    assert not failure.reached and handles.replaced == [0], "Ray will not restart it: the source makes it again"


def test_sends_pass_over_an_unschedulable_partition(stranded: tuple[rb.Namespace, _Handles]) -> None:
    ns, handles = stranded
    router = Router(ns.name, RayChannel(ns.partition_count, handles), get_sku(ns.config.sku))
    envelopes = [rb.Message(f"m{j}").to_envelope() for j in range(5)]
    producer = next(("p", n) for n in range(100) if planner.spread_start(("p", n), ns.partition_count) == 0)

    async def sends() -> list[list[int | None]]:
        await router.definitions.get("q")
        assert router.sends.send_now(SendRequest("q", envelopes, 10.0, producer)) is None, "handed to the loop, not raised"
        return [await router.sends.send("q", envelopes, timeout=30.0) for _ in range(6)]

    for seqs in asyncio.run(sends()):
        assert seqs and all(seq is not None and rb.partition_of(seq) == 1 for seq in seqs)
    key = next(f"k{i}" for i in range(1000) if partition_for_key(f"k{i}", ns.partition_count) == 0)
    with pytest.raises(PartitionUnavailableError) as caught:
        asyncio.run(router.sends.send("q", [rb.Message("keyed", partition_key=key).to_envelope()], timeout=2.0))
    assert caught.value.partition == 0
