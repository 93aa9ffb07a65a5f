"""The message model: validation at construction, the wire form, and the msgpack codec."""
from __future__ import annotations

import uuid
from typing import Any
from datetime import datetime, timedelta, timezone, tzinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_broker import Message, MessageBody, ReceivedMessage, codec
from ray_broker.clock import to_datetime
from ray_broker.errors import InvalidArgumentError, InvalidOperationError


def test_bodies_are_bytes_or_str() -> None:
    assert Message(b"\x00\xff").body == b"\x00\xff"
    assert Message("grüße").body == "grüße".encode()
    assert Message(bytearray(b"ab")).body == b"ab"
    for bad in (123, None, ["a"], {"a": 1}):
        with pytest.raises(TypeError, match="body"):
            Message(bad)  # type: ignore[arg-type]


def test_a_body_is_bytes_that_iterate_as_their_one_data_section_as_in_the_sdk() -> None:
    sent = Message("grüße")
    received = ReceivedMessage({"payload": codec.packb(sent.to_wire()), "sequence_number": 1})
    for body in (sent.body, received.body):
        assert isinstance(body, bytes) and body == "grüße".encode() and len(body) == 7
        assert b"".join(body) == "grüße".encode()           # the SDK idiom for a body's sections
        assert list(body) == ["grüße".encode()] and type(next(iter(body))) is bytes
        assert body.decode() == "grüße" and body[:2] == b"gr" and bytes(body) == "grüße".encode()
    assert str(received) == "grüße"
    assert codec.unpackb(codec.packb({"b": received.body})) == {"b": "grüße".encode()}


def test_a_body_of_several_sections_or_none_iterates_as_them_and_pickles() -> None:
    import pickle

    for lengths, sections in (([2, 2, 2], [b"aa", b"bb", b"cc"]), ([], []), (None, [b"aabbcc"[:0]])):
        data = b"".join(sections)
        body = MessageBody(data, lengths)
        assert body == data and list(body) == sections and list(body) == sections  # iterates more than once
        again = pickle.loads(pickle.dumps(body))
        assert type(again) is MessageBody and list(again) == sections
    received = ReceivedMessage({"payload": codec.packb({"body": b"aabb", "body_sections": [2, 2]}), "sequence_number": 1})
    assert received.body == b"aabb" and list(received.body) == [b"aa", b"bb"]
    with pytest.raises(ValueError, match="do not add up"):
        MessageBody(b"abc", [1, 1])


def test_next_gives_a_bodys_sections_one_by_one_as_from_the_sdks_generator() -> None:
    sent = Message("hello")
    received = ReceivedMessage({"payload": codec.packb(sent.to_wire()), "sequence_number": 1})
    for body in (sent.body, received.body):
        assert next(body) == b"hello" and type(next(MessageBody(b"x"))) is bytes
        with pytest.raises(StopIteration):
            next(body)
        assert list(body) == [b"hello"] and b"".join(body) == b"hello" and len(body) == 5  # iterating starts over
    parts = MessageBody(b"aabb", [2, 2])
    assert (next(parts), next(parts)) == (b"aa", b"bb")


def test_label_is_the_sdks_older_name_for_subject() -> None:
    message = Message("x", label="eu")
    assert (message.subject, message.label) == ("eu", "eu")
    message.label = "us"
    assert message.subject == "us" and message.to_wire()["subject"] == "us"
    assert Message("x", subject="eu", label="eu").subject == "eu"
    with pytest.raises(ValueError, match="label is another name for subject"):
        Message("x", subject="eu", label="us")
    with pytest.raises(TypeError, match="label"):
        Message("x", label=3)  # type: ignore[arg-type]
    received = ReceivedMessage({"payload": codec.packb(Message("x", label="eu").to_wire()), "sequence_number": 1})
    assert (received.subject, received.label) == ("eu", "eu")


def test_a_body_that_is_not_valid_unicode_is_refused() -> None:
    with pytest.raises(ValueError, match="body"):
        Message("\ud800")


