"""The routing policy over real engines and a stub channel, with no Ray: keyed retry until the
deadline, unkeyed failover, waits that wake, carried settlements, gathering, release on close."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ray_broker import Message
from ray_broker.client.flow import run_async
from ray_broker.client.sender_flows import SenderBase
from ray_broker.clock import ManualClock
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessagingEntityNotFoundError,
    PartitionUnavailableError,
)
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.router_requests import RouterRequest, SendBatchesRequest
from ray_broker.routing import make_sequence_number, partition_for_key, partition_of
from ray_broker.routing.planner import batch_number, next_run, spread_start
from ray_broker.routing.health import AWAY_BACKOFF
from ray_broker.routing.reaching import ATTEMPT_TIMEOUT_S
from ray_broker.routing.router import Router
from ray_broker.routing.send_routing import MOVED_IN_DOUBT, UNKEYED_SETTLE_S, MovedInDoubt
from ray_broker.sku import get_sku
from ray_broker.wire import Settlement

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
        await setup.router.sends.send("q", envelopes(Message("a", partition_key=key_for(2))), timeout=3.0)
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
                                   setup.router.sends.send("q", envelopes(Message("a", partition_key=key_for(1))), 60.0))
    assert partition_of(seqs[0]) == 1 and setup.counts() == [0, 1, 0, 0]


async def test_an_unkeyed_batch_moves_to_another_partition_as_one_batch() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.update({0, 1, 2})
    seqs = await setup.router.sends.send("q", envelopes(*(Message(f"m{i}") for i in range(10))), timeout=5.0)
    assert {partition_of(s) for s in seqs} == {3}
    assert setup.counts() == [0, 0, 0, 10]
    assert setup.channel.calls[(3, "send")] == 1


async def test_a_waiting_receive_wakes_with_the_message() -> None:
    setup = Setup()
    setup.create()
    receiving = asyncio.ensure_future(
        setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 1, 5.0, 0, []))
    await asyncio.sleep(0.05)
    assert not receiving.done()
    await setup.router.sends.send("q", envelopes(Message("hello", partition_key=key_for(3))), timeout=5.0)
    reply = await asyncio.wait_for(receiving, 2.0)
    assert [r["partition"] for r in reply.messages] == [3]
    assert setup.channel.calls[(3, "receive_waiting")] >= 1, "the wake-up carried the message"


async def test_settlements_ride_on_the_next_receive() -> None:
    setup = Setup()
    setup.create()
    await setup.router.sends.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(0)) for i in range(4))), 5.0)
    first = await setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 2, 1.0, 0, [])
    ops = [Settlement("complete", r["sequence_number"], r["lock_token"]) for r in first.messages]
    calls_before = setup.channel.calls[(0, "settle")]
    second = await setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 2, 1.0, 0, ops)
    assert second.settled == [None, None] and len(second.messages) == 2
    assert setup.channel.calls[(0, "settle")] == calls_before + 1
    assert setup.counts()[0] == 2


async def test_a_receive_gathers_from_every_partition_in_one_call() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.sends.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    reply = await setup.router.receives.receive("fresh", "q", MAIN, PEEK_LOCK, None, 10, 1.0, 0, [])
    assert len(reply.messages) == 10
    assert {r["partition"] for r in reply.messages} == set(range(PARTITIONS))


async def test_a_receiver_with_a_share_of_the_partitions_takes_messages_only_from_them() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.sends.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    mine = await setup.router.receives.receive("mine", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, [], [1, 3])
    assert sorted(partition_of(r["sequence_number"]) for r in mine.messages) == [1, 1, 1, 3, 3, 3]
    assert setup.channel.calls[(0, "receive")] == setup.channel.calls[(2, "receive")] == 0
    rest = await setup.router.receives.receive("rest", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, [], [0, 2])
    assert sorted(partition_of(r["sequence_number"]) for r in rest.messages) == [0, 0, 0, 2, 2, 2]
    lone = setup.router.receives.receive_hosts(queue_definition("lone"), None, [0])
    assert lone == setup.router.receives.receive_hosts(queue_definition("lone"), None)
    assert setup.router.receives.receive_hosts(queue_definition("lone"), None, [1]) == []


async def test_a_peek_with_an_end_asks_only_the_partitions_holding_its_range() -> None:
    setup = Setup()
    setup.create()
    for i in range(12):
        await setup.router.sends.send("q", envelopes(Message(f"m{i}", partition_key=key_for(i % PARTITIONS))), 5.0)
    end = setup.channel.engines[1].runtime("q")["next_sequence"]
    await setup.router.sends.send("q", envelopes(Message("late", partition_key=key_for(1))), 5.0)
    peeked = await setup.router.browsing.peek("q", MAIN, None, make_sequence_number(1, 0), 10, end)
    assert [partition_of(r["sequence_number"]) for r in peeked] == [1, 1, 1]
    assert [setup.channel.calls[(k, "peek")] for k in range(PARTITIONS)] == [0, 1, 0, 0]
    everything = await setup.router.browsing.peek("q", MAIN, None, make_sequence_number(1, 0), 100)
    assert len(everything) == 10
    assert [setup.channel.calls[(k, "peek")] for k in range(PARTITIONS)] == [0, 2, 1, 1]


async def test_closing_releases_prefetched_messages_without_counting_a_delivery() -> None:
    setup = Setup()
    setup.create()
    await setup.router.sends.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(2)) for i in range(5))), 5.0)
    reply = await setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 1, 1.0, 4, [])
    assert len(reply.messages) == 1
    assert await setup.router.receives.close_receiver("r1") == 4
    assert setup.router.hints.of("q", MAIN, None)[2] >= 1, "released messages make their partition ready"
    again = await setup.router.receives.receive("r2", "q", MAIN, PEEK_LOCK, None, 10, 1.0, 0, [])
    assert sorted(r["delivery_count"] for r in again.messages) == [1, 1, 1, 1]


async def test_keyed_and_unkeyed_parts_of_one_tagged_send_on_one_partition_are_both_stored() -> None:
    setup = Setup(partitions=1)
    setup.create()
    batch = envelopes(Message("keyed", partition_key="k"), Message("free"), Message("keyed too", partition_key="k"))
    seqs = await setup.router.sends.send("q", batch, 5.0, ("producer", 1))
    assert len(set(seqs)) == 3 and setup.counts() == [3]
    assert await setup.router.sends.send("q", batch, 5.0, ("producer", 1)) == seqs, "a retry is answered, not stored"
    assert setup.counts() == [3]


async def test_batches_sent_together_take_one_call_per_partition_and_keep_their_own_tags() -> None:
    setup = Setup()
    setup.create()
    keys = [key_for(1), key_for(3)]
    batches = [(envelopes(*(Message(f"b{b}-{i}", partition_key=keys[i % 2]) for i in range(6))), ("p", b))
               for b in range(3)]
    batches.append((envelopes(*(Message(f"free-{i}") for i in range(4))), ("p", 3)))
    seqs = await setup.router.sends.send_batches("q", batches, 5.0)
    assert [len(s) for s in seqs] == [6, 6, 6, 4] and len({s for batch in seqs for s in batch}) == 22
    assert all(partition_of(s) == (1, 3)[i % 2] for batch in seqs[:3] for i, s in enumerate(batch))
    assert len({partition_of(s) for s in seqs[3]}) == 1, "the unkeyed batch went to one partition"
    free = partition_of(seqs[3][0])
    assert [setup.channel.round_trips[k] - (k == free) for k in (1, 3)] == [1, 1], "three batches' shares in one call"
    again = await setup.router.sends.send_batches("q", batches[1:3] + [(batches[0][0], ("p", 9))], 5.0)
    assert again[:2] == seqs[1:3], "a repeated batch is answered with its first sequence numbers"
    assert not set(again[2]) & set(seqs[0]), "a new tag stores the batch again"
    assert sum(setup.counts()) == 28
    assert (await setup.router.sends.send("q", batches[0][0], 5.0, ("p", 0))) == seqs[0], "one tag, one batch"


async def test_batches_sent_together_are_all_checked_before_any_is_sent() -> None:
    setup = Setup()
    setup.create(requires_session=True)
    good = envelopes(Message("a", session_id="s1"))
    with pytest.raises(InvalidOperationError, match="session"):
        await setup.router.sends.send_batches("q", [(good, ("p", 0)), (envelopes(Message("b")), ("p", 1))], 5.0)
    assert setup.counts() == [0, 0, 0, 0]


async def test_batches_sent_together_wait_for_a_keyed_partition_that_is_down() -> None:
    setup = Setup()
    setup.create()
    setup.channel.down.add(2)
    batch = envelopes(Message("a", partition_key=key_for(2)))
    with pytest.raises(PartitionUnavailableError) as failed:
        await setup.router.sends.send_batches("q", [(batch, ("p", 0)), (batch, ("p", 1))], timeout=3.0)
    assert failed.value.partition == 2 and setup.counts() == [0, 0, 0, 0]


def test_a_senders_consecutive_batch_numbers_go_to_consecutive_partitions() -> None:
    starts = [spread_start(("sender-a", n), 16) for n in range(64)]
    assert all(b == (a + 1) % 16 for a, b in zip(starts, starts[1:])), "each batch goes to the next partition"
    assert sorted(starts) == sorted(list(range(16)) * 4), "64 batches, 4 on each of the 16"
    assert spread_start(("sender-a", 37), 16) == starts[37], "a retry of a batch goes where the batch went"


def test_sticky_batch_numbers_keep_runs_on_one_partition_and_never_repeat() -> None:
    numbers = [batch_number(call, 4, 16) for call in range(128)]
    assert numbers == sorted(set(numbers)), "they grow and never repeat"
    starts = [spread_start(("sender-a", n), 16) for n in numbers]
    runs = [starts[r * 4:(r + 1) * 4] for r in range(32)]
    assert all(len(set(run)) == 1 for run in runs), "a run of 4 calls keeps to one partition"
    assert all(b[0] == (a[0] + 1) % 16 for a, b in zip(runs, runs[1:])), "the next run goes to the next one"
    assert [batch_number(call, 1, 16) for call in range(5)] == [0, 1, 2, 3, 4], "round robin numbers its calls"
    assert [next_run(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8] and next_run(7, 1) == 7


class SenderLink:
    """A client link whose sends go through the router (as the direct transport's do), recording
    the partitions each batch's messages landed on."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.landed: list[set[int]] = []

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        raise AssertionError(f"only router requests expected, got {operation}")

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        raise AssertionError(f"only router requests expected, got {operation}")

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        raise AssertionError(f"only async requests expected, got {request}")

    async def route_async(self, request: RouterRequest, *, timeout: float) -> Any:
        result = await self.router.run(request)
        for seqs in result if isinstance(request, SendBatchesRequest) else [result]:
            self.landed.append({partition_of(s) for s in seqs})
        return result


def sender_over_router(partitions: int = 16, **options: Any) -> tuple[Setup, SenderLink, SenderBase]:
    """A router over `partitions` stub partitions holding queue "q", and a sender reaching it."""
    setup = Setup(partitions)
    setup.create()
    link = SenderLink(setup.router)
    return setup, link, SenderBase(link, get_sku("standard"), "q", partition_count=partitions, **options)


def landed_on(link: SenderLink) -> list[int]:
    """The partition each recorded batch went to (each batch goes whole to one)."""
    assert all(len(partitions) == 1 for partitions in link.landed), "a batch lands whole on one partition"
    return [next(iter(partitions)) for partitions in link.landed]


async def test_a_senders_consecutive_sends_go_to_consecutive_partitions_and_64_use_all_16() -> None:
    setup, link, sender = sender_over_router()
    for n in range(64):
        await run_async(link, sender._send([Message(f"{n}-a"), Message(f"{n}-b")], None, None))
    order = landed_on(link)
    assert all(b == (a + 1) % 16 for a, b in zip(order, order[1:])), order
    assert setup.counts() == [8] * 16


async def test_24_single_sends_of_a_sender_reach_all_16_partitions() -> None:
    setup, link, sender = sender_over_router()
    for n in range(24):
        await run_async(link, sender._send(Message(str(n)), None, None))
    assert len(set(landed_on(link)[:16])) == 16, "16 consecutive single sends, 16 distinct partitions"
    assert sorted(setup.counts()) == [1] * 8 + [2] * 8


async def test_the_batches_of_one_send_message_batches_call_go_round_the_partitions() -> None:
    setup, link, sender = sender_over_router()
    await run_async(link, sender._send(Message("first"), None, None))
    await run_async(link, sender._send_batches([[Message(f"{b}-{i}") for i in range(3)] for b in range(20)], None))
    order = landed_on(link)
    assert all(b == (a + 1) % 16 for a, b in zip(order, order[1:])), "each batch to the next partition"
    assert sorted(setup.counts()) == [3] * 11 + [4] + [6] * 4, "the 21 batches went round once and on 5 more"


async def test_a_sticky_sender_keeps_runs_of_batches_on_one_partition_and_goes_round() -> None:
    setup, link, sender = sender_over_router(sticky_batches=4)
    for n in range(64):
        await run_async(link, sender._send(Message(str(n)), None, None))
    await run_async(link, sender._send_batches([Message(f"b{b}") for b in range(8)], None))
    order = landed_on(link)
    runs = [order[r * 4:(r + 1) * 4] for r in range(18)]
    assert all(len(set(run)) == 1 for run in runs), "4 consecutive batches share a partition"
    assert all(b[0] == (a[0] + 1) % 16 for a, b in zip(runs, runs[1:])), "the next run goes to the next one"
    assert sorted(setup.counts()) == [4] * 14 + [8] * 2


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "4", None])
def test_sticky_batches_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="sticky_batches must be an int >= 1"):
        SenderBase(SenderLink(Setup().router), get_sku("standard"), "q", sticky_batches=bad, partition_count=16)


