"""Checking an address before joining it: what listens there must be a Ray head's GCS (a gRPC
server), and a Ray Client address is refused, each within seconds and before Ray is started.
Every server here is a throwaway one on 127.0.0.1."""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

import grpc
import pytest

import ray_broker as rb
from ray_broker.client import lifecycle
from ray_broker.client.reach import EMPTY_SETTINGS_FRAME, GCS_CALL, HTTP2_PREFACE, check_ray_head, host_and_port
from ray_broker.errors import ClusterUnreachableError, InvalidArgumentError


def serve_once(answer: Callable[[socket.socket], None]) -> tuple[str, list[bytes]]:
    """A server on 127.0.0.1 that takes one connection, records what arrives first, and hands the
    connection to `answer`; returns its address and the list the bytes received go into."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def run() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                connection.settimeout(5)
                received.append(connection.recv(len(HTTP2_PREFACE) + len(EMPTY_SETTINGS_FRAME)))
                answer(connection)

    threading.Thread(target=run, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", received


@contextmanager
def grpc_server(methods: dict[str, Callable[[bytes, grpc.ServicerContext], bytes]]) -> Iterator[str]:
    """A gRPC server on 127.0.0.1 serving `methods` (full method name to handler, raw bytes in and
    out); its address."""
    handlers = {name: grpc.unary_unary_rpc_method_handler(handler) for name, handler in methods.items()}

    class Methods(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            return handlers.get(details.method)

    server = grpc.server(ThreadPoolExecutor(max_workers=2), handlers=[Methods()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _wants_a_token(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing or incorrect")
    raise AssertionError("abort raises")


@pytest.mark.parametrize("answer", [lambda request, context: b"\x0a\x1cthe-cluster-id", _wants_a_token],
                         ids=["answers", "wants-a-token"])
def test_a_grpc_server_that_serves_the_gcs_call_passes(answer: Callable[[bytes, grpc.ServicerContext], bytes]) -> None:
    with grpc_server({GCS_CALL: answer}) as address:
        check_ray_head(address)


def test_a_grpc_server_that_is_not_a_gcs_is_no_ray_head() -> None:
    with grpc_server({"/ray.rpc.NodeManagerService/GetNodeStats": lambda request, context: b""}) as address:
        began = time.monotonic()
        with pytest.raises(ClusterUnreachableError, match=f"{address} answers gRPC but is not a Ray head \\(GCS\\)"):
            check_ray_head(address)
    assert time.monotonic() - began < 3


def test_the_probe_opens_with_the_http2_preface() -> None:
    address, received = serve_once(lambda c: None)
    with pytest.raises(ClusterUnreachableError):
        check_ray_head(address)
    assert received == [HTTP2_PREFACE + EMPTY_SETTINGS_FRAME]


def test_an_http_server_is_no_ray_head(http_address: str) -> None:
    began = time.monotonic()
    with pytest.raises(ClusterUnreachableError, match=f"{http_address} answers but is not a Ray head \\(GCS\\)"):
        check_ray_head(http_address)
    assert time.monotonic() - began < 3


def test_a_server_that_stays_silent_is_no_ray_head() -> None:
    address, _ = serve_once(lambda c: time.sleep(2))
    began = time.monotonic()
    with pytest.raises(ClusterUnreachableError, match="did not answer an HTTP/2 \\(gRPC\\) handshake within 0.5 s"):
        check_ray_head(address, timeout=0.5)
    assert time.monotonic() - began < 2


def test_a_server_that_closes_at_once_is_no_ray_head() -> None:
    address, _ = serve_once(lambda c: None)
    with pytest.raises(ClusterUnreachableError, match="answers but is not a Ray head"):
        check_ray_head(address)


def test_a_tls_cluster_is_checked_for_a_listener_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_USE_TLS", "1")
    address, _ = serve_once(lambda c: None)
    check_ray_head(address)


def test_nothing_listening_is_unreachable(closed_address: str) -> None:
    with pytest.raises(ClusterUnreachableError, match=f"no Ray cluster answers at {closed_address} "):
        check_ray_head(closed_address)


@pytest.mark.parametrize("address", ["ray://127.0.0.1:10001", "ray://localhost:10001", "anyscale://cluster"])
def test_a_ray_client_address_is_refused_at_once(address: str) -> None:
    with pytest.raises(ClusterUnreachableError, match="Ray Client address.*GCS.*6379.*inside the cluster"):
        host_and_port(address)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:http", "127.0.0.1:0", "127.0.0.1:70000", ":6379"])
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    with pytest.raises(ClusterUnreachableError, match="is not host:port"):
        host_and_port(address)


def test_host_and_port_takes_ipv6_brackets() -> None:
    assert host_and_port("[::1]:6379") == ("::1", 6379)
    assert host_and_port("localhost:6379") == ("localhost", 6379)


@pytest.mark.parametrize("kind", ["http", "closed", "ray-client"])
def test_connect_and_start_fail_fast_without_starting_ray(kind: str, http_address: str, closed_address: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(lifecycle, "local_head_address", lambda: None)
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(lifecycle.ray, "init", lambda *a, **k: pytest.fail("ray.init was called"))
    address = {"http": http_address, "closed": closed_address, "ray-client": "ray://127.0.0.1:10001"}[kind]
    for call in (lambda: rb.connect("shop", address=address), lambda: rb.start("shop", address=address)):
        began = time.monotonic()
        with pytest.raises(ClusterUnreachableError):
            call()
        assert time.monotonic() - began < 3


def test_start_checks_its_options_before_reaching_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(lifecycle, "ensure_ray", lambda address=None: pytest.fail("Ray was reached"))
    with pytest.raises(InvalidArgumentError, match="standard tier always has 16 partitions"):
        rb.start("shop", partitions=4)
    with pytest.raises(InvalidArgumentError, match="gateways must be an int"):
        rb.start("shop", gateways=0)
    with pytest.raises(InvalidArgumentError, match="durability must be one of"):
        rb.start("shop", durability="paper")
