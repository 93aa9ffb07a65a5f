"""AMQP 1.0 messages to broker messages and back, as the Azure SDKs lay them out. Pure (no I/O, no Ray).

Inbound, one transfer holds one AMQP message, or a batch (the SDKs' message format 0x80013700:
data sections each holding one encoded message), which `decode_transfer` tells apart. The body
kind (data, value or sequence) is kept: a data body is the broker message's body; a value or
sequence body is kept as its encoded AMQP section(s) with `body_kind` in the message's fields, and
goes out again as the same section.

Outbound, a received message carries the annotations Service Bus sends (`x-opt-sequence-number`,
`x-opt-enqueued-time`, `x-opt-locked-until`, ...; `x-opt-message-state` only for a deferred or
scheduled message, `x-opt-enqueue-sequence-number` only for one whose sequence number changed
since it was first enqueued), its header and properties as the sender set them (durable, creation
time), its lock token travels as the delivery tag in .NET GUID byte order (the SDKs read
`uuid.UUID(bytes_le=tag)`) and as the delivery annotation `x-opt-lock-token` (an empty tag and an
empty delivery-annotations map for a message received and deleted), and the header's delivery
count is the number of earlier deliveries.

A data body keeps its sections (several, one, or none for a message without a body: the message's
`body_sections`), and a message or correlation id its AMQP type (uuid, ulong or binary: the
message's `amqp_ids`; the broker keys, filters and shows the id's text, `message.id_text`). A message sent without a message id goes out with one, as
Service Bus gives every message an id (the JavaScript SDK keys its lock renewals by it): the hex
form of its sequence number, the same on every delivery and peek.

Values are read with `decoding.py` and written with `encoding.py` (plain `struct` work, several
times cheaper per message than proton's `Data` and `Message` wrappers).

See ../shared/reference/servicebus-semantics.md, "Message properties", for the field map.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from proton import symbol, timestamp, ulong

from ..errors import InvalidArgumentError
from ..message import Message as BrokerMessage
from ..message import ReceivedMessage, envelope_from_wire, id_text
from ..protocol import ACTIVE
from .decoding import DescribedValue, Unkept, decode_value, encoded_items
from .encoding import NULL, described_section, encode_list, encode_uint, encode_value, encoded_map

PARTITION_KEY = symbol("x-opt-partition-key")
SCHEDULED_ENQUEUE_TIME = symbol("x-opt-scheduled-enqueue-time")
SEQUENCE_NUMBER = symbol("x-opt-sequence-number")
ENQUEUED_SEQUENCE_NUMBER = symbol("x-opt-enqueue-sequence-number")
ENQUEUED_TIME = symbol("x-opt-enqueued-time")
LOCKED_UNTIL = symbol("x-opt-locked-until")
DEAD_LETTER_SOURCE = symbol("x-opt-deadletter-source")
LOCK_TOKEN = symbol("x-opt-lock-token")
MESSAGE_STATE = symbol("x-opt-message-state")
DEAD_LETTER_REASON = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION = "DeadLetterErrorDescription"

_DATA, _SEQUENCE, _VALUE = 0x75, 0x76, 0x77
_BODY_KINDS = {_DATA: "data", _SEQUENCE: "sequence", _VALUE: "value"}
_SECTION_CODES = range(0x70, 0x79)


@dataclass(frozen=True)
class Section:
    """One section of an encoded AMQP message: its descriptor code, decoded value and raw bytes."""

    code: int
    value: Any
    raw: bytes


def split_sections(payload: bytes) -> list[Section]:
    """The sections of an encoded AMQP message, in order; `InvalidArgumentError` if `payload` is
    not a sequence of described AMQP sections."""
    sections = []
    data = bytes(payload)
    offset = 0
    while offset < len(data):
        try:
            section, end = decode_value(data, offset)
        except ValueError as exc:
            raise InvalidArgumentError(f"the transfer is not an AMQP message: {exc}") from None
        code = section.descriptor if isinstance(section, DescribedValue) else None
        if type(code) is not int or code not in _SECTION_CODES:
            raise InvalidArgumentError("the transfer is not an AMQP message: a section is not a described section")
        sections.append(Section(code, section.value, data[offset:end]))
        offset = end
    return sections


def _batch_messages(sections: list[Section]) -> list[list[Section]] | None:
    """The sections of each message of a batch transfer, or None if the transfer is no batch: a
    batch has data sections only (besides header, annotations and properties), each an encoded
    AMQP message."""
    bodies = [s for s in sections if s.code in _BODY_KINDS]
    if not bodies or any(s.code != _DATA for s in bodies):
        return None
    messages = []
    for body in bodies:
        try:
            inner = split_sections(body.value)
        except InvalidArgumentError:
            return None
        if not any(s.code in _BODY_KINDS for s in inner):
            return None
        messages.append(inner)
    return messages


def decode_transfer(payload: bytes) -> list[dict[str, Any]]:
    """The broker envelopes (see `ray_broker.message.envelope_from_wire`) of one transfer: one for
    a single message, one per message for a batch. `InvalidArgumentError` for a payload that is no
    AMQP message or a message the broker cannot hold (a property of a type it does not keep, a
    session id and partition key that differ)."""
    sections = split_sections(payload)
    batch = _batch_messages(sections)
    return [wire_envelope(sections)] if batch is None else [wire_envelope(inner) for inner in batch]


def wire_envelope(sections: list[Section]) -> dict[str, Any]:
    """The broker envelope of one AMQP message given as its sections."""
    return envelope_from_wire(message_fields(sections))


_PROPERTY_FIELDS = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
                    "reply_to_group_id")
_HEADER, _DELIVERY_ANNOTATIONS, _ANNOTATIONS, _PROPERTIES, _APPLICATION_PROPERTIES = 0x70, 0x71, 0x72, 0x73, 0x74
_FOOTER = 0x78
AMQP_ID_FIELDS = ("message_id", "correlation_id")
"""The properties that hold an AMQP id (string, uuid, ulong or binary), given back with its type."""


def _listed(sections: list[Section], code: int, names: tuple[str, ...]) -> dict[str, Any]:
    """A list-shaped section (header, properties) as a dict of its named fields."""
    section = next((s for s in sections if s.code == code), None)
    values = list(section.value or []) if section is not None else []
    return dict(zip(names, values + [None] * (len(names) - len(values))))


def _mapped(sections: list[Section], code: int) -> dict[Any, Any]:
    """A map-shaped section (annotations, application properties), or {}."""
    section = next((s for s in sections if s.code == code), None)
    return dict(section.value or {}) if section is not None else {}


def message_fields(sections: list[Section]) -> dict[str, Any]:
    """A broker message's fields (its wire form) from an AMQP message's sections."""
    header = _listed(sections, _HEADER, ("durable", "priority", "ttl", "first_acquirer", "delivery_count"))
    properties = _listed(sections, _PROPERTIES, _PROPERTY_FIELDS)
    annotations = _mapped(sections, _ANNOTATIONS)
    bodies = [s for s in sections if s.code in _BODY_KINDS]
    kinds = {_BODY_KINDS[s.code] for s in bodies}
    if len(kinds) > 1:
        raise InvalidArgumentError("an AMQP message has one kind of body section; this one mixes "
                                   + ", ".join(sorted(kinds)))
    kind = kinds.pop() if kinds else "data"
    body = b"".join(s.value for s in bodies) if kind == "data" else b"".join(s.raw for s in bodies)
    scheduled = annotations.get(SCHEDULED_ENQUEUE_TIME)
    ids = {name: properties[name] for name in AMQP_ID_FIELDS if properties[name] is not None}
    try:
        broker = BrokerMessage(
            body,
            message_id=_id(ids.get("message_id")),
            session_id=_text(properties["group_id"]),
            partition_key=_text(annotations.get(PARTITION_KEY)),
            correlation_id=_id(ids.get("correlation_id")),
            subject=_text(properties["subject"]),
            to=_text(properties["to"]),
            reply_to=_text(properties["reply_to"]),
            reply_to_session_id=_text(properties["reply_to_group_id"]),
            content_type=_text(properties["content_type"]),
            time_to_live=timedelta(milliseconds=int(header["ttl"])) if header["ttl"] else None,
            scheduled_enqueue_time_utc=None if scheduled is None else _from_timestamp(scheduled),
            application_properties={str(k): _property_in(k, v)
                                    for k, v in _mapped(sections, _APPLICATION_PROPERTIES).items()},
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"the message cannot be stored: {exc}") from None
    wire = broker.to_wire()
    if kind != "data":
        wire["body_kind"] = kind
    elif len(bodies) != 1:
        wire["body_sections"] = [len(s.value) for s in bodies]
    typed = {name: value for name, value in ids.items() if not isinstance(value, str)}
    if typed:
        wire["amqp_ids"] = typed
    kept = _kept_parts(sections, header, properties)
    if kept:
        wire["amqp"] = kept
    return wire


def _kept_parts(sections: list[Section], header: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """What a message carries besides the broker's fields, kept as it came for the front end to
    send on as Service Bus does: the header's priority and durable flag, the properties' creation
    time (ms since the epoch), the delivery annotations, the message annotations of the sender's
    own (not `x-opt-`, which Service Bus reserves) and the footer; maps as their encoded keys and
    values in turn."""
    kept: dict[str, Any] = {}
    if header["priority"] is not None:
        kept["priority"] = int(header["priority"])
    if header["durable"] is not None:
        kept["durable"] = bool(header["durable"])
    if properties["creation_time"] is not None:
        kept["creation_time"] = int(properties["creation_time"])
    for section in sections:
        if section.code == _DELIVERY_ANNOTATIONS and section.value:
            kept["delivery_annotations"] = _section_items(section)
        elif section.code == _ANNOTATIONS and section.value and not all(_is_reserved(k) for k in section.value):
            items = _section_items(section)
            own = [item for pair in zip(items[::2], items[1::2]) if not _reserved(pair[0]) for item in pair]
            if own:
                kept["annotations"] = own
        elif section.code == _FOOTER and section.value:
            kept["footer"] = section.raw
    return kept


def _section_items(section: Section) -> list[bytes]:
    """The encoded keys and values, in turn, of a map-shaped section."""
    _, offset = decode_value(section.raw, 1)  # past the descriptor
    return encoded_items(section.raw, offset)[0]


def _reserved(encoded_key: bytes) -> bool:
    """Whether an encoded annotation key is one Service Bus reserves (`x-opt-...`)."""
    return _is_reserved(decode_value(encoded_key)[0])


def _is_reserved(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("x-opt-")


def _id(value: Any) -> str | None:
    """A message or correlation id (uuid, ulong, binary or string on the wire) as the broker's text."""
    if value is None:
        return None
    if not isinstance(value, (str, bytes, int, uuid.UUID)) or isinstance(value, bool):
        raise InvalidArgumentError(f"a message or correlation id of type {type(value).__name__} is no AMQP id; "
                                   "send a string, uuid, ulong or binary id")
    return id_text(value)


