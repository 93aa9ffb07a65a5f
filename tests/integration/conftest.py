"""Integration fixtures: the session's namespace reached on the direct path (the default) or,
in modules that set `BOTH_PATHS = True`, on both the direct path and the gateway relay; and a
namespace that serves AMQP, one for the session's AMQP tests (each works on entities of its own)."""
from __future__ import annotations

from typing import Iterator

import pytest

import ray_broker as rb

from .helpers import amqp_connection_string, serving_amqp


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if getattr(metafunc.module, "BOTH_PATHS", False) and "client_path" in metafunc.fixturenames:
        metafunc.parametrize("client_path", ["direct", "relay"], indirect=True)


@pytest.fixture
def client_path(request: pytest.FixtureRequest) -> str:
    """How the test's client reaches partitions: "direct" or "relay" (through the gateway)."""
    return str(getattr(request, "param", "direct"))


@pytest.fixture
def namespace(namespace: rb.Namespace, client_path: str) -> rb.Namespace:
    """The session's namespace, on the test's client path."""
    return rb.Namespace(namespace.config, relay=client_path == "relay")


@pytest.fixture(scope="session")
def amqp_namespace(ray_instance: None) -> Iterator[rb.Namespace]:
    """A standard namespace in memory that serves AMQP on a free port (one for the session: a
    namespace starts 17 actor processes, seconds of this machine's CPU)."""
    with serving_amqp("amqp") as ns:
        yield ns


@pytest.fixture(scope="session")
def port(amqp_namespace: rb.Namespace) -> int:
    """The AMQP port of the session's AMQP namespace."""
    assert amqp_namespace.config.amqp_port is not None
    return amqp_namespace.config.amqp_port


@pytest.fixture(scope="session")
def conn_str(amqp_namespace: rb.Namespace) -> str:
    """The connection string of the session's AMQP namespace (its root key)."""
    return amqp_connection_string(amqp_namespace)
