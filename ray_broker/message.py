"""Messages: what a sender builds (`Message`) and what a receiver gets (`ReceivedMessage`).

Validation happens at construction so that a bad value fails in the caller's own code, not deep
inside an actor. Between client and partitions a message travels as a plain dict (its wire form).
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Iterator, Mapping, Sequence

from . import codec
from .clock import MAX_DURATION_SECONDS, duration_seconds, to_datetime, to_epoch
from .errors import InvalidArgumentError, InvalidOperationError
from .protocol import MessageState

MAX_ID_LENGTH = 128
_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 63) - 1
_MIN_TTL_SECONDS = 1e-6
PROPERTY_TYPES = (str, bytes, int, float, bool, type(None), datetime, uuid.UUID, Decimal)

_HEADER_FIELDS = (
    "message_id",
    "session_id",
    "partition_key",
    "correlation_id",
    "subject",
    "to",
    "reply_to",
    "reply_to_session_id",
    "content_type",
)
_ID_FIELDS = ("message_id", "session_id", "partition_key")


def id_problem(name: str, value: str) -> str | None:
    """What makes `value` unfit as a message's `name` (a message id, session id or partition key):
    longer than `MAX_ID_LENGTH`, or an empty message id (an empty session id names the session "",
    and an empty partition key goes with it, as Service Bus takes them); None when it is fit."""
    if not value and name == "message_id":
        return f"{name} must not be empty; leave it None to have one given"
    if len(value) > MAX_ID_LENGTH:
        return f"{name} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
    return None


AmqpId = str | uuid.UUID | int | bytes
"""A message or correlation id as AMQP carries it: a string, uuid, ulong or binary."""


def id_text(value: AmqpId) -> str:
    """An AMQP message or correlation id as the broker keys, filters and shows it: a string as it
    is, a uuid in its hyphenated form, a ulong in decimal, binary as UTF-8 text (its hex digits
    when it is no UTF-8).

        id_text(uuid.UUID(int=1))  # '00000000-0000-0000-0000-000000000001'
        id_text(7)                 # '7'
    """
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    return str(value)


def key_conflict(session_id: Any, partition_key: Any) -> str | None:
    """Why a message's session id and partition key cannot go together (they differ), or None."""
    if session_id is not None and partition_key is not None and session_id != partition_key:
        return (f"partition_key {partition_key!r} differs from session_id {session_id!r}; "
                "on a session message the partition key must equal the session id or be left unset")
    return None


def _check_text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    _check_encodable(name, value)
    problem = id_problem(name, value) if name in _ID_FIELDS else None
    if problem:
        raise ValueError(problem)
    return value


def check_keys(session_id: Any, partition_key: Any) -> None:
    """Raise `InvalidOperationError` when a message's session id and partition key differ."""
    conflict = key_conflict(session_id, partition_key)
    if conflict:
        raise InvalidOperationError(conflict)


def _check_encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text ({exc.reason}); pass text that encodes as UTF-8") from None


def check_property(key: Any, value: Any) -> None:
    """Raise TypeError or ValueError if `key: value` cannot be an application property."""
    if not isinstance(key, str):
        raise TypeError(f"application_properties keys must be str, not {type(key).__name__} ({key!r})")
    _check_encodable("an application_properties key", key)
    if not isinstance(value, PROPERTY_TYPES):
        raise TypeError(
            f"application_properties[{key!r}] has type {type(value).__name__}; supported types are "
            "str, bytes, int, float, bool, None, datetime, uuid.UUID and decimal.Decimal"
        )
    if isinstance(value, int) and not isinstance(value, bool) and not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"application_properties[{key!r}] = {value} does not fit in a signed 64-bit integer")
    if isinstance(value, str):
        _check_encodable(f"application_properties[{key!r}]", value)
    if isinstance(value, Decimal):
        problem = decimal_problem(value)
        if problem:
            raise ValueError(f"application_properties[{key!r}]: {problem}")


DECIMAL_DIGITS = 34
DECIMAL_EXPONENTS = (-6176, 6111)


