"""A partition whose calls go unanswered in one process while it runs: the caller probes it, tells
the gateway, and the gateway recreates it only when it answers there (that caller's Ray lost track
of the actor); a recreated partition is handed out once it answers, one replacement per death
however many callers report it. Fake handles, no Ray running."""
from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import ActorUnavailableError

import actors.gateway_handles as gateway_handles
from actors.gateway_handles import GatewayHandles
from ray_broker.config import NamespaceConfig
from ray_broker.routing.channel import PartitionUnavailable
import ray_broker.routing.ray_channel as ray_channel
from ray_broker.routing.ray_channel import RayChannel, TableHandles, answers
from ray_broker.wire import ListEntities

from .fake_ray import FakeRef

_actor_ids = itertools.count()


class _Actor:
    """A fake partition actor handle: `pid` answers, fails (Ray's view of an actor it cannot
    reach) or stays silent; `run` stays silent."""

    def __init__(self, pid: str = "answers") -> None:
        self._actor_id = f"actor-{next(_actor_ids)}"
        self.pid_calls = 0
        self.pid_mode = pid
        self.pid = SimpleNamespace(remote=self._pid)
        self.run = SimpleNamespace(remote=lambda *args: FakeRef(silent=True))

    def _pid(self) -> FakeRef:
        self.pid_calls += 1
        if self.pid_mode == "answers":
            return FakeRef(1234)
        if self.pid_mode == "fails":
            return FakeRef(ActorUnavailableError("unreachable", None))
        return FakeRef(silent=True)


class _Gateway:
    """A gateway that serves a routing table of one partition and records the calls."""

    def __init__(self, replicated: bool = False) -> None:
        self.replicated = replicated
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        self.calls.append((operation, args))
        return {"handles": [_Actor()], "epochs": [len(self.calls) - 1], "replicated": self.replicated}


def _reports(pid: str, replicated: bool = False) -> list[tuple[str, tuple[Any, ...]]]:
    async def run() -> list[tuple[str, tuple[Any, ...]]]:
        gateway = _Gateway(replicated)
        handles = TableHandles(gateway)
        await handles.load()
        await handles.unanswered(0, _Actor(pid))
        await handles.unanswered(0, _Actor(pid))
        await asyncio.gather(*(task for task in asyncio.all_tasks() if task is not asyncio.current_task()))
        return gateway.calls[1:]

    return asyncio.run(run())


def test_a_caller_reports_a_partition_that_answers_neither_call_nor_probe_with_its_epoch_once() -> None:
    assert _reports("fails") == [("partition_unreachable", (0, 0))], "reported once while the first report is under way"


def test_a_partition_that_answers_the_probe_is_only_slow_and_is_not_reported() -> None:
    assert _reports("answers") == []


def test_replicated_partitions_are_left_to_the_control_plane_watch() -> None:
    assert _reports("fails", replicated=True) == []


def test_a_probe_that_gets_no_answer_in_time_counts_as_silence() -> None:
    assert asyncio.run(answers(_Actor("silent"), timeout=0.01)) is False
    assert asyncio.run(answers(_Actor("answers"), timeout=0.01)) is True


def test_a_call_that_times_out_is_reported_to_the_handle_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_channel.ray, "cancel", lambda ref: None)
    actor = _Actor()
    reported: list[tuple[int, Any]] = []

    class Source:
        def handle(self, index: int) -> Any:
            return actor

        async def replace(self, index: int) -> None:
            raise AssertionError("a partition that does not answer is not dead")

        async def refresh(self, index: int) -> None:
            pass

        async def unanswered(self, index: int, handle: Any) -> None:
            reported.append((index, handle))

    async def run() -> None:
        with pytest.raises(PartitionUnavailable) as failure:
            await RayChannel(1, Source()).call(0, [ListEntities()], 0.01)
        assert failure.value.reached, "a call that timed out may have run"

    asyncio.run(run())
    assert reported == [(0, actor)]


class _Partitions:
    """Stands in for `partition_actor` and `ray.kill`: the actor a name gives, made anew once killed."""

    def __init__(self, pid: str = "answers") -> None:
        self.pid = pid
        self.current = _Actor(pid)
        self.killed: list[Any] = []
        self.made = 1
        self.nodes: list[str | None] = []
        """The node each replacement was made on (None: where its placement says)."""

    def get_or_create(self, config: NamespaceConfig, index: int, node: str | None = None) -> _Actor:
        if self.current in self.killed:
            self.current = _Actor(self.pid)
            self.made += 1
            self.nodes.append(node)
        return self.current

    def kill(self, handle: Any, no_restart: bool = False) -> None:
        assert no_restart, "a partition is recreated as a new actor, not restarted under the same one"
        self.killed.append(handle)