async def test_an_unkeyed_batch_whose_reply_was_lost_is_not_stored_again_elsewhere() -> None:
    setup = Setup()
    setup.create()
    await setup.router.definitions.get("q")
    start = spread_start(("p", 5), PARTITIONS)
    setup.channel.lost_replies.add(start)
    seqs = await setup.router.sends.send("q", envelopes(*(Message(f"m{i}") for i in range(5))), 30.0, ("p", 5))
    assert {partition_of(s) for s in seqs} == {start}
    assert sum(setup.counts()) == 5, "the retry on the same partition was recognized"


async def test_an_unkeyed_batch_moves_on_when_its_partition_stays_away(caplog: pytest.LogCaptureFixture) -> None:
    setup = Setup()
    setup.create()
    start = spread_start(("p", 0), PARTITIONS)
    setup.channel.down.add(start)
    batch = [Message(f"m{i}", message_id=f"id-{i}" if i else None) for i in range(5)]
    seqs = await setup.router.sends.send("q", envelopes(*batch), 60.0, ("p", 0))
    assert len({partition_of(s) for s in seqs}) == 1 and partition_of(seqs[0]) != start
    assert UNKEYED_SETTLE_S <= sum(setup.slept) < UNKEYED_SETTLE_S + 2.0, "it kept to its partition for a while"
    (warning,) = [r for r in caplog.records if hasattr(r, MOVED_IN_DOUBT)]
    assert getattr(warning, MOVED_IN_DOUBT) == MovedInDoubt("q", start, (None, "id-1", "id-2", "id-3", "id-4")), \
        "the warning names the batch that may be stored twice"
    tried = setup.channel.calls[(start, "send")]
    for number in range(1, 2 * PARTITIONS):
        await setup.router.sends.send("q", envelopes(Message("later")), 60.0, ("p", number))
    assert setup.channel.calls[(start, "send")] == tried, "a partition that stayed away is passed over for a while"
    setup.clock.advance(AWAY_BACKOFF.initial)
    setup.channel.down.discard(start)
    for number in range(2 * PARTITIONS, 3 * PARTITIONS):
        await setup.router.sends.send("q", envelopes(Message("back")), 60.0, ("p", number))
    assert setup.channel.calls[(start, "send")] > tried, "and used again once the hold is over"


