"""Shared fixtures: one Ray instance per test session and one durable namespace on it.

Tests that need Ray are marked `ray` (selected automatically by the fixtures they use).
"""
from __future__ import annotations

import http.server
import socket
import threading
import uuid
from typing import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long chaos and fuzz runs instead of the short CI ones")


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """Whether --long was given."""
    return bool(request.config.getoption("--long"))


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[None]:
    """A local Ray shared by every test of the session (4 logical CPUs on this 2-core machine)."""
    import ray

    from ray_broker.client.lifecycle import LOCAL_RAY_SYSTEM_CONFIG

    ray.init(address="local", namespace="ray_broker", num_cpus=4, include_dashboard=False, log_to_driver=False,
             configure_logging=False, _system_config=LOCAL_RAY_SYSTEM_CONFIG)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def namespace(ray_instance: None, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A standard namespace with 16 partitions and durable ("normal") stores in a temp dir."""
    import ray_broker as rb

    ns = rb.start("itest", data_dir=str(tmp_path_factory.mktemp("itest")), durability="normal")
    yield ns
    rb.stop("itest", delete_data=True)


@pytest.fixture
def http_address() -> Iterator[str]:
    """The address of an HTTP/1 server on 127.0.0.1 (no Ray head: address checks refuse it)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_address() -> str:
    """An address on 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def queue_name() -> str:
    """A fresh queue name for one test."""
    return f"q-{uuid.uuid4().hex[:12]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    long_run = bool(config.getoption("--long"))
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "ray_instance" in fixtures or "namespace" in fixtures:
            item.add_marker(pytest.mark.ray)
        if not long_run and item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.skip(reason="a long run: selected with --long"))
