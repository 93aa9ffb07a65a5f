"""Waiting receives that end early (cancelled, or their receiver closed while they wait) take no
message: what they had locked goes back without a delivery counted. Router over a stub channel."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ray_broker import Message
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.router_requests import ReceiveRequest

from .test_router import Setup, envelopes


async def _waiting(setup: Setup, receiver_id: str) -> asyncio.Task[dict[str, Any]]:
    """A receive of one message that waits (the queue is empty), once its waits are under way."""
    task = asyncio.ensure_future(setup.router.receives.receive(receiver_id, "q", MAIN, PEEK_LOCK, None, 1, 30.0, 0, []))
    for _ in range(100):
        await asyncio.sleep(0.01)
        state = setup.router.receives._receivers.get(receiver_id)
        if state is not None and state.watches:
            return task
    raise AssertionError("the receive never started waiting")


async def _next_delivery_counts(setup: Setup) -> list[int]:
    """Send one message, then what a new receiver gets of it (its delivery counts)."""
    await setup.router.sends.send("q", envelopes(Message("next")), 5.0)
    reply = await asyncio.wait_for(setup.router.receives.receive("fresh", "q", MAIN, PEEK_LOCK, None, 1, 5.0, 0, []), 5.0)
    return [r["delivery_count"] for r in reply.messages]


async def test_a_cancelled_waiting_receive_takes_nothing() -> None:
    setup = Setup()
    setup.create()
    task = await _waiting(setup, "gone")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _next_delivery_counts(setup) == [1]
    await asyncio.sleep(0.05)
    assert sum(setup.channel.engines[k].runtime("q")["active"] for k in range(4)) == 1


async def test_closing_a_receiver_while_its_receive_waits_ends_that_receive_with_nothing() -> None:
    setup = Setup()
    setup.create()
    task = await _waiting(setup, "closing")
    assert await setup.router.receives.close_receiver("closing") == 0
    reply = await asyncio.wait_for(task, 2.0)
    assert reply.messages == []
    assert await _next_delivery_counts(setup) == [1]


async def test_closing_while_the_receive_harvests_its_ended_waits_does_not_fail() -> None:
    """The receive and the close both look at the receiver's waits; the close must not wait on
    a set the receive emptied meanwhile."""
    setup = Setup()
    setup.create()
    task = await _waiting(setup, "racing")
    for k in range(4):
        await setup.channel.end_waits(k, "racing")
    assert await setup.router.receives.close_receiver("racing") == 0
    assert (await asyncio.wait_for(task, 2.0)).messages == []


async def test_a_reply_whose_receiver_is_gone_is_released_uncounted_and_the_receiver_closed() -> None:
    setup = Setup()
    setup.create()
    await setup.router.sends.send("q", envelopes(Message("only")), 5.0)
    request = ReceiveRequest("dead", "q", MAIN, PEEK_LOCK, None, 1, 1.0, 0, [])
    reply = await setup.router.run(request)
    assert len(reply.messages) == 1
    left = await setup.router.receives.receiver_gone(request, reply)
    assert left.messages == [] and "dead" not in setup.router.receives._receivers
    again = await setup.router.receives.receive("fresh", "q", MAIN, PEEK_LOCK, None, 1, 1.0, 0, [])
    assert [r["delivery_count"] for r in again.messages] == [1]