@pytest.fixture
def partitions(monkeypatch: pytest.MonkeyPatch) -> _Partitions:
    made = _Partitions()
    monkeypatch.setattr(gateway_handles, "partition_actor", made.get_or_create)
    monkeypatch.setattr(gateway_handles.ray, "kill", made.kill)
    return made


def _config() -> NamespaceConfig:
    return NamespaceConfig(name="lost", sku="standard", partition_count=1, data_dir=None, durability="normal",
                           gateways=1, placement=None)


def test_a_partition_that_answers_the_gateway_but_not_a_caller_is_recreated(partitions: _Partitions) -> None:
    async def run() -> GatewayHandles:
        handles = GatewayHandles(_config())
        first = handles.handle(0)
        await handles.unreachable(0, epoch=0)
        assert partitions.killed == [first]
        return handles

    handles = asyncio.run(run())
    assert handles.epochs == [1] and handles.handle(0) is partitions.current and partitions.made == 2


def test_a_partition_that_answers_nobody_is_left_to_ray(partitions: _Partitions) -> None:
    partitions.current.pid_mode = "fails"

    async def run() -> list[int]:
        handles = GatewayHandles(_config())
        handles.handle(0)
        await handles.unreachable(0, epoch=0)
        return handles.epochs

    assert asyncio.run(run()) == [0] and partitions.killed == []


def test_a_report_about_an_older_epoch_changes_nothing(partitions: _Partitions) -> None:
    async def run() -> list[int]:
        handles = GatewayHandles(_config())
        handles.handle(0)
        await handles.unreachable(0, epoch=0)
        await handles.unreachable(0, epoch=0)
        return handles.epochs

    assert asyncio.run(run()) == [1] and len(partitions.killed) == 1


def test_reports_of_one_death_share_one_replacement_that_is_handed_out_once_it_answers(
        partitions: _Partitions) -> None:
    async def run() -> GatewayHandles:
        handles = GatewayHandles(_config())
        dead = handles.handle(0)
        partitions.killed.append(dead)
        await asyncio.gather(*(handles.replace(0) for _ in range(5)))
        return handles

    handles = asyncio.run(run())
    assert handles.epochs == [1], "five reports of one death make one replacement"
    assert partitions.current.pid_calls == 1, "the replacement was asked to answer before it was handed out"


def test_a_report_that_arrives_during_a_replacement_waits_for_it(partitions: _Partitions) -> None:
    async def run() -> tuple[list[int], bool]:
        handles = GatewayHandles(_config())
        partitions.killed.append(handles.handle(0))
        replacing = asyncio.ensure_future(handles.replace(0))
        await asyncio.sleep(0)
        await handles.unreachable(0, epoch=0)
        return handles.epochs, replacing.done()

    epochs, replaced = asyncio.run(run())
    assert epochs == [1] and replaced, "the report came back with the replacement done"
    assert len(partitions.killed) == 1, "a partition being replaced is not killed again"


def test_looking_into_a_silent_partition_does_not_hold_up_the_failed_call() -> None:
    async def run() -> None:
        handles = TableHandles(_Gateway())
        await handles.load()
        await asyncio.wait_for(handles.unanswered(0, _Actor("silent")), timeout=0.5)

    asyncio.run(run())


def test_a_partition_whose_node_is_gone_is_made_again_only_where_its_store_is_seen(
        partitions: _Partitions, monkeypatch: pytest.MonkeyPatch) -> None:
    config = NamespaceConfig(name="lost", sku="standard", partition_count=1, data_dir="/data", durability="normal",
                             gateways=1, placement=("node:gone",))
    seen_on: list[str | None] = [None]
    asked: list[str] = []

    async def store_node_of(config: NamespaceConfig, index: int, last_node: str) -> str | None:
        asked.append(last_node)
        return seen_on[0]

    monkeypatch.setattr(gateway_handles, "alive_nodes", lambda: ["b", "c"])
    monkeypatch.setattr(gateway_handles, "store_node_of", store_node_of)
    monkeypatch.setattr(gateway_handles, "STORE_PROBE_EVERY_S", 0.0)

    async def run() -> GatewayHandles:
        handles = GatewayHandles(config)
        dead = handles.handle(0)
        partitions.killed.append(dead)
        await handles.replace(0)
        assert handles.epochs == [0] and handles.handle(0) is dead, "no node sees its store: it stays down"
        seen_on[0] = "c"
        await handles.replace(0)
        return handles

    handles = asyncio.run(run())
    assert asked == ["gone", "gone"], "the nodes were asked for the store its own node last held"
    assert handles.epochs == [1] and partitions.nodes == ["c"], "made again on the node that sees its store"
