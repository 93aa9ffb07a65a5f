"""The router's hot path on the caller's thread (`Router.try_now`: `Sends.send_now`,
`ReceiveCoordinator.receive_now`), over real engines and the stub channel: what one round serves,
and what it hands back to the router's loop untouched or in part (`Later`)."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ray_broker import Message
from ray_broker.client.sender_flows import SenderBase
from ray_broker.errors import MessagingEntityNotFoundError
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.routing import partition_of
from ray_broker.routing.planner import spread_start, unkeyed_tag
from ray_broker.router_requests import PeekRequest, ReceiveReply, ReceiveRequest, SendRequest
from ray_broker.routing.router import Later, Router
from ray_broker.sku import get_sku
from ray_broker.wire import Settlement

from .test_router import PARTITIONS, Setup, SenderLink, envelopes, key_for, two_cached_and_a_partition_gone

TAG = ("sender-1", 0)
NEXT_TAG = ("sender-1", 1)
"""The sender's next batch: on the partition after `TAG`'s."""


async def ready(setup: Setup, name: str = "q", **options: Any) -> Setup:
    """An entity created on every engine and its definition in the router's cache."""
    setup.create(name, **options)
    await setup.router.definitions.get(name)
    return setup


def know_only(setup: Setup, partition: int) -> None:
    """Tell the router that `partition` alone holds messages of "q"."""
    hints = setup.router.hints.of("q", MAIN, None)
    hints.update({k: k == partition for k in range(PARTITIONS)})


def completes(reply: ReceiveReply) -> list[Settlement]:
    return [Settlement("complete", m["sequence_number"], m["lock_token"]) for m in reply.messages]


async def test_an_unkeyed_tagged_batch_goes_in_one_call_where_the_router_would_send_it() -> None:
    setup = await ready(Setup())
    seqs = setup.router.sends.send_now(SendRequest("q", envelopes(*[Message(str(i)) for i in range(5)]), 5.0, TAG))
    start = spread_start(TAG, PARTITIONS)
    assert seqs is not None and len(seqs) == 5
    assert setup.counts()[start] == 5 and sum(setup.counts()) == 5
    assert setup.channel.calls[(start, "send")] == 1


async def test_16_consecutive_single_sends_of_a_sender_hit_16_distinct_partitions_in_turn() -> None:
    setup = await ready(Setup(16))
    sender = SenderBase(SenderLink(setup.router), get_sku("standard"), "q", partition_count=16)
    landed = []
    for n in range(16):
        seqs = setup.router.sends.send_now(SendRequest("q", envelopes(Message(str(n))), 5.0, sender._tag()))
        assert seqs is not None
        landed.append(partition_of(seqs[0]))
    assert sorted(landed) == list(range(16)) and all(b == (a + 1) % 16 for a, b in zip(landed, landed[1:]))
    assert setup.counts() == [1] * 16


async def test_a_retry_through_the_router_after_a_lost_reply_stores_nothing_twice() -> None:
    setup = await ready(Setup())
    start = spread_start(TAG, PARTITIONS)
    setup.channel.lost_replies.add(start)
    batch = envelopes(*[Message(str(i)) for i in range(3)])
    later = setup.router.try_now(SendRequest("q", batch, 5.0, TAG))
    assert isinstance(later, Later), "the lost reply hands the send back"
    assert later.request.envelopes is batch and later.request.producer == TAG, "under the same tag"
    assert later.timeout is not None and 4.0 < later.timeout <= 5.0 and later.request.timeout == later.timeout
    seqs = later.reply(await setup.router.run(later.request))
    assert setup.counts() == [3 if k == start else 0 for k in range(PARTITIONS)]
    assert sorted(seqs) == seqs and len(set(seqs)) == 3  # type: ignore[type-var]


async def test_a_batch_handed_back_after_a_call_that_may_have_stored_it_is_settled_on_that_partition_first() -> None:
    setup = await ready(Setup())
    start = spread_start(TAG, PARTITIONS)
    setup.channel.lost_replies.add(start)
    batch = envelopes(*[Message(str(i)) for i in range(3)])
    assert setup.router.sends.send_now(SendRequest("q", batch, 5.0, TAG)) is None, "stored, but the reply was lost"
    setup.channel.unreachable.add(start)  # then its actor is found gone: Ray refuses calls unsent
    sending = asyncio.ensure_future(setup.router.sends.send("q", batch, 30.0, TAG))
    for _ in range(20):
        await asyncio.sleep(0)
    setup.channel.unreachable.discard(start)  # its replacement (a new leader) holds the batch
    seqs = await sending
    assert setup.counts() == [3 if k == start else 0 for k in range(PARTITIONS)], "stored once, where it went first"
    assert all(partition_of(seq) == start for seq in seqs if seq is not None)


async def test_sends_it_cannot_make_in_one_call_are_handed_back_untouched() -> None:
    setup = Setup()
    setup.create()
    assert setup.router.sends.send_now(SendRequest("q", envelopes(Message("a")), 5.0, TAG)) is None, "no cached definition"
    await setup.router.definitions.get("q")
    assert setup.router.sends.send_now(SendRequest("q", envelopes(Message("a")), 5.0, None)) is None, "untagged"
    split = envelopes(Message("a", partition_key=key_for(0)), Message("b", partition_key=key_for(1)))
    assert setup.router.sends.send_now(SendRequest("q", split, 5.0, TAG)) is None, "two partitions"
    setup.channel.down.add(spread_start(TAG, PARTITIONS))
    assert setup.router.sends.send_now(SendRequest("q", envelopes(Message("a")), 5.0, TAG)) is None, "its partition is down"
    assert sum(setup.counts()) == 0 and not any(op == "send" for _, op in setup.channel.calls)


