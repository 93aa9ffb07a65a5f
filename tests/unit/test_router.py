"""The routing policy over real engines and a stub channel, with no Ray: keyed retry until the
deadline, unkeyed failover, waits that wake, carried settlements, gathering, release on close."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.errors import InvalidOperationError, PartitionUnavailableError
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.routing import make_sequence_number, partition_for_key, partition_of
from ray_broker.routing.planner import STICKY_BATCHES, next_window, spread_start
from ray_broker.routing.router import AWAY_HOLD_S, UNKEYED_SETTLE_S, Router
from ray_broker.sku import get_sku

from .conftest import queue_definition
from .stub_channel import StubChannel

PARTITIONS = 4


class Setup:
    """A router over a stub channel whose back-off sleeps move the manual clock (which starts at
    the wall-clock time, since receivers compare lock expiries with it)."""

    def __init__(self, partitions: int = PARTITIONS) -> None:
        self.clock = ManualClock(time.time())
        self.channel = StubChannel(partitions, self.clock)
        self.slept: list[float] = []

        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)
            self.clock.advance(seconds)
            await asyncio.sleep(0)

        self.router = Router("stub", self.channel, get_sku("standard"), clock=self.clock.now, sleep=sleep)

    def create(self, name: str = "q", **options: Any) -> str:
        definition = queue_definition(name, enable_partitioning=True, **options)
        for engine in self.channel.engines:
            engine.create_entity(definition)
        return name

    def counts(self, name: str = "q") -> list[int]:
        return [engine.runtime(name)["active"] for engine in self.channel.engines]


def envelopes(*messages: Message) -> list[dict[str, Any]]:
    return [m.to_envelope() for m in messages]


def key_for(partition: int) -> str:
    return next(f"key-{i}" for i in range(10_000) if partition_for_key(f"key-{i}", PARTITIONS) == partition)


async def test_keyed_sends_wait_for_their_partition_until_the_deadline() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.add(2)
    with pytest.raises(PartitionUnavailableError) as failed:
        await setup.router.send("q", envelopes(Message("a", partition_key=key_for(2))), timeout=3.0)
    assert failed.value.partition == 2
    assert sum(setup.slept) <= 3.0 and len(setup.slept) >= 4, "retried with back-off until the deadline"
    assert setup.counts() == [0, 0, 0, 0], "never placed on another partition"


async def test_a_keyed_send_succeeds_when_its_partition_comes_back_in_time() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.add(1)

    async def back_later() -> None:
        while len(setup.slept) < 3:
            await asyncio.sleep(0)
        setup.channel.down.discard(1)

    _, seqs = await asyncio.gather(back_later(),
                                   setup.router.send("q", envelopes(Message("a", partition_key=key_for(1))), 60.0))
    assert partition_of(seqs[0]) == 1 and setup.counts() == [0, 1, 0, 0]


async def test_an_unkeyed_batch_moves_to_another_partition_as_one_batch() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.update({0, 1, 2})
    seqs = await setup.router.send("q", envelopes(*(Message(f"m{i}") for i in range(10))), timeout=5.0)
    assert {partition_of(s) for s in seqs} == {3}
    assert setup.counts() == [0, 0, 0, 10]
    assert setup.channel.calls[(3, "send")] == 1


async def test_a_waiting_receive_wakes_with_the_message() -> None:
    setup = Setup()
    setup.create()
    receiving = asyncio.ensure_future(
        setup.router.receive("r1", "q", MAIN, PEEK_LOCK, None, 1, 5.0, 0, []))
    await asyncio.sleep(0.05)
    assert not receiving.done()
    await setup.router.send("q", envelopes(Message("hello", partition_key=key_for(3))), timeout=5.0)
    reply = await asyncio.wait_for(receiving, 2.0)
    assert [r["partition"] for r in reply["messages"]] == [3]
    assert setup.channel.calls[(3, "receive_waiting")] >= 1, "the wake-up carried the message"


async def test_settlements_ride_on_the_next_receive() -> None:
    setup = Setup()
    setup.create()
    await setup.router.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(0)) for i in range(4))), 5.0)
    first = await setup.router.receive("r1", "q", MAIN, PEEK_LOCK, None, 2, 1.0, 0, [])
    ops = [["complete", r["sequence_number"], r["lock_token"], None, None] for r in first["messages"]]
    calls_before = setup.channel.calls[(0, "settle")]
    second = await setup.router.receive("r1", "q", MAIN, PEEK_LOCK, None, 2, 1.0, 0, ops)
    assert second["settled"] == [None, None] and len(second["messages"]) == 2
    assert setup.channel.calls[(0, "settle")] == calls_before + 1
    assert setup.counts()[0] == 2


async def test_a_receive_gathers_from_every_partition_in_one_call() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    reply = await setup.router.receive("fresh", "q", MAIN, PEEK_LOCK, None, 10, 1.0, 0, [])
    assert len(reply["messages"]) == 10
    assert {r["partition"] for r in reply["messages"]} == set(range(PARTITIONS))


async def test_a_receiver_with_a_share_of_the_partitions_takes_messages_only_from_them() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    mine = await setup.router.receive("mine", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, [], [1, 3])
    assert sorted(partition_of(r["sequence_number"]) for r in mine["messages"]) == [1, 1, 1, 3, 3, 3]
    assert setup.channel.calls[(0, "receive")] == setup.channel.calls[(2, "receive")] == 0
    rest = await setup.router.receive("rest", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, [], [0, 2])
    assert sorted(partition_of(r["sequence_number"]) for r in rest["messages"]) == [0, 0, 0, 2, 2, 2]
    lone = setup.router.receive_hosts(queue_definition("lone"), None, [0])
    assert lone == setup.router.receive_hosts(queue_definition("lone"), None)
    assert setup.router.receive_hosts(queue_definition("lone"), None, [1]) == []


async def test_a_peek_with_an_end_asks_only_the_partitions_holding_its_range() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    end = setup.channel.engines[1].runtime("q")["next_sequence"]
    await setup.router.send("q", envelopes(Message("late", partition_key=key_for(1))), 5.0)
    peeked = await setup.router.peek("q", MAIN, None, make_sequence_number(1, 0), 10, end)
    assert [partition_of(r["sequence_number"]) for r in peeked] == [1, 1, 1]
    assert [setup.channel.calls[(k, "peek")] for k in range(PARTITIONS)] == [0, 1, 0, 0]
    everything = await setup.router.peek("q", MAIN, None, make_sequence_number(1, 0), 100)
    assert len(everything) == 10
    assert [setup.channel.calls[(k, "peek")] for k in range(PARTITIONS)] == [0, 2, 1, 1]


async def test_closing_releases_prefetched_messages_without_counting_a_delivery() -> None:
    setup = Setup()
    setup.create()
    await setup.router.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(2)) for i in range(5))), 5.0)
    reply = await setup.router.receive("r1", "q", MAIN, PEEK_LOCK, None, 1, 1.0, 4, [])
    assert len(reply["messages"]) == 1
    assert await setup.router.close_receiver("r1") == 4
    assert setup.router._hints[("q", MAIN, None)][2] is True, "released messages make their partition ready"
    again = await setup.router.receive("r2", "q", MAIN, PEEK_LOCK, None, 10, 1.0, 0, [])
    assert sorted(r["delivery_count"] for r in again["messages"]) == [1, 1, 1, 1]


async def test_keyed_and_unkeyed_parts_of_one_tagged_send_on_one_partition_are_both_stored() -> None:
    setup = Setup(partitions=1)
    setup.create()
    batch = envelopes(Message("keyed", partition_key="k"), Message("free"), Message("keyed too", partition_key="k"))
    seqs = await setup.router.send("q", batch, 5.0, ("producer", 1))
    assert len(set(seqs)) == 3 and setup.counts() == [3]
    assert await setup.router.send("q", batch, 5.0, ("producer", 1)) == seqs, "a retry is answered, not stored"
    assert setup.counts() == [3]


async def test_batches_sent_together_take_one_call_per_partition_and_keep_their_own_tags() -> None:
    setup = Setup()
    setup.create()
    keys = [key_for(1), key_for(3)]
    batches = [(envelopes(*(Message(f"b{b}-{i}", partition_key=keys[i % 2]) for i in range(6))), ("p", b))
               for b in range(3)]
    batches.append((envelopes(*(Message(f"free-{i}") for i in range(4))), ("p", 3)))
    seqs = await setup.router.send_batches("q", batches, 5.0)
    assert [len(s) for s in seqs] == [6, 6, 6, 4] and len({s for batch in seqs for s in batch}) == 22
    assert all(partition_of(s) == (1, 3)[i % 2] for batch in seqs[:3] for i, s in enumerate(batch))
    assert len({partition_of(s) for s in seqs[3]}) == 1, "the unkeyed batch went to one partition"
    free = partition_of(seqs[3][0])
    assert [setup.channel.round_trips[k] - (k == free) for k in (1, 3)] == [1, 1], "three batches' shares in one call"
    again = await setup.router.send_batches("q", batches[1:3] + [(batches[0][0], ("p", 9))], 5.0)
    assert again[:2] == seqs[1:3], "a repeated batch is answered with its first sequence numbers"
    assert not set(again[2]) & set(seqs[0]), "a new tag stores the batch again"
    assert sum(setup.counts()) == 28
    assert (await setup.router.send("q", batches[0][0], 5.0, ("p", 0))) == seqs[0], "one tag, one batch"


async def test_batches_sent_together_are_all_checked_before_any_is_sent() -> None:
    setup = Setup()
    setup.create(requires_session=True)
    good = envelopes(Message("a", session_id="s1"))
    with pytest.raises(InvalidOperationError, match="session"):
        await setup.router.send_batches("q", [(good, ("p", 0)), (envelopes(Message("b")), ("p", 1))], 5.0)
    assert setup.counts() == [0, 0, 0, 0]


async def test_batches_sent_together_wait_for_a_keyed_partition_that_is_down() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.add(2)
    batch = envelopes(Message("a", partition_key=key_for(2)))
    with pytest.raises(PartitionUnavailableError) as failed:
        await setup.router.send_batches("q", [(batch, ("p", 0)), (batch, ("p", 1))], timeout=3.0)
    assert failed.value.partition == 2 and setup.counts() == [0, 0, 0, 0]


def test_a_senders_successive_unkeyed_batches_keep_to_a_partition_a_window_at_a_time_and_go_round() -> None:
    starts = [spread_start(("sender-a", n), 16) for n in range(16 * STICKY_BATCHES)]
    windows = [starts[w * STICKY_BATCHES:(w + 1) * STICKY_BATCHES] for w in range(16)]
    assert all(len(set(window)) == 1 for window in windows), "a window of batch numbers keeps to one partition"
    assert sorted(w[0] for w in windows) == list(range(16)) and windows[1][0] == (windows[0][0] + 1) % 16
    assert spread_start(("sender-a", 5), 16) == starts[5], "a retry of a batch goes where the batch went"
    assert [next_window(n) for n in (0, 1, STICKY_BATCHES, STICKY_BATCHES + 1)] == \
        [0, STICKY_BATCHES, STICKY_BATCHES, 2 * STICKY_BATCHES]


async def test_an_unkeyed_batch_whose_reply_was_lost_is_not_stored_again_elsewhere() -> None:
    setup = Setup()
    setup.create()
    start = spread_start(("p", 0), PARTITIONS)
    setup.channel.lost_replies.add(start)
    seqs = await setup.router.send("q", envelopes(*(Message(f"m{i}") for i in range(5))), 30.0, ("p", 0))
    assert {partition_of(s) for s in seqs} == {start}
    assert sum(setup.counts()) == 5, "the retry on the same partition was recognized"


async def test_an_unkeyed_batch_moves_on_when_its_partition_stays_away() -> None:
    setup = Setup()
    setup.create()
    start = spread_start(("p", 0), PARTITIONS)
    setup.channel.down.add(start)
    seqs = await setup.router.send("q", envelopes(*(Message(f"m{i}") for i in range(5))), 60.0, ("p", 0))
    assert len({partition_of(s) for s in seqs}) == 1 and partition_of(seqs[0]) != start
    assert UNKEYED_SETTLE_S <= sum(setup.slept) < UNKEYED_SETTLE_S + 2.0, "it kept to its partition for a while"
    tried = setup.channel.calls[(start, "send")]
    for number in range(1, 2 * PARTITIONS):
        await setup.router.send("q", envelopes(Message("later")), 60.0, ("p", number))
    assert setup.channel.calls[(start, "send")] == tried, "a partition that stayed away is passed over for a while"
    setup.clock.advance(AWAY_HOLD_S)
    setup.channel.down.discard(start)
    for number in range(2 * PARTITIONS, 3 * PARTITIONS):
        await setup.router.send("q", envelopes(Message("back")), 60.0, ("p", number))
    assert setup.channel.calls[(start, "send")] > tried, "and used again once the hold is over"