async def test_a_batch_that_moves_on_from_a_second_partition_it_may_have_reached_is_warned_of_again(
        caplog: pytest.LogCaptureFixture) -> None:
    setup = Setup()
    setup.create()
    lost = two_partitions_away(setup, refused=False)
    number = next(n for n in range(100) if spread_start(("p", n), PARTITIONS) == lost[0])
    seqs = await setup.router.sends.send("q", envelopes(Message("m", message_id="only")), 60.0, ("p", number))
    assert partition_of(seqs[0]) not in lost
    assert sum(setup.slept) < UNKEYED_SETTLE_S + 2.0, "one doubt waited out, the second not"
    warned = [getattr(r, MOVED_IN_DOUBT) for r in caplog.records if hasattr(r, MOVED_IN_DOUBT)]
    assert sorted(m.partition for m in warned) == lost and all(m.message_ids == ("only",) for m in warned), \
        "each partition the batch may have been stored on is named"


def two_partitions_away(setup: Setup, refused: bool) -> list[int]:
    """Take down two of the four partitions, as losing the node that holds them does: their calls
    are refused unsent (`refused`, as Ray does while their actors wait for the node) or fail
    after they may have run."""
    lost = [1, 2]
    (setup.channel.unreachable if refused else setup.channel.down).update(lost)
    return lost


