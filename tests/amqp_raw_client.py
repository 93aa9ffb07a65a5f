"""A minimal AMQP 1.0 client for tests that need what the SDKs never do on purpose: stay silent,
send a transfer frame by frame, abort it, or drop the socket at any byte. Proton's engine over a
blocking socket, driven by hand (no reactor)."""
from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Callable

from proton import Collector, Connection, Delivery, Endpoint, Link, Message, Transport

from ray_broker.keys.sas import SasKey, make_token

STEP_S = 0.05
WAIT_S = 10.0


class RawAmqpClient:
    """One AMQP connection to `127.0.0.1:port` with one session.

    Args:
        port: the front end's port.
        idle_timeout_s: the idle timeout this client advertises (None: none); while `pump` runs it
            answers the server's advertised timeout with empty frames, as the SDKs do.
    """

    def __init__(self, port: int, idle_timeout_s: float | None = None) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.socket.settimeout(STEP_S)
        self.transport = Transport()
        if idle_timeout_s is not None:
            self.transport.idle_timeout = idle_timeout_s
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self.connection.hostname = "localhost"
        self.connection.collect(Collector())
        self.transport.bind(self.connection)
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self.closed_by_server = False

    # ------------------------------------------------------------------ bytes

    def flush(self) -> None:
        """Write everything the engine has to send."""
        while (pending := self.transport.pending()) > 0:
            self._write(bytes(self.transport.peek(pending)))
            self.transport.pop(pending)

    def flush_part(self, size: int) -> None:
        """Write only the first `size` bytes the engine has to send (a frame cut short)."""
        self._write(bytes(self.transport.peek(size)))

    def _write(self, data: bytes) -> None:
        """Write `data`, waiting up to `WAIT_S` in all for a busy server to read it (the socket's short
        read step would otherwise fail a write it merely has to wait for)."""
        deadline = time.monotonic() + WAIT_S
        view = memoryview(data)
        while view:
            try:
                view = view[self.socket.send(view):]
            except socket.timeout:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the server read nothing for {WAIT_S} s") from None

    def pump(self, until: Callable[[], bool] = lambda: False, timeout: float = WAIT_S) -> bool:
        """Exchange bytes with the server until `until()` holds or the server closes the socket
        (False), for at most `timeout` seconds (AssertionError after that)."""
        deadline = time.monotonic() + timeout
        while True:
            self.transport.tick(time.monotonic())
            self.flush()
            if until():
                return True
            if self.closed_by_server:
                return False
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer from the server within {timeout} s")
            try:
                data = self.socket.recv(65536)
            except socket.timeout:
                continue
            except ConnectionError:
                data = b""
            if not data:
                self.closed_by_server = True
                self.transport.close_tail()
                continue
            self.transport.push(data)

    def wait_open(self) -> None:
        """Wait for the server's Open."""
        assert self.pump(lambda: bool(self.connection.state & Endpoint.REMOTE_ACTIVE)), "the server closed"

    def stays_open_for(self, seconds: float) -> bool:
        """Exchange bytes (heartbeats included) for `seconds`: whether the server kept the connection open."""
        end = time.monotonic() + seconds
        return self.pump(lambda: time.monotonic() > end, timeout=seconds + WAIT_S)

    def silent_until_closed(self, timeout: float) -> bool:
        """Read without ever writing (no heartbeats) until the server closes the socket: whether it did
        within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self.socket.settimeout(timeout)
        try:
            while time.monotonic() < deadline:
                if not self.socket.recv(65536):
                    return True
        except socket.timeout:
            return False
        except ConnectionError:
            return True
        finally:
            self.socket.settimeout(STEP_S)
        return False

    def drop(self) -> None:
        """Vanish: reset the socket at once, without a Close (what a crashed client does)."""
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.socket.close()

    # ------------------------------------------------------------------ links

    def authorize(self, entity: str, key: SasKey) -> None:
        """Put a token for `entity` on `$cbs` and wait for it to be accepted."""
        audience = f"sb://localhost/{entity}"
        requests = self.session.sender(f"cbs-{uuid.uuid4().hex[:6]}")
        requests.target.address = "$cbs"
        replies = self.session.receiver(f"cbs-reply-{uuid.uuid4().hex[:6]}")
        replies.source.address = "$cbs"
        requests.open()
        replies.open()
        replies.flow(1)
        self.pump(lambda: requests.credit > 0)
        request = Message(id=uuid.uuid4().hex, reply_to=replies.name,
                          properties={"operation": "put-token", "type": "servicebus.windows.net:sastoken",
                                      "name": audience},
                          body=make_token(audience, key.name, key.key, int(time.time()) + 600))
        requests.delivery(b"put-token")
        requests.send(request.encode())
        requests.advance()
        self.pump(lambda: replies.current is not None and not replies.current.partial)
        response = Message()
        response.decode(replies.recv(replies.current.pending))
        replies.advance()
        assert response.properties["status-code"] == 202, response.properties

    def sender(self, address: str) -> Link:
        """A link to send on to `address`, attached and holding credit."""
        link = self.session.sender(f"send-{uuid.uuid4().hex[:6]}")
        link.target.address = address
        link.open()
        self.pump(lambda: link.credit > 0)
        return link

    def receiver(self, address: str, credit: int) -> Link:
        """A peek-lock link to receive on from `address`, attached, with `credit` given."""
        link = self.session.receiver(f"receive-{uuid.uuid4().hex[:6]}")
        link.source.address = address
        link.snd_settle_mode = Link.SND_UNSETTLED
        link.rcv_settle_mode = Link.RCV_SECOND
        link.open()
        self.pump(lambda: bool(link.state & Endpoint.REMOTE_ACTIVE))
        link.flow(credit)
        return link

    def send(self, link: Link, payload: bytes) -> tuple[int, str | None]:
        """Send one whole transfer on `link` and wait for the server to settle it: its outcome
        (`ACCEPTED`, `REJECTED`, ...) and error condition name."""
        delivery = link.delivery(uuid.uuid4().bytes)
        link.send(payload)
        link.advance()
        return self.outcome(delivery)

    def outcome(self, delivery: Delivery) -> tuple[int, str | None]:
        """Wait for the server to settle a delivery this client sent: its outcome and error condition name."""
        self.pump(lambda: delivery.remote_state != 0)
        condition = delivery.remote.condition
        return delivery.remote_state, None if condition is None else condition.name

    def received(self, link: Link, count: int) -> list[Delivery]:
        """Wait for `count` complete deliveries on `link` and read them (left unsettled)."""
        got: list[Delivery] = []

        def arrived() -> bool:
            while (current := link.current) is not None and not current.partial:
                link.recv(current.pending)
                got.append(current)
                link.advance()
            return len(got) >= count

        self.pump(arrived)
        return got


def encoded(body: bytes) -> bytes:
    """An AMQP message with a data body, encoded."""
    return bytes(Message(body=body, inferred=True).encode())


ACCEPTED, REJECTED = Delivery.ACCEPTED, Delivery.REJECTED
