"""The forwarder over real engines and a stub channel, with no Ray: keyed messages land where
their key selects, a lost reply or a restart never duplicates a batch, an unavailable destination
keeps the batch waiting, an impossible one dead-letters it, and chains stop after four hops."""
from __future__ import annotations

import pytest

from ray_broker import Message
from ray_broker.engine.outbox import HOP_LIMIT_REASON
from ray_broker.errors import PartitionUnavailableError
from ray_broker.protocol import DEAD_LETTER, TRANSFER_DEAD_LETTER
from ray_broker.routing import partition_for_key
from ray_broker.routing.forwarding import Forwarder
from ray_broker.wire import Settlement

from .conftest import queue_definition
from .test_router import PARTITIONS, Setup, envelopes


def create(setup: Setup, name: str, **options: object) -> None:
    definition = queue_definition(name, enable_partitioning=True, **options)
    for engine in setup.channel.engines:
        engine.create_entity(definition)


def forwarders(setup: Setup) -> list[Forwarder]:
    return [Forwarder(k, engine, setup.router) for k, engine in enumerate(setup.channel.engines)]


async def forward_all(setup: Setup) -> int:
    return sum([await f.forward_pending() for f in forwarders(setup)])


def held(setup: Setup, name: str) -> list[int]:
    """Active messages of `name` on each partition."""
    return [engine.runtime(name)["active"] for engine in setup.channel.engines]


async def test_keyed_messages_land_where_their_key_selects() -> None:
    setup = Setup()
    create(setup, "dst")
    create(setup, "src", forward_to="dst")
    keys = [f"key-{i}" for i in range(12)]
    await setup.router.sends.send("src", envelopes(*(Message(k, partition_key=k) for k in keys)), timeout=5)
    assert await forward_all(setup) == 12
    for key in keys:
        index = partition_for_key(key, PARTITIONS)
        bodies = [m["payload"] for m in setup.channel.engines[index].peek("dst", 0, 0, 100)]
        assert any(key.encode() in body for body in bodies), f"{key} is on partition {index}"
    assert [e.runtime("src")["transfer"] for e in setup.channel.engines] == [0] * PARTITIONS
    assert sum(held(setup, "dst")) == 12


async def test_a_lost_reply_does_not_duplicate_the_batch() -> None:
    setup = Setup()
    create(setup, "dst")
    create(setup, "src", forward_to="dst")
    await setup.router.sends.send("src", envelopes(*(Message(str(i)) for i in range(5))), timeout=5)
    source = next(k for k, e in enumerate(setup.channel.engines) if e.runtime("src")["transfer"])
    forwarder = Forwarder(source, setup.channel.engines[source], setup.router)
    transfer = setup.channel.engines[source].take_transfer(10)
    assert transfer is not None
    destination = (partition_for_key(f"forwarder:{source}/unkeyed", PARTITIONS) + transfer["id"]) % PARTITIONS
    setup.channel.lost_replies.add(destination)
    assert await forwarder.forward_pending() == 5
    assert sum(held(setup, "dst")) == 5 and setup.channel.engines[source].runtime("src")["transfer"] == 0


async def test_an_unavailable_destination_keeps_the_batch_waiting() -> None:
    setup = Setup()
    create(setup, "dst")
    create(setup, "src", forward_to="dst")
    key = next(f"k{i}" for i in range(100) if partition_for_key(f"k{i}", PARTITIONS) == 1)
    await setup.router.sends.send("src", envelopes(Message("a", partition_key=key)), timeout=5)
    setup.channel.down.add(1)
    with pytest.raises(PartitionUnavailableError):
        await Forwarder(1, setup.channel.engines[1], setup.router).forward_pending()
    assert setup.channel.engines[1].runtime("src")["transfer"] == 1, "it waits, counted as a transfer message"
    setup.channel.down.discard(1)
    assert await Forwarder(1, setup.channel.engines[1], setup.router).forward_pending() == 1
    assert sum(held(setup, "dst")) == 1


async def test_a_destination_that_is_gone_dead_letters_the_batch() -> None:
    setup = Setup()
    create(setup, "dst")
    create(setup, "src", forward_to="dst")
    await setup.router.sends.send("src", envelopes(Message("a", partition_key="k")), timeout=5)
    for engine in setup.channel.engines:
        engine.delete_entity("dst")
    assert await forward_all(setup) == 0
    index = partition_for_key("k", PARTITIONS)
    (record,) = setup.channel.engines[index].receive("src", TRANSFER_DEAD_LETTER, 10)["messages"]
    assert record["dead_letter_reason"] == "MessagingEntityNotFound"
    assert "auto-forwarding from 'src' failed" in record["dead_letter_error_description"]


async def test_a_chain_dead_letters_at_the_fifth_hop() -> None:
    setup = Setup()
    names = ["a", "b", "c", "d", "e", "f"]
    create(setup, "f")
    for name, nxt in reversed(list(zip(names, names[1:]))):
        create(setup, name, forward_to=nxt)
    await setup.router.sends.send("a", envelopes(Message("hop", partition_key="k")), timeout=5)
    for _ in range(6):
        await forward_all(setup)
    index = partition_for_key("k", PARTITIONS)
    (record,) = setup.channel.engines[index].receive("e", DEAD_LETTER, 10)["messages"]
    assert record["dead_letter_reason"] == HOP_LIMIT_REASON
    assert sum(held(setup, "f")) == 0
    assert all(e.runtime(n)["transfer"] == 0 for e in setup.channel.engines for n in names[:4])


async def test_dead_lettered_messages_follow_their_forwarding() -> None:
    setup = Setup()
    create(setup, "poison")
    create(setup, "work", forward_dead_lettered_messages_to="poison", max_delivery_count=1)
    await setup.router.sends.send("work", envelopes(Message("bad", partition_key="k")), timeout=5)
    index = partition_for_key("k", PARTITIONS)
    engine = setup.channel.engines[index]
    (record,) = engine.receive("work", 0, 1)["messages"]
    engine.settle("work", 0, [Settlement("dead_letter", record["sequence_number"], record["lock_token"], "poison pill", "x")])
    assert await forward_all(setup) == 1
    (moved,) = engine.receive("poison", 0, 10)["messages"]
    assert moved["sequence_number"] >> 48 == index
    assert engine.runtime("work")["dead_letter"] == 0
