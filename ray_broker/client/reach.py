"""Checking that an address names a Ray head before joining it.

Given an address where no Ray head answers, `ray.init` retries for minutes and fills standard
error with its C++ log lines. This check answers in seconds instead, with a
`ClusterUnreachableError` saying what to check: nothing listens there; something listens but does
not speak gRPC (a web server, say), so it is no Ray head's GCS; or the address is a Ray Client
(`ray://`) address, which the broker does not use.

A Ray head's GCS is a gRPC server, so it answers the HTTP/2 connection preface with a SETTINGS
frame; an HTTP/1 server answers it with text or closes. Other gRPC servers answer the preface
too (a raylet's or a dashboard agent's port, Ray Client's server, a gRPC proxy), so one call
that only a GCS serves follows: any other gRPC server answers it `UNIMPLEMENTED`. A cluster that
serves gRPC over TLS (`RAY_USE_TLS`) is checked for a listener only.
"""
from __future__ import annotations

import os
import socket

import grpc

from ..errors import ClusterUnreachableError

PROBE_TIMEOUT_S = 5.0
"""How long to wait for a connection, and then for the answer to the HTTP/2 preface."""
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""What every HTTP/2 client sends first (RFC 9113, section 3.4)."""
EMPTY_SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""A SETTINGS frame with no settings: length 0, type 4, no flags, stream 0."""
GCS_CALL = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A call every Ray head's GCS serves, with an empty request (answered, or refused for want of the
cluster's token, by a GCS; `UNIMPLEMENTED` by any other gRPC server)."""
FRAME_HEADER_BYTES = 9
SETTINGS_FRAME_TYPE = 4
_TLS_ENV = "RAY_USE_TLS"
_HOW_TO_CHECK = ("check that the cluster is running (`ray status --address ...`), that the host and port are those "
                 "of its head's GCS (the address `ray start --head` prints, usually port 6379), and that no firewall "
                 "is in the way")


def host_and_port(address: str) -> tuple[str, int]:
    """The host and port of a `host:port` (or `[ipv6]:port`) address; `ClusterUnreachableError`
    when it is a URL (a Ray Client `ray://` address among them) or not host:port."""
    if "://" in address:
        raise ClusterUnreachableError(
            f"{address!r} is a Ray Client address, and ray_broker does not run through Ray Client (a namespace "
            "keeps its configuration and store locks on the disk of the machine that starts it, so it joins the "
            "cluster as a driver): give the address of the cluster head's GCS instead (host:port, as `ray start "
            "--head` prints it, usually port 6379), or run this code inside the cluster (a Ray job, with no address)")
    host, _, port = address.rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterUnreachableError(
            f"Ray address {address!r} is not host:port (nor 'auto' or 'local'); give the address of the cluster "
            "head's GCS, as `ray start --head` prints it (host:6379 by default)")
    return host.strip("[]"), int(port)


def check_ray_head(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise `ClusterUnreachableError` unless a gRPC server (a Ray head's GCS) answers at `address`
    within about `timeout` seconds for the connection and as long again for its answer."""
    host, port = host_and_port(address)
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ClusterUnreachableError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); {_HOW_TO_CHECK}") from None
    with connection:
        if os.environ.get(_TLS_ENV, "").lower() in ("1", "true"):
            return
        reply = _http2_reply(connection)
    if len(reply) != FRAME_HEADER_BYTES or reply[3] != SETTINGS_FRAME_TYPE:
        raise ClusterUnreachableError(
            f"{address} answers but is not a Ray head (GCS): {_describe(reply, timeout)}. That may be the dashboard "
            f"or another service; {_HOW_TO_CHECK}")
    if not _serves_gcs_calls(address, timeout):
        raise ClusterUnreachableError(
            f"{address} answers gRPC but is not a Ray head (GCS): it does not serve the GCS's calls. That may be a "
            f"raylet's or a dashboard agent's port, Ray Client's server or a proxy; {_HOW_TO_CHECK}")


def _serves_gcs_calls(address: str, timeout: float) -> bool:
    """Whether the gRPC server at `address` serves `GCS_CALL` (only `UNIMPLEMENTED` says it does
    not: a GCS that is slow or wants a token is still a GCS). Straight to the address, as Ray's
    own clients go, whatever proxy the environment names."""
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            channel.unary_unary(GCS_CALL)(b"", timeout=timeout)
        except grpc.RpcError as exc:
            return exc.code() != grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    return True


def _http2_reply(connection: socket.socket) -> bytes:
    """The first frame header (9 bytes) the peer sends after the HTTP/2 preface, or as much as
    came before it closed or went quiet."""
    reply = b""
    try:
        connection.sendall(HTTP2_PREFACE + EMPTY_SETTINGS_FRAME)
        while len(reply) < FRAME_HEADER_BYTES:
            chunk = connection.recv(FRAME_HEADER_BYTES - len(reply))
            if not chunk:
                break
            reply += chunk
    except OSError:
        pass
    return reply


def _describe(reply: bytes, timeout: float) -> str:
    """How the peer answered the HTTP/2 preface, for an error message."""
    if not reply:
        return f"it did not answer an HTTP/2 (gRPC) handshake within {timeout:g} s, or closed the connection"
    text = reply.decode("ascii", errors="replace")
    if text.isprintable():
        return f"it answered an HTTP/2 (gRPC) handshake with {text!r}..., like an HTTP/1 server"
    return f"it answered an HTTP/2 (gRPC) handshake with bytes {reply.hex()} instead of a SETTINGS frame"