def _text(value: Any) -> str | None:
    """An AMQP string, symbol or binary (as UTF-8) as text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _from_timestamp(value: Any) -> datetime:
    """An AMQP timestamp (ms since the epoch) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return datetime.fromtimestamp(int(value) / 1000, tz=timezone.utc)


def _property_in(key: Any, value: Any) -> Any:
    """An application property value as the broker keeps it."""
    if isinstance(value, timestamp):
        return _from_timestamp(value)
    if isinstance(value, str):
        return str(value)  # symbol and char are str subclasses
    if isinstance(value, bool) or value is None or isinstance(value, (bytes, uuid.UUID, Decimal)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    kind = value.amqp_type if isinstance(value, Unkept) else type(value).__name__
    raise InvalidArgumentError(f"application property {key!r} has AMQP type {kind}, which the broker "
                               "does not keep; use a string, number, decimal, boolean, binary, uuid or timestamp")


def delivery_tag(message: ReceivedMessage) -> bytes:
    """The delivery tag of a message: its lock token in .NET GUID byte order when it is locked;
    empty when it is not (received and deleted, its delivery settled), as Service Bus sends it."""
    token = message.lock_token
    return token.bytes_le if token is not None else b""


def lock_token_of_tag(tag: bytes) -> uuid.UUID:
    """The lock token a delivery tag carries."""
    return uuid.UUID(bytes_le=bytes(tag))


def message_id_of(message: ReceivedMessage) -> Any:
    """The message id a received message goes out with: its own (with the AMQP type its sender
    gave it), or one made from its sequence number.

    Example:
        message_id_of(message_without_an_id_at_sequence_number_7)  # '00000000000000000000000000000007'
    """
    if message.message_id is not None:
        return _id_out(message.amqp_id("message_id"))
    return uuid.UUID(int=message.sequence_number).hex


def _id_out(value: Any) -> Any:
    """An id as it is encoded: a ulong id stays a ulong (a Python int goes out as a long)."""
    return ulong(value) if isinstance(value, int) else value


def encode_received(message: ReceivedMessage, *, peeked: bool = False) -> bytes:
    """A received (or peeked) broker message as an encoded AMQP message with the annotations the
    SDKs read."""
    count = message.delivery_count if peeked else max(0, message.delivery_count - 1)
    annotations: dict[symbol, Any] = {SEQUENCE_NUMBER: message.sequence_number}
    if message.enqueued_sequence_number != message.sequence_number:
        annotations[ENQUEUED_SEQUENCE_NUMBER] = message.enqueued_sequence_number
    if message.state != ACTIVE:
        annotations[MESSAGE_STATE] = int(message.state)
    enqueued = message.enqueued_time_utc
    if enqueued is not None:
        annotations[ENQUEUED_TIME] = enqueued
    if not peeked and message.locked_until is not None:
        annotations[LOCKED_UNTIL] = timestamp(int(message.locked_until * 1000))
    if message.partition_key is not None:
        annotations[PARTITION_KEY] = message.partition_key
    if message.scheduled_enqueue_time_utc is not None:
        annotations[SCHEDULED_ENQUEUE_TIME] = message.scheduled_enqueue_time_utc
    if message.dead_letter_source is not None:
        annotations[DEAD_LETTER_SOURCE] = message.dead_letter_source
    kept = message.amqp_parts
    sections = [_header(count, message.time_to_live, kept.get("priority"), kept.get("durable"))]
    delivery = [] if peeked else _items(_delivery_annotations(message))
    delivery += kept.get("delivery_annotations", [])
    if delivery or not peeked:
        sections.append(described_section(_DELIVERY_ANNOTATIONS, encoded_map(delivery)))
    sections.append(described_section(_ANNOTATIONS, encoded_map(_items(annotations) + kept.get("annotations", []))))
    properties = _properties_out(message, kept.get("creation_time"))
    if properties:
        sections.append(described_section(_PROPERTIES, encode_list(properties)))
    application = dict(message.application_properties)
    if message.dead_letter_reason is not None:
        application[DEAD_LETTER_REASON] = message.dead_letter_reason
    if message.dead_letter_error_description is not None:
        application[DEAD_LETTER_DESCRIPTION] = message.dead_letter_error_description
    if application:
        sections.append(described_section(_APPLICATION_PROPERTIES, encoded_map(_items(application))))
    if message.body_kind == "data":
        sections.extend(described_section(_DATA, encode_value(section)) for section in message.body)
    else:
        sections.append(bytes(message.body))
    if "footer" in kept:
        sections.append(kept["footer"])
    return b"".join(sections)


def _items(entries: dict[Any, Any]) -> list[bytes]:
    """A map's keys and values, each encoded, in turn."""
    return [encode_value(item) for pair in entries.items() for item in pair]


def _delivery_annotations(message: ReceivedMessage) -> dict[symbol, Any]:
    """The delivery annotations of a delivered message, as Service Bus sends them: its lock token
    (`x-opt-lock-token`, besides the delivery tag) when it is locked, else none (an empty map)."""
    return {} if message.lock_token is None else {LOCK_TOKEN: message.lock_token}


def _properties_out(message: ReceivedMessage, creation_time: int | None) -> list[Any]:
    """The fields of a message's properties section (with the sender's `creation_time`, ms since
    the epoch), without the trailing empty ones. With the sender's creation time, the expiry is
    restated from it, the message's lifetime kept (the SDKs read a time to live as the expiry
    less the creation time)."""
    expires = message.expires_at_utc
    enqueued = message.enqueued_time_utc
    if creation_time is not None and expires is not None and expires.year < 9999 and enqueued is not None:
        expires = datetime.fromtimestamp(creation_time / 1000, timezone.utc) + (expires - enqueued)
    fields = [message_id_of(message), None, message.to, message.subject, message.reply_to,
              _id_out(message.amqp_id("correlation_id")),
              None if message.content_type is None else symbol(message.content_type), None,
              expires if expires is not None and expires.year < 9999 else None,
              None if creation_time is None else timestamp(creation_time), message.session_id, None,
              message.reply_to_session_id]
    while fields and fields[-1] is None:
        fields.pop()
    return fields


def _header(delivery_count: int, ttl: timedelta | None, priority: int | None = None,
            durable: bool | None = None) -> bytes:
    """An encoded header section that always carries its delivery count (the SDKs report none
    when it is left out): the sender's durable flag and priority (unset when it set none, as
    Service Bus sends them), the time to live in milliseconds, the count."""
    ttl_ms = NULL if ttl is None else encode_uint(min(int(ttl.total_seconds() * 1000), 0xFFFFFFFF))
    priority_field = NULL if priority is None else bytes((0x50, priority & 0xFF))
    durable_field = NULL if durable is None else (b"\x41" if durable else b"\x42")
    fields = durable_field + priority_field + ttl_ms + NULL + encode_uint(delivery_count)
    return described_section(_HEADER, b"\xc0" + bytes((len(fields) + 1, 5)) + fields)
