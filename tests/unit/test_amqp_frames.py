"""The frame mender between the socket and proton: transfers the Python SDK puts on the wire out of
delivery-id order (its threads) or under one id (its async client) reach proton in its order, with
the dispositions translated back; proton's errors go out with an info field. Driven against a real
proton engine, with frames encoded by the SDK's own encoder."""
from __future__ import annotations

from typing import Any

from azure.servicebus._pyamqp._decode import decode_frame
from azure.servicebus._pyamqp._encode import describe_performative, encode_value
from azure.servicebus._pyamqp.endpoints import Source, Target
from azure.servicebus._pyamqp.performatives import (
    AttachFrame,
    BeginFrame,
    DispositionFrame,
    OpenFrame,
    TransferFrame,
)
from proton import Collector, Connection, Delivery, Event, Transport

from ray_broker.amqp.frames import FrameMender

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def frame(performative: Any, channel: int = 0, payload: bytes = b"") -> bytes:
    """One AMQP frame as the SDK encodes it."""
    body = bytearray()
    encode_value(body, describe_performative(performative))
    body += payload
    return (len(body) + 8).to_bytes(4, "big") + b"\x02\x00" + channel.to_bytes(2, "big") + bytes(body)


def transfer(delivery_id: int | None, tag: bytes, payload: bytes, more: bool = False) -> bytes:
    return frame(TransferFrame(handle=0, delivery_id=delivery_id, delivery_tag=tag, message_format=0,
                               more=more, payload=payload), payload=payload)


def frames_of(data: bytes) -> list[tuple[int, list[Any]]]:
    """(performative code, fields) of each AMQP frame in `data` (after the protocol header)."""
    out, offset = [], 0
    while offset < len(data):
        if data[offset:offset + 4] == b"AMQP":
            offset += 8
            continue
        size = int.from_bytes(data[offset:offset + 4], "big")
        if size > 8:
            out.append(decode_frame(memoryview(data[offset + 8:offset + size])))
        offset += size
    return out


class Server:
    """A proton server engine as the front end drives it, behind a frame mender (or none)."""

    def __init__(self, mend: bool = True) -> None:
        self.transport = Transport(Transport.SERVER)
        self.connection = Connection()
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.mender = FrameMender() if mend else None
        self.received: list[bytes] = []
        self.written = b""

    def feed(self, data: bytes) -> None:
        if self.mender is not None:
            data = self.mender.inbound(data)
        self.transport.push(data)
        self.run()

    def run(self) -> None:
        while (event := self.collector.peek()) is not None:
            if event.type == Event.CONNECTION_REMOTE_OPEN:
                event.connection.open()
            elif event.type == Event.SESSION_REMOTE_OPEN:
                event.session.open()
            elif event.type == Event.LINK_REMOTE_OPEN:
                event.link.source.copy(event.link.remote_source)
                event.link.target.copy(event.link.remote_target)
                event.link.open()
                event.link.flow(100)
            elif event.type == Event.DELIVERY and not event.delivery.partial:
                delivery = event.delivery
                self.received.append(bytes(delivery.link.recv(delivery.pending)))
                delivery.link.advance()
                delivery.update(Delivery.ACCEPTED)
                delivery.settle()
            self.collector.pop()
        pending = self.transport.pending()
        if pending > 0:
            out = bytes(self.transport.peek(pending))
            self.transport.pop(pending)
            self.written += out if self.mender is None else self.mender.outbound(out)

    def open_sending_link(self, first_id: int = 0) -> None:
        """What an SDK sender or `$management` request link sends before its transfers."""
        self.feed(AMQP_HEADER + frame(OpenFrame(container_id="sdk", hostname="localhost", max_frame_size=65536,
                                                channel_max=10, idle_timeout=None, outgoing_locales=None,
                                                incoming_locales=None, offered_capabilities=None,
                                                desired_capabilities=None, properties=None))
                  + frame(BeginFrame(remote_channel=None, next_outgoing_id=first_id, incoming_window=5000,
                                     outgoing_window=5000, handle_max=None, offered_capabilities=None,
                                     desired_capabilities=None, properties=None))
                  + frame(AttachFrame(name="s", handle=0, role=False, send_settle_mode=0, rcv_settle_mode=0,
                                      source=Source(address="c"), target=Target(address="q"), unsettled=None,
                                      incomplete_unsettled=None, initial_delivery_count=0, max_message_size=None,
                                      offered_capabilities=None, desired_capabilities=None, properties=None)))

    def closed_with(self) -> list[Any] | None:
        """The error of the Close the server sent, if it sent one."""
        closes = [fields for code, fields in frames_of(self.written) if code == 0x18]
        return closes[0][0] if closes else None

    def settled_ids(self) -> list[int]:
        """The delivery ids the server's dispositions name, in order (a range as each of its ids)."""
        return [i for code, f in frames_of(self.written) if code == 0x15
                for i in range(f[1], (f[1] if f[2] is None else f[2]) + 1)]


