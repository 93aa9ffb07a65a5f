"""Which protocol an accepted connection speaks, from its first bytes. Pure.

An AMQP 1.0 client opens with the protocol header `AMQP`, a TLS client with a handshake record
(content type 0x16), an HTTP/1.1 client with its request line (a method in capitals).
"""
from __future__ import annotations

from enum import Enum

TLS_HANDSHAKE = 0x16
HTTP_METHODS = (b"GET", b"PUT", b"POST", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH")
SNIFF_BYTES = 8
"""How many first bytes `sniff` looks at, at most."""


class WireProtocol(Enum):
    """What a connection speaks."""

    AMQP = "amqp"
    TLS = "tls"
    HTTP = "http"


def sniff(head: bytes) -> WireProtocol:
    """The protocol a connection whose first bytes are `head` (at least one) speaks; anything that is
    neither TLS nor an HTTP request goes to AMQP, whose engine refuses bytes that are no AMQP.

    >>> sniff(b"AMQP"), sniff(b"\\x16\\x03\\x01"), sniff(b"GET /q1 HTTP/1.1")
    (<WireProtocol.AMQP: 'amqp'>, <WireProtocol.TLS: 'tls'>, <WireProtocol.HTTP: 'http'>)
    """
    if head[:1] == bytes([TLS_HANDSHAKE]):
        return WireProtocol.TLS
    word, space, _ = head.partition(b" ")
    if any(method == word if space else method.startswith(word) for method in HTTP_METHODS):
        return WireProtocol.HTTP
    return WireProtocol.AMQP
