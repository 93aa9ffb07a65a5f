"""The send and receive rounds without I/O (`routing.rounds`), their calls made over the stub
channel's engines: what a round asks of which partition, and what each kind of outcome does;
and the router's operation table."""
from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from ray_broker import Message
from ray_broker.errors import InvalidOperationError, MessageSizeExceededError, MessagingEntityNotFoundError
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.router_requests import ROUTER_REQUESTS, DefinitionRequest, ReceiveRequest
from ray_broker.routing.planner import spread_start, unkeyed_tag
from ray_broker.routing.rounds import ReceiveRounds, RoundCall, plan_send
from ray_broker.wire import CreateEntity, Send, Settlement

from .conftest import queue_definition
from .test_router import PARTITIONS, Setup, envelopes, key_for

TAG = ("sender-1", 7)


async def holding(per_partition: dict[int, int]) -> Setup:
    """"q" on every engine, with `n` messages keyed to partition `k` for each `k: n`."""
    setup = Setup()
    setup.create()
    for k, n in per_partition.items():
        await setup.router.sends.send("q", envelopes(*(Message(f"{k}-{i}", partition_key=key_for(k))
                                                       for i in range(n))), 5.0)
    return setup


def rounds(setup: Setup, max_count: int, settlements: list[Settlement] | None = None,
           pending: dict[int, list[int]] | None = None, prefetch: int = 0) -> ReceiveRounds:
    state = setup.router.receives.receiver("r1", "q", MAIN)
    return ReceiveRounds(state, setup.router.hints.of("q", MAIN, None), "q", MAIN, PEEK_LOCK, None, max_count,
                         prefetch, settlements or [], pending or {}, time.time())


def run(setup: Setup, job: ReceiveRounds, calls: list[RoundCall]) -> bool:
    outcomes = setup.router.reach.call_now([(c.partition, c.calls) for c in calls], 5.0)
    return job.apply(calls, outcomes)


def completes(records: list[tuple[int, dict[str, Any]]]) -> list[Settlement]:
    return [Settlement("complete", r["sequence_number"], r["lock_token"]) for _, r in records]


async def test_a_round_asks_each_partition_what_it_holds_and_the_first_call_asks_the_prefetch_too() -> None:
    setup = await holding({0: 6, 1: 6, 2: 6})
    job = rounds(setup, 7, prefetch=3)
    calls = job.calls(setup.router.receives.choose([0, 1, 2], job.hints, {}, job.wanted), settle_others=False)
    assert [call.calls[-1].max_count for call in calls] == [6 + 3, 1], \
        "two of three partitions known to hold 6 each fill 7: all of the first (asked the prefetch too), one more"
    assert run(setup, job, calls)
    assert len(job.out) == 7 and not job.state.cache, "the first held only its 6"
    assert sorted(job.hints.values()) == [0, 5, 6], "each reply says how many it still holds"


async def test_a_round_that_knows_nothing_shares_the_count_out_over_the_partitions() -> None:
    setup = await holding({0: 6, 1: 6, 2: 6})
    job = rounds(setup, 7)
    job.hints.clear()
    calls = job.calls(setup.router.receives.choose([0, 1, 2], job.hints, {}, job.wanted), settle_others=False)
    assert sorted(call.calls[-1].max_count for call in calls) == [2, 2, 3], "7 shared out 3/2/2"
    assert run(setup, job, calls)
    assert len(job.out) == 7 and sorted(job.hints.values()) == [3, 4, 4], "each reply says how many are left"


async def test_a_receive_asks_only_the_partition_known_to_hold_a_batch() -> None:
    setup = await holding({3: 100})
    job = rounds(setup, 100)
    chosen = setup.router.receives.choose(list(range(PARTITIONS)), job.hints, {}, job.wanted)
    assert chosen == [3], "the send told the router where its 100 messages are"
    assert run(setup, job, job.calls(chosen, settle_others=False))
    assert len(job.out) == 100 and job.hints[3] == 0


async def test_settlements_ride_with_their_partitions_receive_and_the_others_go_alone_when_asked() -> None:
    setup = await holding({0: 2, 1: 2})
    first = rounds(setup, 4)
    assert run(setup, first, first.calls([0, 1], settle_others=False))
    settlements = completes(first.out)
    groups = setup.router.receives.settlement_groups(setup.router.definitions.cached("q"),  # type: ignore[arg-type]
                                                     None, settlements)
    job = rounds(setup, 1, settlements, groups)
    calls = job.calls([0], settle_others=True)
    assert [(c.partition, c.receives, [r.OPERATION for r in c.calls]) for c in calls] == \
        [(0, True, ["settle", "receive"]), (1, False, ["settle"])]
    assert not run(setup, job, calls)
    assert job.settled == [None] * 4 and job.left() == []
    assert setup.counts() == [0, 0, 0, 0]