async def test_a_keyed_batch_goes_to_its_partition_under_the_senders_own_tag() -> None:
    setup = await ready(Setup())
    seqs = setup.router.sends.send_now(SendRequest("q", envelopes(*[Message(str(i), partition_key=key_for(2)) for i in range(4)]),
                    5.0, TAG))
    assert seqs is not None and setup.counts() == [0, 0, 4, 0]
    assert unkeyed_tag(TAG) != TAG


async def test_engine_errors_are_raised_at_once() -> None:
    setup = await ready(Setup())
    for engine in setup.channel.engines:
        engine.delete_entity("q")
    with pytest.raises(MessagingEntityNotFoundError):
        setup.router.sends.send_now(SendRequest("q", envelopes(Message("a")), 5.0, TAG))


async def test_a_receive_takes_what_a_known_partition_holds_and_carries_the_settlements() -> None:
    setup = await ready(Setup())
    first = setup.router.sends.send_now(SendRequest("q", envelopes(*[Message(str(i)) for i in range(10)]), 5.0, TAG))
    assert first is not None
    know_only(setup, spread_start(TAG, PARTITIONS))
    done = setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, []))
    assert done is not None and done.complete and len(done.reply.messages) == 10
    second = setup.router.sends.send_now(SendRequest("q", envelopes(*[Message(str(i)) for i in range(4)]), 5.0, NEXT_TAG))
    assert second is not None
    again = setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, completes(done.reply)))
    assert again is not None and again.complete
    assert len(again.reply.messages) == 4 and again.reply.settled == [None] * 10
    assert setup.counts()[spread_start(TAG, PARTITIONS)] == 0, "the ten were completed"


async def test_a_receive_with_nothing_known_is_handed_back_untouched() -> None:
    setup = await ready(Setup())
    hints = setup.router.hints.of("q", MAIN, None)
    hints.update(dict.fromkeys(range(PARTITIONS), False))
    assert setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 5, 0.0, 0, [])) is None
    assert not any(op == "receive" for _, op in setup.channel.calls)


async def test_a_round_that_finds_nothing_leaves_the_rest_to_the_router() -> None:
    setup = await ready(Setup())
    done = setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 5, 0.0, 0, []))
    assert done is not None and not done.complete and done.reply.messages == []
    assert setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 5, 0.0, 0, [])) is None, "now known empty"


async def test_settlements_for_a_partition_that_does_not_answer_are_left_for_the_router() -> None:
    setup = await ready(Setup())
    start = spread_start(TAG, PARTITIONS)
    assert setup.router.sends.send_now(SendRequest("q", envelopes(*[Message(str(i)) for i in range(3)]), 5.0, TAG)) is not None
    know_only(setup, start)
    got = setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 3, 0.0, 0, []))
    assert got is not None and len(got.reply.messages) == 3
    other = setup.router.sends.send_now(SendRequest("q", envelopes(Message("x")), 5.0, NEXT_TAG))
    assert other is not None
    know_only(setup, (start + 1) % PARTITIONS)
    setup.channel.down.add(start)
    left = setup.router.try_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 3, 0.0, 0, completes(got.reply)))
    assert isinstance(left, Later) and left.done is not None and left.done.rest == [0, 1, 2]
    assert [m["partition"] for m in left.done.reply.messages] == [(start + 1) % PARTITIONS]
    assert isinstance(left.request, ReceiveRequest) and left.request.max_count == 2
    assert left.request.settlements == completes(got.reply), "the settlements it could not apply go on to the loop"
    setup.channel.down.discard(start)
    merged = left.reply(await setup.router.run(left.request))
    assert merged.settled == [None, None, None] and setup.counts()[start] == 0
    assert len(merged.messages) == 1


async def test_a_round_meeting_an_engine_error_puts_what_it_took_back_in_the_cache() -> None:
    setup = Setup()
    cached = await two_cached_and_a_partition_gone(setup)
    with pytest.raises(MessagingEntityNotFoundError):
        setup.router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 5, 0.0, 0, []))
    state = setup.router.receives.receiver("r1", "q", MAIN)
    assert [record["sequence_number"] for _, record in state.cache] == cached, "nothing taken is lost"
    assert await setup.router.receives.close_receiver("r1") == 2, "and closing the receiver releases them"


async def test_a_partition_that_failed_a_round_is_asked_again_within_the_same_wait() -> None:
    """A round on this thread meets a partition that does not answer (a dead actor, replaced by
    the time the router's loop asks); the waiting receive that follows asks it again once its
    back-off has passed, instead of waiting on the others alone for the whole wait."""
    setup = Setup()
    setup.create()
    router = Router("stub", setup.channel, get_sku("standard"))
    await router.definitions.get("q")
    await router.sends.send("q", envelopes(*(Message(f"m{i}", partition_key=key_for(2)) for i in range(3))), 5.0)
    setup.channel.down.add(2)
    done = router.receives.receive_now(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 10, 0.0, 0, []))
    assert done is not None and done.reply.messages == []
    setup.channel.down.discard(2)
    started = time.monotonic()
    reply = await router.receives.receive("r1", "q", MAIN, PEEK_LOCK, None, 10, 2.0, 0, [])
    assert len(reply.messages) == 3
    assert time.monotonic() - started < 1.0


async def test_what_one_round_cannot_serve_is_handed_to_the_loop_untouched() -> None:
    setup = await ready(Setup())
    peek = PeekRequest("q", MAIN, None, 0, 10)
    assert setup.router.try_now(peek) == Later(peek), "a peek always runs on the loop"
    receive = ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 5, 3.0, 0, [])
    know_only(setup, -1)
    assert setup.router.try_now(receive) == Later(receive), "nothing known to be there: the loop waits"
    assert await setup.router.run(peek) == []