async def paced_stream(setup: Setup, batches: int) -> list[float]:
    """Send `batches` tagged unkeyed batches of one sender, one every 0.65 s; how long each took."""
    took = []
    for number in range(batches):
        began = setup.clock.now()
        seqs = await setup.router.sends.send("q", envelopes(Message(f"m{number}")), 60.0, ("p", number))
        assert seqs[0] is not None
        took.append(setup.clock.now() - began)
        setup.clock.advance(0.65)
    return took


async def test_an_unkeyed_batch_refused_unsent_moves_on_at_once() -> None:
    setup = Setup()
    setup.create()
    start = spread_start(("p", 0), PARTITIONS)
    setup.channel.unreachable.add(start)
    seqs = await setup.router.sends.send("q", envelopes(*(Message(f"m{i}") for i in range(5))), 60.0, ("p", 0))
    assert len({partition_of(s) for s in seqs}) == 1 and partition_of(seqs[0]) != start
    assert sum(setup.slept) == 0, "a call that cannot have reached its partition leaves no doubt to wait out"
    assert sum(setup.counts()) == 5


async def test_after_a_node_loss_refused_batches_never_wait() -> None:
    setup = Setup()
    setup.create()
    lost = two_partitions_away(setup, refused=True)
    took = await paced_stream(setup, 100)
    assert max(took) <= ATTEMPT_TIMEOUT_S and sum(setup.slept) < 1.0, (max(took), sum(setup.slept))
    assert sum(setup.counts()) == 100 and all(setup.counts()[k] == 0 for k in lost)
    tries = sum(setup.channel.calls[(k, "send")] for k in lost)
    assert tries == 0, "refused calls never ran"


