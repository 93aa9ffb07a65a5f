"""The management API's transport: sniffing a connection's protocol, the port's listener (AMQP
and plain HTTP on one port, and both inside TLS with the generated certificate), the HTTP/1.1
exchange, request routing and token checks. Real sockets on 127.0.0.1, no Ray."""
from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import AsyncIterator

import pytest
from cryptography import x509

from ray_broker.amqp.streams import ByteReader, ByteWriter
from ray_broker.errors import InvalidArgumentError, MessagingEntityNotFoundError, UnauthorizedError
from ray_broker.keys.sas import LISTEN, MANAGE, SEND, make_token, new_key
from ray_broker.management_http.authorization import authorize, check_forwarding
from ray_broker.management_http.certificate import certificate_path, ensure_certificate, server_context
from ray_broker.management_http.codecs import amqp_address
from ray_broker.management_http.http import serve_http
from ray_broker.management_http.listener import SniffingListener
from ray_broker.management_http.routes import MethodNotAllowedError, Resource, is_health_check, route
from ray_broker.management_http.service import Reply, Request, status_of
from ray_broker.management_http.sniff import WireProtocol, sniff

NOW = 1_800_000_000
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@pytest.mark.parametrize("head,protocol", [
    (AMQP_HEADER, WireProtocol.AMQP), (b"\x16\x03\x01\x02\x00", WireProtocol.TLS),
    (b"GET /q HTTP/1.1", WireProtocol.HTTP), (b"PUT", WireProtocol.HTTP), (b"DEL", WireProtocol.HTTP),
    (b"GETS / HTTP/1.1", WireProtocol.AMQP), (b"\x00\x01", WireProtocol.AMQP),
])
def test_sniff(head: bytes, protocol: WireProtocol) -> None:
    assert sniff(head) is protocol


@pytest.mark.parametrize("method,target,resource,names", [
    ("GET", "/$namespaceinfo?api-version=2021-05", Resource.NAMESPACE, ("", "", "")),
    ("GET", "/$Resources/queues?$skip=0&$top=100&api-version=2021-05", Resource.QUEUES, ("", "", "")),
    ("GET", "/$Resources/topics", Resource.TOPICS, ("", "", "")),
    ("PUT", "/orders?api-version=2021-05", Resource.ENTITY, ("orders", "", "")),
    ("DELETE", "/shop/orders", Resource.ENTITY, ("shop/orders", "", "")),
    ("GET", "/news/subscriptions", Resource.SUBSCRIPTIONS, ("news", "", "")),
    ("GET", "/shop/news/Subscriptions/s1?enrich=false", Resource.SUBSCRIPTION, ("shop/news", "s1", "")),
    ("GET", "/news/subscriptions/s1/rules", Resource.RULES, ("news", "s1", "")),
    ("PUT", "/news/subscriptions/s1/rules/%24Default", Resource.RULE, ("news", "s1", "$Default")),
])
def test_routes(method: str, target: str, resource: Resource, names: tuple[str, str, str]) -> None:
    found = route(method, target)
    assert found.resource is resource and (found.entity, found.subscription, found.rule) == names


def test_route_pages_and_paths_tokens_must_cover() -> None:
    page = route("GET", "/news/subscriptions?$skip=20&$top=10")
    assert (page.skip, page.top, page.entity_path) == (20, 10, "news")
    assert route("GET", "/news/subscriptions/s1/rules/r").entity_path == "news/subscriptions/s1"
    assert route("GET", "/$Resources/queues").entity_path == ""