async def test_a_partition_that_does_not_answer_gets_its_settlements_back_and_counts_as_failing() -> None:
    setup = await holding({0: 2, 1: 2})
    first = rounds(setup, 4)
    run(setup, first, first.calls([0, 1], settle_others=False))
    settlements = completes(first.out)
    groups = setup.router.receives.settlement_groups(setup.router.definitions.cached("q"),  # type: ignore[arg-type]
                                                     None, settlements)
    job = rounds(setup, 2, settlements, groups)
    setup.channel.down.add(1)
    calls = job.calls([0, 1], settle_others=False)
    run(setup, job, calls)
    on_1 = [i for i, op in enumerate(settlements) if op.sequence_number >> 48 == 1]
    assert job.left() == on_1 and job.pending == {1: on_1}
    assert job.hints[1] == 0 and not setup.router.reach.health.available(1, setup.clock.now())
    assert all(job.settled[i] is None for i in range(4) if i not in on_1)


async def test_an_engine_error_puts_what_the_round_took_back_in_the_cache_and_is_raised() -> None:
    setup = await holding({0: 2, 1: 2})
    setup.channel.engines[1].delete_entity("q")
    job = rounds(setup, 4)
    calls = job.calls([0, 1], settle_others=False)
    with pytest.raises(MessagingEntityNotFoundError):
        run(setup, job, calls)
    assert job.out == [] and len(job.state.cache) == 2, "partition 0's messages wait in the cache"


async def test_an_engine_error_of_a_lone_settlement_is_that_settlements_result() -> None:
    setup = await holding({1: 1})
    job = rounds(setup, 0, [Settlement("complete", (1 << 48) + 99, b"0" * 16)], {1: [0]})
    calls = job.calls([], settle_others=True)
    run(setup, job, calls)
    assert isinstance(job.settled[0], Exception)


async def test_the_callers_thread_runs_no_round_of_a_receiver_busy_on_the_loop() -> None:
    setup = await holding({0: 2})
    state = setup.router.receives.receiver("r1", "q", MAIN)
    state.busy = 1
    request = ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 2, 0.0, 0, [])
    assert setup.router.receives.receive_now(request) is None
    state.busy = 0
    setup.router.hints.of("q", MAIN, None).update({k: k == 0 for k in range(PARTITIONS)})
    done = setup.router.receives.receive_now(request)
    assert done is not None and len(done.reply.messages) == 2


def test_a_send_plan_puts_keyed_parts_together_and_each_unkeyed_part_where_its_tag_says() -> None:
    definition = queue_definition("q", enable_partitioning=True)
    first = envelopes(Message("k", partition_key=key_for(2)), Message("u"))
    second = envelopes(Message("k2", partition_key=key_for(2)))
    plan = plan_send(definition, [(first, TAG), (second, None)], 1024, "standard", PARTITIONS, itertools.count(5))
    assert plan.keyed == {2: [(0, [0]), (1, [0])]}
    (part,) = plan.unkeyed
    assert (part.batch, part.indexes, part.start, part.tag) == (0, [1], spread_start(TAG, PARTITIONS),
                                                               unkeyed_tag(TAG))
    assert [call.producer for call in plan.keyed_calls(2)] == [TAG, None], "each batch keeps its own tag"
    assert plan.single() is None


def test_a_send_plan_is_one_call_when_the_send_is_one_batch_for_one_partition() -> None:
    definition = queue_definition("q", enable_partitioning=True)
    batch = envelopes(Message("a"), Message("b"))
    single = plan_send(definition, [(batch, TAG)], 1024, "standard", PARTITIONS, itertools.count()).single()
    assert single == (spread_start(TAG, PARTITIONS), Send("q", batch, unkeyed_tag(TAG)), [0, 1])


def test_a_send_plan_checks_every_batch_before_placing_any() -> None:
    definition = queue_definition("q", enable_partitioning=True)
    too_big = envelopes(Message("x" * 2048))
    with pytest.raises(MessageSizeExceededError):
        plan_send(definition, [(envelopes(Message("a")), TAG), (too_big, None)], 1024, "standard", PARTITIONS,
                  itertools.count())


async def test_the_router_runs_each_request_type_and_refuses_other_records() -> None:
    setup = await holding({0: 1})
    assert set(setup.router._handlers) == set(ROUTER_REQUESTS)
    assert (await setup.router.run(DefinitionRequest("q")))["name"] == "q"
    with pytest.raises(InvalidOperationError, match="a router runs no CreateEntity"):
        await setup.router.run(CreateEntity({}))  # type: ignore[arg-type]
