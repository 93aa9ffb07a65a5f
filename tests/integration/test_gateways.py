"""Several gateways: a client on the relay path moves to another gateway when its own is killed
under load, with no error to the caller and no message lost or stored twice."""
from __future__ import annotations

import collections
import threading
import time
from typing import Iterator

import pytest
import ray

import ray_broker as rb
from actors.handles import find_actor

from .helpers import drain

SENDS = 150
PER_SEND = 4


@pytest.fixture
def two_gateways(ray_instance: None) -> Iterator[rb.Namespace]:
    ns = rb.start("gateways2", sku="premium", partitions=2, gateways=2, durability="memory")
    yield ns
    rb.stop("gateways2")


def test_a_killed_gateway_is_left_for_another_with_no_client_error(two_gateways: rb.Namespace) -> None:
    two_gateways.create_queue("q")
    relay = rb.Namespace(two_gateways.config, gateway_index=0, relay=True)
    errors: list[BaseException] = []
    sent = threading.Event()

    def send() -> None:
        try:
            with relay.get_queue_sender("q") as sender:
                for i in range(SENDS):
                    sender.send_messages([rb.Message(f"{i}-{j}") for j in range(PER_SEND)])
                    if i == SENDS // 3:
                        sent.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            sent.set()

    thread = threading.Thread(target=send)
    thread.start()
    assert sent.wait(120)
    gateway = find_actor(two_gateways.config.gateway_name(0))
    ray.kill(gateway, no_restart=True)
    killed_at = time.monotonic()
    thread.join(timeout=180)
    assert not thread.is_alive() and not errors, errors
    assert time.monotonic() - killed_at < 120
    with relay.get_queue_receiver("q", max_wait_time=3) as receiver:
        bodies = collections.Counter(m.body for m in drain(receiver, expected=SENDS * PER_SEND, wait=3))
    assert len(bodies) == SENDS * PER_SEND and max(bodies.values()) == 1
    assert relay._link.index == 1, "the client moved to the other gateway"
