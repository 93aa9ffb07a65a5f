"""AMQP messages as the azure-servicebus SDK encodes them, to broker messages and back again."""
from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import BatchMessage
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from azure.servicebus.amqp import AmqpAnnotatedMessage

from ray_broker import codec
from ray_broker.amqp.mapping import decode_transfer, delivery_tag, encode_received, lock_token_of_tag, split_sections
from ray_broker.errors import InvalidArgumentError
from ray_broker.message import ReceivedMessage


def sdk_payload(message: Any) -> bytes:
    """What the SDK puts in a transfer for one message."""
    raw = message.raw_amqp_message if isinstance(message, ServiceBusMessage) else message
    return bytes(encode_payload(bytearray(), PyamqpTransport.to_outgoing_amqp_message(raw)))


def fields(envelope: dict[str, Any]) -> dict[str, Any]:
    return codec.unpackb(envelope["payload"])  # type: ignore[no-any-return]


def received(wire: dict[str, Any], **record: Any) -> ReceivedMessage:
    """A broker message as a receiver gets it."""
    now = time.time()
    return ReceivedMessage({"payload": codec.packb(wire), "sequence_number": (3 << 48) + 7, "delivery_count": 1,
                            "lock_token": uuid.uuid4().bytes, "locked_until": now + 30, "enqueued_time": now,
                            **record})


def test_every_sdk_field_maps_to_the_broker_message() -> None:
    scheduled = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage(
        b"\x00body", message_id="m", session_id="s", correlation_id="c", content_type="application/json",
        subject="sub", to="to", reply_to="r", reply_to_session_id="rs", time_to_live=timedelta(seconds=90),
        scheduled_enqueue_time_utc=scheduled,
        application_properties={"i": 5, "s": "t", "f": 2.5, "b": False, "t": scheduled, "u": uuid.UUID(int=1)})))
    wire = fields(envelope)
    assert wire["body"] == b"\x00body"
    assert {k: wire[k] for k in ("message_id", "session_id", "correlation_id", "content_type", "subject", "to",
                                 "reply_to", "reply_to_session_id")} == {
        "message_id": "m", "session_id": "s", "correlation_id": "c", "content_type": "application/json",
        "subject": "sub", "to": "to", "reply_to": "r", "reply_to_session_id": "rs"}
    assert wire["time_to_live"] == 90
    assert wire["scheduled_enqueue_time"] == scheduled.timestamp() == envelope["scheduled"]
    assert wire["application_properties"] == {"i": 5, "s": "t", "f": 2.5, "b": False, "t": scheduled,
                                              "u": uuid.UUID(int=1)}
    assert (envelope["message_id"], envelope["session_id"]) == ("m", "s")
    assert "body_kind" not in wire


def test_the_partition_key_annotation_routes() -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("x", partition_key="customer-1")))
    assert envelope["partition_key"] == fields(envelope)["partition_key"] == "customer-1"


def test_a_batch_transfer_is_one_envelope_per_message() -> None:
    batch = ServiceBusMessageBatch(max_size_in_bytes=1 << 20)
    for i in range(3):
        batch.add_message(ServiceBusMessage(f"m{i}", message_id=f"id{i}"))
    payload = bytes(encode_payload(bytearray(), BatchMessage(*batch._message)))
    assert [(fields(e)["body"], e["message_id"]) for e in decode_transfer(payload)] == \
        [(b"m0", "id0"), (b"m1", "id1"), (b"m2", "id2")]


def test_a_data_body_that_looks_like_amqp_bytes_is_not_a_batch() -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("still served")))
    assert fields(envelope)["body"] == b"still served"


@pytest.mark.parametrize("message, kind", [
    (AmqpAnnotatedMessage(value_body={"k": [1, 2]}), "value"),
    (AmqpAnnotatedMessage(value_body={b"key": [-123, b"data", False]}), "value"),
    (AmqpAnnotatedMessage(sequence_body=[[1, "two"]]), "sequence"),
    (AmqpAnnotatedMessage(sequence_body=[[{b"binary key": 1}]]), "sequence"),
])
def test_value_and_sequence_bodies_go_out_as_they_came(message: AmqpAnnotatedMessage, kind: str) -> None:
    [envelope] = decode_transfer(sdk_payload(message))
    wire = fields(envelope)
    assert wire["body_kind"] == kind
    out = decode_payload(memoryview(encode_received(received(wire))))
    sent = decode_payload(memoryview(sdk_payload(message)))
    assert (out.value, out.sequence) == (sent.value, sent.sequence)


@pytest.mark.parametrize("payload", [b"GET / HTTP/1.1\r\n", b"\x00Sp", b"\x00\xa1\x03abc",
                                     sdk_payload(AmqpAnnotatedMessage(data_body=b"x",
                                                                      application_properties={"l": [1]}))])