def test_transfers_out_of_delivery_id_order_or_under_one_id_are_taken_and_answered_by_their_ids() -> None:
    server = Server()
    server.open_sending_link(first_id=0)
    server.feed(transfer(2, b"c", b"third"))
    server.feed(transfer(0, b"a", b"first") + transfer(1, b"b", b"second"))
    server.feed(transfer(3, b"d", b"fourth") + transfer(3, b"e", b"fourth again"))
    assert server.closed_with() is None
    assert server.received == [b"third", b"first", b"second", b"fourth", b"fourth again"]
    assert server.settled_ids() == [2, 0, 1, 3, 3]


def test_without_the_mender_proton_closes_the_connection_for_it_and_the_error_has_no_info() -> None:
    server = Server(mend=False)
    server.open_sending_link(first_id=0)
    server.feed(transfer(1, b"b", b"second"))
    server.feed(transfer(0, b"a", b"first"))
    error = server.closed_with()
    assert error is not None and b"sequencing error" in error[1]
    assert len(error) == 2  # what the SDK fails on (IndexError reading the info)


def test_an_error_proton_closes_with_gets_an_info_field() -> None:
    server = Server()
    server.open_sending_link()
    server.feed(frame(TransferFrame(handle=7, delivery_id=0, delivery_tag=b"x", payload=b"x"), payload=b"x"))
    error = server.closed_with()
    assert error is not None and error[0].startswith(b"amqp:") and error[2] == {}


def test_a_transfer_in_several_frames_keeps_one_renumbered_id() -> None:
    server = Server()
    server.open_sending_link(first_id=10)
    server.feed(transfer(11, b"b", b"whole"))
    server.feed(transfer(10, b"a", b"part 1, ", more=True))
    server.feed(transfer(None, b"a", b"part 2, ", more=True) + transfer(10, b"a", b"part 3"))
    assert server.closed_with() is None
    assert server.received == [b"whole", b"part 1, part 2, part 3"]
    assert server.settled_ids() == [11, 10]


def test_frames_cut_anywhere_reach_proton_whole_and_in_order() -> None:
    server = Server()
    stream = (AMQP_HEADER + frame(OpenFrame(container_id="sdk", hostname=None, max_frame_size=65536, channel_max=1,
                                            idle_timeout=None, outgoing_locales=None, incoming_locales=None,
                                            offered_capabilities=None, desired_capabilities=None,
                                            properties=None)))
    for i in range(0, len(stream), 3):
        server.feed(stream[i:i + 3])
    assert server.connection.state & server.connection.REMOTE_ACTIVE


def test_a_client_disposition_of_its_own_transfers_is_translated_to_protons_ids() -> None:
    mender = FrameMender()
    mender.inbound(AMQP_HEADER + frame(BeginFrame(remote_channel=None, next_outgoing_id=0, incoming_window=10,
                                                  outgoing_window=10, handle_max=None, offered_capabilities=None,
                                                  desired_capabilities=None, properties=None)))
    mender.inbound(transfer(1, b"b", b"x") + transfer(0, b"a", b"y"))  # proton counts on from the first: 1, 2
    out = mender.inbound(frame(DispositionFrame(role=False, first=0, last=1, settled=True, state=None,
                                                batchable=None)))
    assert [(f[1], f[2]) for _, f in frames_of(out)] == [(2, 2), (1, 1)]
    out = mender.inbound(frame(DispositionFrame(role=False, first=0, last=None, settled=True, state=None,
                                                batchable=None)))
    assert [(f[1], f[2]) for _, f in frames_of(out)] == [(2, 2)]


def test_bytes_that_are_no_amqp_pass_unchanged() -> None:
    mender = FrameMender()
    garbage = b"NOT AMQP\r\n" + bytes(range(256))
    assert mender.inbound(garbage[:20]) + mender.inbound(garbage[20:]) == garbage
