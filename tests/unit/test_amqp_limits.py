"""The front end's connection limits: frame and message size by tier, and the idle timeout, with a
real `AmqpConnection` served on a local socket (no Ray: the connection-level tests open no link,
so the broker is never called)."""
from __future__ import annotations

import asyncio
from typing import AsyncIterator

import pytest

from ray_broker.amqp.connection import AmqpConnection
from ray_broker.amqp.limits import IDLE_TIMEOUT_S, ConnectionLimits, limits_for
from ray_broker.errors import MessageSizeExceededError
from ray_broker.sku import get_sku
from tests.amqp_raw_client import RawAmqpClient

SHORT_IDLE_S = 0.6


@pytest.mark.parametrize(("tier", "frame", "message"), [
    ("basic", 262_144, 262_144), ("standard", 262_144, 262_144), ("premium", 1_048_576, 1_048_576)])
def test_limits_by_tier(tier: str, frame: int, message: int) -> None:
    limits = limits_for(get_sku(tier))
    assert (limits.max_frame_bytes, limits.max_message_bytes, limits.idle_timeout_s, limits.tier) == \
        (frame, message, IDLE_TIMEOUT_S, tier)


def test_a_transfer_past_the_message_size_is_refused_with_what_to_do() -> None:
    limits = limits_for(get_sku("standard"))
    limits.check_transfer(262_144)
    with pytest.raises(MessageSizeExceededError, match=r"262145 bytes; the standard tier allows 262144 bytes"
                                                       r".*split the batch"):
        limits.check_transfer(262_145)


@pytest.fixture
async def served_port() -> AsyncIterator[int]:
    """A port where every accepted connection is an `AmqpConnection` with a short idle timeout."""
    limits = ConnectionLimits(max_frame_bytes=262_144, max_message_bytes=262_144, idle_timeout_s=SHORT_IDLE_S,
                              tier="standard")

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # no link is opened in these tests, so the namespace is never reached
        await AmqpConnection(reader, writer, None, (), limits=limits).serve()  # type: ignore[arg-type]

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


def opened(port: int) -> RawAmqpClient:
    client = RawAmqpClient(port, idle_timeout_s=30)
    client.wait_open()
    return client


@pytest.fixture
async def client(served_port: int) -> AsyncIterator[RawAmqpClient]:
    """A raw client whose connection the server has opened."""
    opened_client = await asyncio.to_thread(opened, served_port)
    yield opened_client
    opened_client.drop()


async def test_the_open_advertises_the_frame_size_and_idle_timeout(client: RawAmqpClient) -> None:
    assert client.transport.remote_max_frame_size == 262_144
    assert client.transport.remote_idle_timeout == pytest.approx(SHORT_IDLE_S / 2, abs=0.01)


async def test_a_silent_connection_is_closed_after_the_idle_timeout(client: RawAmqpClient) -> None:
    assert await asyncio.to_thread(client.silent_until_closed, SHORT_IDLE_S * 8)


async def test_heartbeats_keep_an_idle_connection_open(client: RawAmqpClient) -> None:
    # the client sends nothing but the empty frames the advertised timeout asks for, as the SDKs do
    assert await asyncio.to_thread(client.stays_open_for, SHORT_IDLE_S * 5)