def test_what_the_broker_cannot_keep_is_an_invalid_argument(payload: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        decode_transfer(payload)


def test_a_received_message_carries_what_the_sdk_reads() -> None:
    wire = {"body": b"hello", "message_id": "m", "partition_key": "k", "correlation_id": "c",
            "content_type": "text/plain", "time_to_live": 60.0, "application_properties": {"n": 1},
            "dead_letter_reason": "why", "dead_letter_error_description": "because"}
    message = received(wire, dead_letter_source="orders")
    out = decode_payload(memoryview(encode_received(message)))
    assert out.data == [b"hello"]
    assert out.header.delivery_count == 0 and out.header.durable is None and out.header.ttl == 60000
    assert (out.properties.message_id, out.properties.correlation_id, out.properties.content_type) == \
        (b"m", b"c", b"text/plain")
    assert out.application_properties == {b"n": 1, b"DeadLetterReason": b"why",
                                          b"DeadLetterErrorDescription": b"because"}
    annotations = out.message_annotations
    assert annotations[b"x-opt-sequence-number"] == message.sequence_number
    assert annotations[b"x-opt-partition-key"] == b"k"
    assert annotations[b"x-opt-locked-until"] == int(message.locked_until * 1000)
    assert annotations[b"x-opt-enqueued-time"] == int(message.enqueued_time_utc.timestamp() * 1000)
    assert annotations[b"x-opt-deadletter-source"] == b"orders"


def test_a_received_message_has_the_annotations_header_and_properties_service_bus_gives_it() -> None:
    sent = ServiceBusMessage("hello", message_id="m", partition_key="k", time_to_live=timedelta(seconds=30))
    [envelope] = decode_transfer(sdk_payload(sent))
    out = decode_payload(memoryview(encode_received(received(fields(envelope)))))
    assert set(out.message_annotations) == {b"x-opt-sequence-number", b"x-opt-enqueued-time", b"x-opt-locked-until",
                                            b"x-opt-partition-key"}
    assert out.header.durable is None, "as the sender left it"
    assert out.properties.creation_time == sent.raw_amqp_message.properties.creation_time
    raw = sent.raw_amqp_message
    raw.header.durable = False
    [envelope] = decode_transfer(sdk_payload(raw))
    moved = received(fields(envelope), state=1, enqueued_sequence_number=5)
    out = decode_payload(memoryview(encode_received(moved)))
    assert out.header.durable is False
    annotations = out.message_annotations
    assert (annotations[b"x-opt-message-state"], annotations[b"x-opt-enqueue-sequence-number"]) == (1, 5), \
        "a deferred message, first enqueued with another sequence number"


def test_a_peeked_message_has_no_lock_and_its_full_delivery_count() -> None:
    out = decode_payload(memoryview(encode_received(received({"body": b"x"}, delivery_count=2), peeked=True)))
    assert out.header.delivery_count == 2 and b"x-opt-locked-until" not in out.message_annotations


def test_a_message_sent_without_an_id_goes_out_with_one_from_its_sequence_number() -> None:
    message = received({"body": b"x"})
    ids = {decode_payload(memoryview(encode_received(message, peeked=peeked))).properties.message_id
           for peeked in (False, True)}
    assert ids == {uuid.UUID(int=(3 << 48) + 7).hex.encode()}  # the same on every delivery and peek
    assert message.message_id is None  # the broker's message is unchanged


def test_the_delivery_tag_is_the_lock_token_in_dotnet_byte_order() -> None:
    message = received({"body": b"x"})
    tag = delivery_tag(message)
    assert uuid.UUID(bytes_le=tag) == message.lock_token == lock_token_of_tag(tag)


def test_a_message_received_and_deleted_has_an_empty_delivery_tag() -> None:
    assert delivery_tag(received({"body": b"x"}, lock_token=None)) == b""


@pytest.mark.parametrize("sent, text", [
    (uuid.UUID(int=(1 << 100) + 5), str(uuid.UUID(int=(1 << 100) + 5))), (7, "7"), ((1 << 64) - 1, str((1 << 64) - 1)),
    (b"bin-id", "bin-id"), (b"\xff\x00", "ff00"), ("text-id", "text-id"),
], ids=["uuid", "ulong", "largest-ulong", "binary", "binary-not-utf8", "string"])
def test_message_and_correlation_ids_keep_their_amqp_type(sent: Any, text: str) -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("x", message_id=sent, correlation_id=sent)))
    wire = fields(envelope)
    assert envelope["message_id"] == wire["message_id"] == wire["correlation_id"] == text  # duplicate detection's key
    message = received(wire)
    assert message.message_id == message.correlation_id == text  # the Python client sees the text
    assert message.amqp_id("message_id") == message.amqp_id("correlation_id") == sent
    for peeked in (False, True):
        out = decode_payload(memoryview(encode_received(message, peeked=peeked))).properties
        expected = sent.encode() if isinstance(sent, str) else sent  # the SDK decodes a string id as bytes
        assert (out.message_id, out.correlation_id) == (expected, expected)
        assert type(out.message_id) is type(expected)
    [properties] = [s for s in split_sections(encode_received(message)) if s.code == 0x73]
    assert properties.raw[3] == 0xC0 and properties.raw[6] == {uuid.UUID: 0x98, int: 0x80, bytes: 0xA0, str: 0xA1}[
        type(sent)], "the id goes out with its AMQP type code"