@pytest.mark.parametrize("field", ["message_id", "session_id", "partition_key"])
def test_ids_are_at_most_128_characters_and_a_message_id_is_not_empty(field: str) -> None:
    assert getattr(Message("x", **{field: "i" * 128}), field) == "i" * 128
    with pytest.raises(ValueError, match="128"):
        Message("x", **{field: "i" * 129})
    if field == "message_id":
        with pytest.raises(ValueError, match="empty"):
            Message("x", **{field: ""})
    else:  # the session "" (and its partition key), as Service Bus takes it
        assert getattr(Message("x", session_id="", partition_key=""), field) == ""
    with pytest.raises(TypeError):
        Message("x", **{field: 5})


def test_partition_key_must_equal_session_id() -> None:
    assert Message("x", session_id="s", partition_key="s").partition_key == "s"
    with pytest.raises(InvalidOperationError, match="partition_key"):
        Message("x", session_id="s", partition_key="p")


def test_a_mismatch_set_after_construction_is_caught_on_send() -> None:
    msg = Message("x", session_id="s")
    msg.partition_key = "p"
    with pytest.raises(InvalidOperationError):
        msg.to_envelope()


@pytest.mark.parametrize("value", [
    "s", b"b", 0, -(1 << 63), (1 << 63) - 1, 1.5, True, None,
    datetime(2024, 1, 1, 12, 0), datetime(2024, 1, 1, tzinfo=timezone.utc), uuid.UUID(int=7),
])
def test_supported_property_types_are_accepted(value: object) -> None:
    assert Message("x", application_properties={"k": value}).application_properties == {"k": value}


@pytest.mark.parametrize("value", [[1], {"a": 1}, {1, 2}, object(), timedelta(seconds=1), 1j])
def test_unsupported_property_types_are_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="application_properties"):
        Message("x", application_properties={"k": value})


@pytest.mark.parametrize("value", [1 << 63, -(1 << 63) - 1])
def test_out_of_range_ints_are_a_value_error(value: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        Message("x", application_properties={"k": value})


def test_property_keys_must_be_str() -> None:
    with pytest.raises(TypeError, match="keys"):
        Message("x", application_properties={1: "v"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="mapping"):
        Message("x", application_properties=[("k", "v")])  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1), 1e-7, timedelta.max, 1e20, float("inf"), 10**400])
def test_time_to_live_must_be_in_range(ttl: Any) -> None:
    with pytest.raises(ValueError, match="time_to_live"):
        Message("x", time_to_live=ttl)


def test_time_to_live_must_be_a_duration() -> None:
    with pytest.raises(TypeError, match="time_to_live"):
        Message("x", time_to_live="10s")  # type: ignore[arg-type]
    assert Message("x", time_to_live=timedelta(seconds=90)).time_to_live == timedelta(seconds=90)


def test_the_longest_time_to_live_never_expires_in_datetime_terms() -> None:
    longest = timedelta(days=10_675_199)
    assert Message("x", time_to_live=longest).to_wire()["time_to_live"] == longest.total_seconds()
    assert to_datetime(1_700_000_000 + longest.total_seconds()) == datetime.max.replace(tzinfo=timezone.utc)
    assert to_datetime(-1e15) == datetime.min.replace(tzinfo=timezone.utc)


def test_a_time_to_live_changed_after_construction_is_checked_on_send() -> None:
    message = Message("x")
    message.time_to_live = timedelta(0)
    with pytest.raises(ValueError, match="time_to_live"):
        message.to_wire()