def decimal_problem(value: Decimal) -> str | None:
    """Why a decimal property cannot travel as an AMQP decimal128 (more than 34 digits, an exponent
    out of range, or not finite), or None."""
    if not value.is_finite():
        return f"{value} is not a finite decimal; AMQP properties carry finite decimals"
    _sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if len(digits) > DECIMAL_DIGITS:
        return f"{value} has {len(digits)} digits; at most {DECIMAL_DIGITS} (a decimal128) travel"
    low, high = DECIMAL_EXPONENTS
    if not low <= exponent <= high:
        return f"{value}'s exponent {exponent} is outside {low}..{high} (a decimal128's)"
    return None


def _check_ttl(value: Any) -> float | None:
    """A TTL in seconds: positive, at least a microsecond (timedelta's resolution), at most
    MAX_DURATION_SECONDS."""
    if value is None:
        return None
    seconds = duration_seconds(value)
    if seconds is None:
        raise TypeError(f"time_to_live must be a timedelta, not {type(value).__name__}")
    if not _MIN_TTL_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        raise ValueError(
            f"time_to_live must be from 1 microsecond to {MAX_DURATION_SECONDS / 86_400:.0f} days, got {value!r}; "
            "leave it None for the queue's default")
    return seconds


def schedule_time_epoch(value: Any, name: str = "scheduled_enqueue_time_utc") -> float:
    """A schedule time as epoch seconds: a datetime (naive means UTC) that can be placed in UTC."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    try:
        return to_epoch(value)
    except (OverflowError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{name} {value!r} cannot be placed in UTC ({exc}); pass a time between years 1 and 9999 UTC") from None


class MessageBody(bytes):
    """A message's body: `bytes` in every way but one, iterating it yields the body's data
    sections, as the SDK's `message.body` does, so SDK code such as `b"".join(message.body)`,
    `for section in message.body` or `next(message.body)` works unchanged. Index or slice it (or `bytes(body)`) for its
    bytes, which are its sections joined.

    A body has one section, unless an AMQP sender (through the namespace's AMQP front end) sent
    several, or none (a message without a body): `sections` gives their lengths then.

        body = MessageBody(b"hello")
        assert body == b"hello" and b"".join(body) == b"hello" and list(body) == [b"hello"]
        parts = MessageBody(b"aabbcc", sections=[2, 2, 2])
        assert parts == b"aabbcc" and list(parts) == [b"aa", b"bb", b"cc"]
    """

    def __new__(cls, data: bytes = b"", sections: Sequence[int] | None = None) -> MessageBody:
        body = super().__new__(cls, data)
        if sections is not None:
            lengths = tuple(int(n) for n in sections)
            if any(n < 0 for n in lengths) or sum(lengths) != len(body):
                raise ValueError(f"section lengths {list(lengths)} do not add up to the body's {len(body)} bytes")
            if len(lengths) != 1:
                body.__dict__["_sections"] = lengths
        return body

    def __reduce__(self) -> tuple[Any, ...]:
        return MessageBody, (bytes(self), self.__dict__.get("_sections"))

    @property
    def section_lengths(self) -> tuple[int, ...]:
        """The length of each data section, in order (one section, the whole body, unless an AMQP
        sender sent several or none)."""
        return self.__dict__.get("_sections", (len(self),))

    def __iter__(self) -> Iterator[bytes]:  # type: ignore[override]
        whole = bytes(self)
        start = 0
        for length in self.section_lengths:
            yield whole[start:start + length]
            start += length

    def __next__(self) -> bytes:
        """The next data section, as `next()` gives it from the SDK's body (a generator):
        `next(message.body)` is the first section, a second call the next one, `StopIteration`
        after the last. Iterating the body (`for`, `list`, `b"".join`) starts from the first
        section every time, whatever `next` took."""
        cursor = self.__dict__.get("_cursor")
        if cursor is None:
            cursor = self.__dict__["_cursor"] = iter(self)
        return next(cursor)  # type: ignore[no-any-return]


def _subject_or_label(subject: str | None, label: str | None) -> str | None:
    """The subject given as `subject=` or by the SDK's older name `label=` (both only if equal)."""
    if label is None:
        return subject
    if subject is not None and subject != label:
        raise ValueError(f"subject {subject!r} and label {label!r} differ; label is another name for subject: "
                         "give one of them")
    return label


class Message:
    """A message to send. Validated at construction; see ../API.md for the fields.

    `body` reads back as a `MessageBody` (bytes that iterate as their data sections, as in the
    SDK). `label=` and the `label` property are the SDK's older name for `subject`.
    """

    __slots__ = ("body", "application_properties", "time_to_live", "scheduled_enqueue_time_utc") + _HEADER_FIELDS

    def __init__(
        self,
        body: bytes | str,
        *,
        message_id: str | None = None,
        session_id: str | None = None,
        partition_key: str | None = None,
        correlation_id: str | None = None,
        subject: str | None = None,
        to: str | None = None,
        reply_to: str | None = None,
        reply_to_session_id: str | None = None,
        content_type: str | None = None,
        time_to_live: timedelta | None = None,
        scheduled_enqueue_time_utc: datetime | None = None,
        application_properties: Mapping[str, Any] | None = None,
        label: str | None = None,
    ) -> None:
        if isinstance(body, str):
            _check_encodable("body", body)
            body = body.encode("utf-8")
        elif isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
        self.body: bytes = MessageBody(body)
        self.message_id = _check_text("message_id", message_id)
        self.session_id = _check_text("session_id", session_id)
        self.partition_key = _check_text("partition_key", partition_key)
        self.correlation_id = _check_text("correlation_id", correlation_id)
        self.subject = _subject_or_label(_check_text("subject", subject), _check_text("label", label))
        self.to = _check_text("to", to)
        self.reply_to = _check_text("reply_to", reply_to)
        self.reply_to_session_id = _check_text("reply_to_session_id", reply_to_session_id)
        self.content_type = _check_text("content_type", content_type)
        check_keys(session_id, partition_key)
        self.time_to_live: timedelta | None = None
        if time_to_live is not None:
            ttl = _check_ttl(time_to_live)
            self.time_to_live = None if ttl is None else timedelta(seconds=ttl)
        if scheduled_enqueue_time_utc is not None:
            schedule_time_epoch(scheduled_enqueue_time_utc)
        self.scheduled_enqueue_time_utc = scheduled_enqueue_time_utc
        if application_properties is not None and not isinstance(application_properties, Mapping):
            raise TypeError(f"application_properties must be a mapping, not {type(application_properties).__name__}")
        props = dict(application_properties) if application_properties else {}
        for key, value in props.items():
            check_property(key, value)
        self.application_properties: dict[str, Any] = props

    @property
    def label(self) -> str | None:
        """The SDK's older name for `subject`."""
        return self.subject

    @label.setter
    def label(self, value: str | None) -> None:
        self.subject = value

    def __repr__(self) -> str:
        return f"Message(body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''}, message_id={self.message_id!r})"

    def __str__(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def to_wire(self) -> dict[str, Any]:
        """The message's fields as a plain dict (re-validated, since fields are mutable)."""
        wire: dict[str, Any] = {"body": self.body}
        for name in _HEADER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                wire[name] = _check_text(name, value)
        check_keys(wire.get("session_id"), wire.get("partition_key"))
        if self.application_properties:
            for key, value in self.application_properties.items():
                check_property(key, value)
            wire["application_properties"] = dict(self.application_properties)
        ttl = _check_ttl(self.time_to_live)
        if ttl is not None:
            wire["time_to_live"] = ttl
        if self.scheduled_enqueue_time_utc is not None:
            wire["scheduled_enqueue_time"] = schedule_time_epoch(self.scheduled_enqueue_time_utc)
        return wire

    def to_envelope(self) -> dict[str, Any]:
        """The message encoded once, in the form that travels to a partition (its envelope): a
        dict with `payload` (the encoded message, bytes, stored as it is), `size` (the payload's
        length, what batches and size limits count) and, where the message sets them, the keys
        `message_id`, `session_id` and `partition_key` that routing and duplicate detection read.
        Read it, never change it; `MessageBatch.add_envelope` takes it, and `encode_messages`
        makes many at once."""
        return envelope_from_wire(self.to_wire())


def _row_error(row: int, problem: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"row {row} does not make a valid message: {problem}")


def _check_id_column(name: str, values: Sequence[str | None], count: int) -> None:
    """Every value a str fit to be a message's `name`, or None (`id_problem`): checked a column
    at a time, and row by row only to name the row that is not."""
    if len(values) != count:
        raise InvalidArgumentError(f"{name}s has {len(values)} values for {count} bodies; give one per body (or None)")
    if set(map(type, values)) <= _ID_TYPES and max(map(len, filter(None, values)), default=0) <= MAX_ID_LENGTH \
            and (name != "message_id" or "" not in values):
        return
    for row, value in enumerate(values):
        if value is None:
            continue
        if not isinstance(value, str):
            raise _row_error(row, f"{name} must be a str or None, not {type(value).__name__}")
        problem = id_problem(name, value)
        if problem:
            raise _row_error(row, problem)


_ID_TYPES = {str, type(None)}


def encode_messages(bodies: Sequence[bytes | str], *, message_ids: Sequence[str | None] | None = None,
                    session_ids: Sequence[str | None] | None = None,
                    partition_keys: Sequence[str | None] | None = None, content_type: str | None = None,
                    application_properties: Sequence[Mapping[str, Any] | None] | None = None) -> list[dict[str, Any]]:
    """Encode many messages at once, given field by field, into envelopes (`Message.to_envelope`'s
    form) for `MessageBatch.add_envelope` and `partition_key_of`: for bulk writers, such as the
    Spark sink, that hold their messages as columns.

    Envelope i is, byte for byte, `Message(bodies[i], message_id=message_ids[i],
    session_id=session_ids[i], partition_key=partition_keys[i], content_type=content_type,
    application_properties=application_properties[i]).to_envelope()` (a field given as None, or
    None at row i, is left unset), checked as `Message` checks it, but without building `Message`
    objects: about a quarter of the cost per message (3.3 against 12.5 us for 1 KB with an id, a
    partition key and two properties). Each sequence has one value per body; `content_type` is
    every message's. A message without a message id is sent without one (`send_messages` and
    `add_message` give such a `Message` a new id; an envelope goes as it is). Raises
    `InvalidArgumentError` naming the first row that does not make a valid message (an id over
    128 characters, an empty message id, a partition key other than the session id, a property
    value of an unsupported type, ...).

    Example:
        envelopes = rb.encode_messages([b"a", b"b"], partition_keys=["c1", None])
        batch = sender.create_message_batch()
        for envelope in envelopes:
            batch.add_envelope(envelope)
        sender.send_messages(batch)
    """
    count = len(bodies)
    keys = [(name, values) for name, values in (("message_id", message_ids), ("session_id", session_ids),
                                                ("partition_key", partition_keys)) if values is not None]
    for name, values in keys:
        _check_id_column(name, values, count)
    if session_ids is not None and partition_keys is not None:
        for row, (session_id, partition_key) in enumerate(zip(session_ids, partition_keys)):
            conflict = key_conflict(session_id, partition_key)
            if conflict:
                raise _row_error(row, conflict)
    if content_type is not None:
        try:
            _check_text("content_type", content_type)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(str(exc)) from None
    if application_properties is not None and len(application_properties) != count:
        raise InvalidArgumentError(f"application_properties has {len(application_properties)} values for {count} "
                                   "bodies; give one per body (or None)")
    envelopes = []
    for row, body in enumerate(bodies):
        if type(body) is not bytes:
            body = _bulk_body(row, body)
        wire: dict[str, Any] = {"body": body}
        for name, values in keys:
            value = values[row]
            if value is not None:
                wire[name] = value
        if content_type is not None:
            wire["content_type"] = content_type
        if application_properties is not None:
            properties = application_properties[row]
            if properties:
                if type(properties) is not dict:
                    properties = _bulk_dict(row, properties)
                try:
                    for key, value in properties.items():
                        check_property(key, value)
                except (TypeError, ValueError) as exc:
                    raise _row_error(row, exc) from exc
                wire["application_properties"] = properties
        try:
            envelopes.append(envelope_from_wire(wire))
        except (TypeError, ValueError) as exc:  # text that is no UTF-8 (lone surrogates)
            raise _row_error(row, f"it cannot be encoded ({exc}); pass text that encodes as UTF-8") from None
    return envelopes


def _bulk_body(row: int, body: Any) -> bytes:
    """A body other than `bytes` as `Message` takes it: `str` as UTF-8, other bytes-like as bytes."""
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _row_error(row, f"body is not valid Unicode text ({exc.reason}); pass text that encodes as "
                                  "UTF-8") from None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise _row_error(row, f"body must be bytes or str, not {type(body).__name__}")


def _bulk_dict(row: int, properties: Any) -> dict[str, Any]:
    """A row's application properties given as a mapping other than a dict, as a dict."""
    if not isinstance(properties, Mapping):
        raise _row_error(row, f"application_properties must be a mapping, not {type(properties).__name__}")
    return dict(properties)


def envelope_from_wire(wire: Mapping[str, Any]) -> dict[str, Any]:
    """Encode a message's fields once; partitions store the payload as it is."""
    payload = codec.packb(wire)
    envelope: dict[str, Any] = {"payload": payload, "size": len(payload)}
    for name in _ID_FIELDS:
        if wire.get(name) is not None:
            envelope[name] = wire[name]
    if wire.get("time_to_live") is not None:
        envelope["ttl"] = wire["time_to_live"]
    if wire.get("scheduled_enqueue_time") is not None:
        envelope["scheduled"] = wire["scheduled_enqueue_time"]
    return envelope


class ReceivedMessage:
    """A message as a receiver sees it: every `Message` field plus the broker's own fields.

    Built once per received message, so only what every caller needs is decoded up front; the
    datetimes, the lock token's UUID and the properties are made on first access.
    """

    __slots__ = ("body", "sequence_number", "delivery_count", "dead_letter_reason", "dead_letter_error_description",
                 "dead_letter_source", "_wire", "_record", "_token", "_locked_until", "_locked_until_utc",
                 "_receiver_key", "_settled", "_properties") + _HEADER_FIELDS

    def __init__(self, record: Mapping[str, Any], *, receiver_key: str | None = None, peeked: bool = False) -> None:
        wire = codec.unpackb(record["payload"]) if "payload" in record else record
        self._wire: Mapping[str, Any] = wire
        self._record = record
        self.body: bytes = MessageBody(wire["body"], wire.get("body_sections"))
        for name in _HEADER_FIELDS:
            setattr(self, name, wire.get(name))
        self.sequence_number: int = record["sequence_number"]
        self.delivery_count: int = record.get("delivery_count", 0)
        # A message forwarded from a dead-letter queue carries where and why it was dead-lettered.
        self.dead_letter_reason: str | None = record.get("dead_letter_reason", wire.get("dead_letter_reason"))
        self.dead_letter_error_description: str | None = record.get(
            "dead_letter_error_description", wire.get("dead_letter_error_description"))
        self.dead_letter_source: str | None = record.get("dead_letter_source", wire.get("dead_letter_source"))
        token = None if peeked else record.get("lock_token")
        self._token: bytes | uuid.UUID | None = token
        self._locked_until: float | None = None if peeked else record.get("locked_until")
        self._locked_until_utc: datetime | None = None
        self._properties: dict[str, Any] | None = None
        self._receiver_key = receiver_key
        self._settled = peeked or token is None

    def _field(self, name: str) -> Any:
        """A field as the broker reported it, else as the sender set it."""
        value = self._record.get(name)
        return self._wire.get(name) if value is None else value

    @property
    def label(self) -> str | None:
        """The SDK's older name for `subject`."""
        return self.subject  # type: ignore[no-any-return]

    def amqp_id(self, name: str) -> AmqpId | None:
        """`message_id` or `correlation_id` (`name`) with the AMQP type its sender gave it: an AMQP
        sender may send a uuid, ulong or binary id, which the front end gives back as it came; the
        attribute itself is always the id's text (see `id_text`), as for every message this client
        sends."""
        text = getattr(self, name)
        typed = (self._wire.get("amqp_ids") or {}).get(name)
        return typed if typed is not None and id_text(typed) == text else text

    @property
    def amqp_parts(self) -> Mapping[str, Any]:
        """What an AMQP sender (through the namespace's AMQP front end) put in its message besides
        the broker's fields, kept for the front end to send on as it came: `priority`, `durable`,
        `creation_time` (ms since the epoch), `delivery_annotations` and `annotations` (the
        sender's own; encoded keys and values in turn), `footer` (the encoded section). Empty for
        a message this client sent."""
        return self._wire.get("amqp") or {}

    @property
    def body_kind(self) -> str:
        """How an AMQP sender (through the namespace's AMQP front end) encoded the body: "data"
        (the body is its bytes, as for every message sent by this client), or "value" or
        "sequence" (the body holds the encoded AMQP section, and goes out again as it came)."""
        return str(self._wire.get("body_kind", "data"))

    @property
    def application_properties(self) -> dict[str, Any]:
        """The sender's application properties."""
        if self._properties is None:
            self._properties = dict(self._wire.get("application_properties") or {})
        return self._properties

    @property
    def time_to_live(self) -> timedelta | None:
        """How long the message lives after it is enqueued (as the sender set it)."""
        ttl = self._wire.get("time_to_live")
        return None if ttl is None else timedelta(seconds=ttl)

    @property
    def scheduled_enqueue_time_utc(self) -> datetime | None:
        """When a scheduled message became (or becomes) available."""
        return to_datetime(self._field("scheduled_enqueue_time"))

    @property
    def enqueued_sequence_number(self) -> int:
        """The sequence number the message had when first enqueued."""
        return int(self._record.get("enqueued_sequence_number") or self.sequence_number)

    @property
    def enqueued_time_utc(self) -> datetime | None:
        """When the broker accepted the message."""
        return to_datetime(self._record.get("enqueued_time"))

    @property
    def expires_at_utc(self) -> datetime | None:
        """When the message expires (its time to live, or the entity's default, from enqueuing)."""
        return to_datetime(self._record.get("expires_at"))

    @property
    def state(self) -> MessageState:
        """Active, deferred or scheduled."""
        return MessageState(self._record.get("state", 0))

    @property
    def lock_token(self) -> uuid.UUID | None:
        """The token of the lock this receiver holds (None when peeked or received and deleted)."""
        token = self._token
        if isinstance(token, bytes):
            token = self._token = uuid.UUID(bytes=token)
        return token

    @property
    def lock_token_bytes(self) -> bytes | None:
        """The lock token as the broker takes it back."""
        token = self._token
        return token.bytes if isinstance(token, uuid.UUID) else token

    @property
    def locked_until_utc(self) -> datetime | None:
        """When this receiver's lock on the message ends (renewing moves it)."""
        if self._locked_until_utc is None and self._locked_until is not None:
            self._locked_until_utc = to_datetime(self._locked_until)
        return self._locked_until_utc

    @locked_until_utc.setter
    def locked_until_utc(self, value: datetime | None) -> None:
        self._locked_until_utc = value
        self._locked_until = None if value is None else value.timestamp()

    @property
    def locked_until(self) -> float | None:
        """`locked_until_utc` in epoch seconds."""
        return self._locked_until

    def bound_to(self, receiver_key: str) -> ReceivedMessage:
        """This message, unsettled and with its lock as it is now, as received by the receiver
        `receiver_key` (a lock token is its entity's: any receiver of the entity may settle it)."""
        copy = ReceivedMessage(self._record, receiver_key=receiver_key)
        copy._locked_until, copy._locked_until_utc = self._locked_until, self._locked_until_utc
        return copy

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(sequence_number={self.sequence_number}, message_id={self.message_id!r}, "
            f"delivery_count={self.delivery_count})"
        )

    def __str__(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    @property
    def partition_index(self) -> int:
        """The partition index encoded in the sequence number (0 on non-partitioned entities)."""
        return self.sequence_number >> 48