@pytest.mark.parametrize("method,target,error,message", [
    ("PUT", "/$Resources/queues", MethodNotAllowedError, "PUT is not allowed"),
    ("POST", "/orders", MethodNotAllowedError, "POST is not allowed"),
    ("GET", "/$Resources/queues?$top=0", InvalidArgumentError, r"\$top must be from 1"),
    ("GET", "/$Resources/queues?$skip=x", InvalidArgumentError, r"\$skip must be a whole number"),
    ("GET", "/", MessagingEntityNotFoundError, "no management resource"),
    ("GET", "/$metrics", MessagingEntityNotFoundError, "no management resource"),
    ("GET", "/news/subscriptions/s1/filters/x", MessagingEntityNotFoundError, "no management resource"),
])
def test_bad_routes(method: str, target: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        route(method, target)


def test_errors_map_to_the_statuses_the_sdk_maps() -> None:
    assert [status_of(e) for e in (UnauthorizedError("x"), MessagingEntityNotFoundError("x"),
                                   InvalidArgumentError("x"), MethodNotAllowedError("x"), RuntimeError("x"))] == \
        [401, 404, 400, 405, 500]


ROOT = new_key("RootManageSharedAccessKey", (MANAGE, SEND, LISTEN))
SENDER = new_key("sender", (SEND,))
KEYS = (ROOT, SENDER)


def token(key=ROOT, audience: str = "https://localhost:5671", expiry: int = NOW + 60) -> str:  # type: ignore[no-untyped-def]
    return make_token(audience, key.name, key.key, expiry)


def test_a_manage_token_for_the_namespace_or_the_entity_is_authorized() -> None:
    authorize({"authorization": token()}, "", KEYS, NOW)
    authorize({"authorization": token(audience="https://localhost:5671/orders")}, "orders", KEYS, NOW)


@pytest.mark.parametrize("headers,path,message", [
    ({}, "", "no Authorization header"),
    ({"authorization": "Bearer abc"}, "", "not a shared access signature"),
    ({"authorization": token(expiry=NOW - 1)}, "", "expired"),
    ({"authorization": token(SENDER)}, "", "does not grant Manage on 'the namespace'"),
    ({"authorization": token(audience="https://localhost:5671/orders")}, "", "does not grant Manage"),
    ({"authorization": token(audience="https://localhost:5671/orders")}, "other", "does not grant Manage on 'other'"),
    ({"authorization": token(), "servicebussupplementaryauthorization": "junk"}, "", "not a shared access"),
])
def test_tokens_that_do_not_grant_manage_are_refused(headers: dict[str, str], path: str, message: str) -> None:
    with pytest.raises(UnauthorizedError, match=message):
        authorize(headers, path, KEYS, NOW)


def test_a_forwarding_token_must_grant_send_on_the_target() -> None:
    headers = {"servicebussupplementaryauthorization": token(SENDER, "sb://localhost/target")}
    check_forwarding(headers, {"forward_to": "target"}, KEYS, NOW)
    with pytest.raises(UnauthorizedError, match="does not grant Send on forwarding target 'elsewhere'"):
        check_forwarding(headers, {"forward_to": "elsewhere"}, KEYS, NOW)


def test_the_certificate_is_made_once_and_names_the_hosts(tmp_path: Path) -> None:
    cert_path, key_path = ensure_certificate(str(tmp_path), "ns", ("node-1", "10.1.2.3"))
    first = Path(cert_path).read_bytes()
    assert ensure_certificate(str(tmp_path), "ns", ("other",)) == (cert_path, key_path)
    assert Path(cert_path).read_bytes() == first and Path(key_path).stat().st_mode & 0o777 == 0o600
    names = x509.load_pem_x509_certificate(first).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert {"localhost", "node-1"} <= set(names.value.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "10.1.2.3"} <= {str(a) for a in names.value.get_values_for_type(x509.IPAddress)}
    assert certificate_path("ns", str(tmp_path)) == cert_path


async def answer(request: Request, host: str) -> Reply:
    """The handler the HTTP tests serve: echoes what it got."""
    text = f"{request.method} {request.target} {host} {len(request.body)}"
    return Reply(404 if "missing" in request.target else 200, "text/plain", text.encode())


@pytest.fixture
async def listener(tmp_path: Path) -> AsyncIterator[tuple[int, list[bytes], str]]:
    """A listener on a free port, with TLS, whose AMQP handler records what it reads, and whose
    HTTP handler is `serve_http` with `answer`; with the certificate file clients trust."""
    amqp_seen: list[bytes] = []

    async def amqp(reader: ByteReader, writer: ByteWriter) -> None:
        header = b""
        while len(header) < len(AMQP_HEADER):
            header += await reader.read(len(AMQP_HEADER) - len(header))
        amqp_seen.append(header)
        writer.write(AMQP_HEADER)
        await writer.drain()
        writer.close()

    async def http(reader: ByteReader, writer: ByteWriter) -> None:
        await serve_http(reader, writer, answer, "localhost:0")

    cert, key = ensure_certificate(str(tmp_path), "ns", ())
    served = SniffingListener({WireProtocol.AMQP: amqp, WireProtocol.HTTP: http}, server_context(cert, key))
    port = await served.listen("127.0.0.1", 0)
    yield port, amqp_seen, cert
    served.close()


async def exchange(port: int, data: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls,
                                                   server_hostname="localhost" if tls else None)
    writer.write(data)
    await writer.drain()
    answer_bytes = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer_bytes


async def test_amqp_gets_every_byte_of_its_connection(listener: tuple[int, list[bytes], str]) -> None:
    port, amqp_seen, _ = listener
    assert await exchange(port, AMQP_HEADER) == AMQP_HEADER
    assert amqp_seen == [AMQP_HEADER]


async def test_plain_http_keeps_the_connection_for_several_requests(listener: tuple[int, list[bytes], str]) -> None:
    port, amqp_seen, _ = listener
    two = (b"GET /$Resources/queues HTTP/1.1\r\nHost: h:1\r\n\r\n"
           b"PUT /missing HTTP/1.1\r\nHost: h:1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
    got = await exchange(port, two)
    assert got.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 404 Not Found" in got
    assert b"GET /$Resources/queues h:1 0" in got and b"PUT /missing h:1 3" in got
    assert amqp_seen == []


async def test_amqp_inside_tls_gets_every_byte_of_what_tls_carries(listener: tuple[int, list[bytes], str]) -> None:
    port, amqp_seen, cert = listener
    assert await exchange(port, AMQP_HEADER, ssl.create_default_context(cafile=cert)) == AMQP_HEADER
    assert amqp_seen == [AMQP_HEADER]


async def test_tls_inside_tls_is_closed(listener: tuple[int, list[bytes], str]) -> None:
    port, amqp_seen, cert = listener
    assert await closed_unanswered(port, b"\x16\x03\x01\x02\x00", ssl.create_default_context(cafile=cert))
    assert amqp_seen == []


async def test_https_with_the_generated_certificate(listener: tuple[int, list[bytes], str]) -> None:
    port, _, cert = listener
    trusting = ssl.create_default_context(cafile=cert)
    got = await exchange(port, b"GET /$namespaceinfo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                         trusting)
    assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"GET /$namespaceinfo localhost 0")
    with pytest.raises(ssl.SSLCertVerificationError):
        await exchange(port, b"GET / HTTP/1.1\r\n\r\n", ssl.create_default_context())


async def test_a_request_that_breaks_http_gets_400_and_the_port_keeps_serving(
        listener: tuple[int, list[bytes], str]) -> None:
    port, _, _ = listener
    assert (await exchange(port, b"GET / HTTP/1.1\r\nbroken header\r\n\r\n")).startswith(b"HTTP/1.1 400")
    too_big = b"PUT /q HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n"
    assert (await exchange(port, too_big)).startswith(b"HTTP/1.1 413")
    chunked = b"PUT /q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    over = 1024 * 1024 + 1
    assert (await exchange(port, chunked + f"{over:x}\r\n".encode() + b"x" * over)).startswith(b"HTTP/1.1 413")
    assert (await exchange(port, AMQP_HEADER)) == AMQP_HEADER


async def test_a_port_that_serves_plain_http_alone_closes_amqp_and_tls_connections(tmp_path: Path) -> None:
    async def http(reader: ByteReader, writer: ByteWriter) -> None:
        await serve_http(reader, writer, answer, "localhost:0")

    cert, _ = ensure_certificate(str(tmp_path), "ns", ())
    served = SniffingListener({WireProtocol.HTTP: http})
    port = await served.listen("127.0.0.1", 0)
    try:
        got = await exchange(port, b"GET /$Resources/queues HTTP/1.1\r\nHost: h:2\r\nConnection: close\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"GET /$Resources/queues h:2 0")
        assert await closed_unanswered(port, AMQP_HEADER)
        assert await closed_unanswered(port, b"GET / HTTP/1.1\r\n\r\n", ssl.create_default_context(cafile=cert))
        assert (await exchange(port, b"GET /missing HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")).startswith(
            b"HTTP/1.1 404"), "the port keeps serving"
    finally:
        served.close()


async def closed_unanswered(port: int, data: bytes, tls: ssl.SSLContext | None = None) -> bool:
    """Whether the listener closes a connection that sends `data` without answering a byte (the
    close may come as a reset, since the connection's bytes were never read)."""
    try:
        return await exchange(port, data, tls) == b""
    except (ConnectionError, ssl.SSLError):
        return True


async def test_a_port_that_serves_http_with_tls_closes_amqp_inside_tls(tmp_path: Path) -> None:
    async def http(reader: ByteReader, writer: ByteWriter) -> None:
        await serve_http(reader, writer, answer, "localhost:0")

    cert, key = ensure_certificate(str(tmp_path), "ns", ())
    served = SniffingListener({WireProtocol.HTTP: http}, server_context(cert, key))
    port = await served.listen("127.0.0.1", 0)
    trusting = ssl.create_default_context(cafile=cert)
    try:
        assert await closed_unanswered(port, AMQP_HEADER, trusting)
        got = await exchange(port, b"GET /q HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", trusting)
        assert got.startswith(b"HTTP/1.1 200 OK"), "HTTPS is served all the same"
    finally:
        served.close()


def test_tls_is_served_with_a_tls_context_not_a_handler() -> None:
    with pytest.raises(ValueError, match="TLS server context"):
        SniffingListener({WireProtocol.TLS: answer})  # type: ignore[dict-item]


@pytest.mark.parametrize("method, target, headers, probe", [
    ("GET", "/health", {}, True), ("GET", "/Health/?x=1", {}, True),
    ("GET", "/health", {"authorization": "SharedAccessSignature ..."}, False),
    ("PUT", "/health", {}, False), ("GET", "/health/subscriptions", {}, False),
])
def test_a_health_probe_is_get_health_without_a_token(method: str, target: str, headers: dict[str, str],
                                                      probe: bool) -> None:
    assert is_health_check(method, target, headers) is probe


@pytest.mark.parametrize("host,port,address", [("localhost:5300", 5672, "localhost:5672"),
                                               ("[::1]:5300", 5672, "[::1]:5672"), ("bus.example", 5672, "bus.example:5672"),
                                               ("localhost:5300", None, "localhost:5300")])
def test_forwarding_targets_name_the_amqp_address(host: str, port: int | None, address: str) -> None:
    assert amqp_address(host, port) == address