class _BrokenZone(tzinfo):
    """A time zone whose offset datetime cannot use."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=25)


def test_a_schedule_time_that_cannot_be_placed_in_utc_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="scheduled_enqueue_time_utc"):
        Message("x", scheduled_enqueue_time_utc=datetime(2030, 1, 1, tzinfo=_BrokenZone()))


def test_schedule_times_at_the_ends_of_datetime_are_taken_or_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="between years 1 and 9999"):
        Message("x", scheduled_enqueue_time_utc=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))))
    earliest = Message("x", scheduled_enqueue_time_utc=datetime.min).to_wire()["scheduled_enqueue_time"]
    assert to_datetime(earliest) == datetime.min.replace(tzinfo=timezone.utc)
    latest = Message("x", scheduled_enqueue_time_utc=datetime.max).to_wire()["scheduled_enqueue_time"]
    assert to_datetime(latest).year == 9999


def test_scheduled_time_must_be_a_datetime() -> None:
    with pytest.raises(TypeError, match="scheduled_enqueue_time_utc"):
        Message("x", scheduled_enqueue_time_utc=1_700_000_000)  # type: ignore[arg-type]


def test_envelope_carries_routing_fields() -> None:
    when = datetime(2030, 1, 1, tzinfo=timezone.utc)
    envelope = Message("x", message_id="m", session_id="s", time_to_live=timedelta(seconds=5),
                       scheduled_enqueue_time_utc=when).to_envelope()
    assert envelope["size"] == len(envelope["payload"])
    assert (envelope["message_id"], envelope["session_id"], envelope["ttl"], envelope["scheduled"]) == (
        "m", "s", 5.0, when.timestamp())
    assert "partition_key" not in envelope


def test_a_naive_scheduled_time_is_taken_as_utc() -> None:
    envelope = Message("x", scheduled_enqueue_time_utc=datetime(2030, 1, 1)).to_envelope()
    assert envelope["scheduled"] == datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()


def test_received_message_round_trips_the_sent_message() -> None:
    props = {"when": datetime(2024, 5, 6, 7, 8, 9, 123456), "id": uuid.uuid4(), "n": -3}
    envelope = Message("hi", message_id="m", application_properties=props).to_envelope()
    record = {"payload": envelope["payload"], "sequence_number": (2 << 48) | 9, "enqueued_time": 1.0,
              "delivery_count": 1, "state": 0, "lock_token": b"\x01" * 16, "locked_until": 61.0}
    got = ReceivedMessage(record, receiver_key="r")
    assert (got.body, got.message_id, got.application_properties) == (b"hi", "m", props)
    assert got.partition_index == 2
    assert got.lock_token == uuid.UUID(bytes=b"\x01" * 16)
    assert got.locked_until_utc == datetime.fromtimestamp(61.0, tz=timezone.utc)
    peeked = ReceivedMessage(record, peeked=True)
    assert peeked.lock_token is None and peeked.locked_until_utc is None


@pytest.mark.parametrize("value", [
    datetime(2024, 2, 29, 23, 59, 59, 999999),
    datetime(2024, 2, 29, 23, 59, 59, tzinfo=timezone.utc),
    datetime(2024, 2, 29, 12, 0, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
])
def test_codec_round_trips_naive_and_aware_datetimes(value: datetime) -> None:
    back = codec.unpackb(codec.packb({"t": value}))["t"]
    assert back == value
    assert back.tzinfo == value.tzinfo


def test_codec_round_trips_uuids_and_nested_values() -> None:
    value = {"u": uuid.UUID("12345678-1234-5678-1234-567812345678"), "l": [1, b"b", None, {"x": 1.5}]}
    assert codec.unpackb(codec.packb(value)) == value


def test_codec_refuses_unknown_types() -> None:
    with pytest.raises(TypeError, match="set"):
        codec.packb({1, 2})


@given(st.dictionaries(st.text(), st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=False),
    st.text(), st.binary(), st.uuids(), st.datetimes(), st.datetimes(timezones=st.just(timezone.utc)))))
def test_any_valid_application_properties_survive_the_wire(props: dict[str, object]) -> None:
    envelope = Message("x", application_properties=props).to_envelope()
    record = {"payload": envelope["payload"], "sequence_number": 1}
    assert ReceivedMessage(record).application_properties == props


def test_decimal_properties_travel_when_a_decimal128_holds_them() -> None:
    from decimal import Decimal

    props = {"price": Decimal("19.99"), "big": Decimal("1234567890123456789012345678901234")}
    sent = Message("x", application_properties=props)
    got = ReceivedMessage({"payload": codec.packb(sent.to_wire()), "sequence_number": 1})
    assert got.application_properties == props and type(got.application_properties["price"]) is Decimal
    for bad, why in ((Decimal("NaN"), "not a finite decimal"), (Decimal("Infinity"), "not a finite decimal"),
                     (Decimal("1" * 35), "35 digits"), (Decimal("1E+7000"), "exponent 7000")):
        with pytest.raises(ValueError, match=why):
            Message("x", application_properties={"d": bad})