def test_ulong_ids_go_out_as_ulong() -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("x", message_id=5)))
    [properties] = [s for s in split_sections(encode_received(received(fields(envelope)))) if s.code == 0x73]
    assert properties.raw[3] == 0xC0 and properties.raw[6:15] == b"\x80" + (5).to_bytes(8, "big")  # ulong, not long


def test_a_rule_action_that_sets_the_message_id_wins_over_its_amqp_type() -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("x", message_id=uuid.UUID(int=1))))
    wire = dict(fields(envelope), message_id="set-by-a-rule")
    assert received(wire).amqp_id("message_id") == "set-by-a-rule"


@pytest.mark.parametrize("data_body", [[b"aa", b"bb", b"cc"], [b"", b"x"], [b"one"], [b""]])
def test_data_sections_are_kept(data_body: list[bytes]) -> None:
    [envelope] = decode_transfer(sdk_payload(AmqpAnnotatedMessage(data_body=data_body)))
    wire = fields(envelope)
    message = received(wire)
    assert message.body == b"".join(data_body) and list(message.body) == data_body
    assert decode_payload(memoryview(encode_received(message))).data == data_body


def test_a_message_without_a_body_comes_back_without_one() -> None:
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage(None)))
    message = received(fields(envelope))
    assert message.body == b"" and list(message.body) == []
    out = decode_payload(memoryview(encode_received(message)))
    assert out.data is None and out.value is None and out.sequence is None
    assert not [s for s in split_sections(encode_received(message)) if s.code in (0x75, 0x76, 0x77)]


def test_delivery_annotations_carry_the_lock_token_of_a_locked_message_only() -> None:
    locked = received({"body": b"x"})
    out = decode_payload(memoryview(encode_received(locked)))
    assert out.delivery_annotations == {b"x-opt-lock-token": locked.lock_token}
    deleted = received({"body": b"x"}, lock_token=None)  # received and deleted: no lock
    assert decode_payload(memoryview(encode_received(deleted))).delivery_annotations == {}
    assert decode_payload(memoryview(encode_received(locked, peeked=True))).delivery_annotations is None


def test_decimal_application_properties_are_carried() -> None:
    from decimal import Decimal

    sent = {"price": Decimal("12.50"), "tiny": Decimal("-1E-20")}
    [envelope] = decode_transfer(sdk_payload(ServiceBusMessage("x", application_properties=sent)))
    wire = fields(envelope)
    assert wire["application_properties"] == sent
    message = received(wire)
    assert message.application_properties == sent
    out = decode_payload(memoryview(encode_received(message))).application_properties
    assert {k.decode(): (type(v), str(v)) for k, v in out.items()} == {"price": (Decimal, "12.50"),
                                                                       "tiny": (Decimal, "-1E-20")}


def test_the_senders_priority_annotations_delivery_annotations_and_footer_go_out_as_they_came() -> None:
    message = ServiceBusMessage("body", partition_key="k", scheduled_enqueue_time_utc=datetime(2030, 1, 1))
    raw = message.raw_amqp_message
    raw.annotations[b"annotations"] = 2
    raw.delivery_annotations = {b"delivery_annotations": 3}
    raw.header.priority = 5
    raw.footer = {b"footer": 6}
    [envelope] = decode_transfer(sdk_payload(message))
    locked = received(fields(envelope))
    out = decode_payload(memoryview(encode_received(locked)))
    assert out.header.priority == 5 and out.footer == {b"footer": 6}
    assert out.delivery_annotations == {b"x-opt-lock-token": locked.lock_token, b"delivery_annotations": 3}
    assert out.message_annotations[b"annotations"] == 2 and out.message_annotations[b"x-opt-partition-key"] == b"k"
    assert encode_received(locked).count(b"x-opt-partition-key") == 1  # the broker's, not the sender's too
    peeked = decode_payload(memoryview(encode_received(locked, peeked=True)))
    assert peeked.delivery_annotations == {b"delivery_annotations": 3}
    assert received({"body": b"x"}).amqp_parts == {}
