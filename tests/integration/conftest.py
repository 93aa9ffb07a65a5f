"""Integration fixtures: the session's namespace reached on the direct path (the default) or,
in modules that set `BOTH_PATHS = True`, on both the direct path and the gateway relay."""
from __future__ import annotations

import pytest

import ray_broker as rb


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