async def test_after_a_node_loss_doubts_are_waited_out_ever_more_rarely() -> None:
    setup = Setup()
    setup.create()
    lost = two_partitions_away(setup, refused=False)
    took = await paced_stream(setup, 600)
    assert max(took) <= UNKEYED_SETTLE_S + 1.0, "a batch waits out one doubt at most"
    doubts = [t for t in took if t > ATTEMPT_TIMEOUT_S]
    # 600 batches span some 8 minutes: each lost partition is doubted when first met, then after
    # holds of 30, 60 and 120 s (a fixed 30 s hold would doubt each one every 40 s or so).
    assert len(doubts) <= 2 * 4, took
    assert sum(setup.slept) <= 2 * 4 * (UNKEYED_SETTLE_S + 1.0)
    assert sum(setup.counts()) == 600 and all(setup.counts()[k] == 0 for k in lost)


async def test_a_lost_partition_that_answers_again_is_held_briefly_again() -> None:
    setup = Setup()
    setup.create()
    lost = two_partitions_away(setup, refused=False)
    await paced_stream(setup, 200)
    setup.channel.down.clear()
    setup.clock.advance(AWAY_BACKOFF.maximum)
    await paced_stream(setup, 8)
    assert all(setup.counts()[k] > 0 for k in lost), "back in use once their hold is over"
    for k in lost:
        assert setup.router.reach.health.hold_away(k, setup.clock.now()) == AWAY_BACKOFF.initial, "holds start over"


async def two_cached_and_a_partition_gone(setup: Setup) -> list[int]:
    """Receiver "r1" of "q" with two messages of partition 0 in its cache (prefetched), and
    partition 1 known to hold messages but without the entity any more, so that receiving there
    raises an engine error. Returns the cached messages' sequence numbers."""
    setup.create()
    await setup.router.sends.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(0)) for i in range(3))), 5.0)
    hints = setup.router.hints.of("q", MAIN, None)
    hints.update({k: k == 0 for k in range(PARTITIONS)})
    first = await setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 1, 0.0, 2, [])
    assert len(first.messages) == 1
    cached = [record["sequence_number"] for _, record in setup.router.receives.receiver("r1", "q", MAIN).cache]
    assert len(cached) == 2
    hints[1] = True
    setup.channel.engines[1].delete_entity("q")
    return cached


async def test_a_receive_meeting_an_engine_error_puts_what_it_took_back_in_the_cache() -> None:
    setup = Setup()
    cached = await two_cached_and_a_partition_gone(setup)
    with pytest.raises(MessagingEntityNotFoundError):
        await setup.router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 5, 0.0, 0, [])
    state = setup.router.receives.receiver("r1", "q", MAIN)
    assert [record["sequence_number"] for _, record in state.cache] == cached, "nothing taken is lost"
    assert await setup.router.receives.close_receiver("r1") == 2, "and closing the receiver releases them"
