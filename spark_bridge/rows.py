"""Columns to messages and messages to columns, on Arrow tables; imports neither Spark nor Ray.

Writing: a `WriteSpec` names the columns that hold a message's body, keys and properties; it is
checked against a table's column kinds before any row is sent, then turns an Arrow table into
encoded messages (envelopes). Reading: `table_from_messages` turns received messages into the Arrow table
of API.md's read columns (`READ_SCHEMA`).
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

import ray_broker as rb
from ray_broker.errors import InvalidArgumentError

JSON_CONTENT_TYPE = "application/json"
"""The `content_type` of a message whose body was a struct, map or array column."""

BINARY, STRING, JSON, MAP, SCALAR, NULL, OTHER = "binary", "string", "json", "map", "scalar", "null", "other"
"""Column kinds: what a column may be used for. `MAP` is also sent as JSON when it is the body."""

_BODY_KINDS = (BINARY, STRING, JSON, MAP)
_KEY_KINDS = (STRING, SCALAR, NULL)
_PROPERTY_KINDS = (BINARY, STRING, SCALAR, NULL)
KEY_FIELDS = ("partition_key", "session_id", "message_id")
"""The message fields a `WriteSpec` may fill from columns, besides the body and properties."""

READ_SCHEMA = pa.schema([
    pa.field("body", pa.binary()),
    pa.field("message_id", pa.string()),
    pa.field("session_id", pa.string()),
    pa.field("partition_key", pa.string()),
    pa.field("correlation_id", pa.string()),
    pa.field("subject", pa.string()),
    pa.field("content_type", pa.string()),
    pa.field("to", pa.string()),
    pa.field("reply_to", pa.string()),
    pa.field("sequence_number", pa.int64()),
    pa.field("partition", pa.int32()),
    pa.field("enqueued_time_utc", pa.timestamp("us", tz="UTC")),
    pa.field("delivery_count", pa.int32()),
    pa.field("application_properties", pa.map_(pa.string(), pa.string())),
])
"""The columns of a DataFrame or Dataset read from an entity: one row a message."""

_TEXT_COLUMNS = ("message_id", "session_id", "partition_key", "correlation_id", "subject", "content_type", "to",
                 "reply_to")


def arrow_kind(data_type: pa.DataType) -> str:
    """The kind of an Arrow column type."""
    types = pa.types
    if types.is_binary(data_type) or types.is_large_binary(data_type) or types.is_fixed_size_binary(data_type):
        return BINARY
    if types.is_string(data_type) or types.is_large_string(data_type):
        return STRING
    if types.is_map(data_type):
        return MAP
    if types.is_struct(data_type) or types.is_list(data_type) or types.is_large_list(data_type) \
            or types.is_fixed_size_list(data_type):
        return JSON
    if types.is_null(data_type):
        return NULL
    if types.is_integer(data_type) or types.is_floating(data_type) or types.is_boolean(data_type) \
            or types.is_timestamp(data_type) or types.is_date(data_type) or types.is_decimal(data_type):
        return SCALAR
    return OTHER


def arrow_kinds(schema: pa.Schema) -> dict[str, str]:
    """Each column's kind, by name."""
    return {f.name: arrow_kind(f.type) for f in schema}


@dataclass(frozen=True)
class WriteSpec:
    """Which columns make a message.

    Args:
        body: the body column: binary, string, or a struct/map/array column (sent as JSON).
        partition_key: the column of partition keys (None: no partition keys).
        session_id: the column of session ids.
        message_id: the column of message ids.
        properties: a list of columns copied into `application_properties` (by column name), or the
            name of one map column whose entries are the properties.
    """

    body: str = "body"
    partition_key: str | None = None
    session_id: str | None = None
    message_id: str | None = None
    properties: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        for name in ("body",) + KEY_FIELDS:
            value = getattr(self, name)
            if (value is not None or name == "body") and (not isinstance(value, str) or not value):
                raise InvalidArgumentError(f"{name} must name a column (a non-empty str), got {value!r}")
        props = self.properties
        if props is not None and not isinstance(props, str):
            if not isinstance(props, Sequence) or not all(isinstance(p, str) and p for p in props):
                raise InvalidArgumentError(
                    f"properties must be a list of column names or the name of one map column, got {props!r}")
            object.__setattr__(self, "properties", tuple(props))

    def validate(self, kinds: Mapping[str, str], what: str) -> None:
        """Check the columns against a table's column kinds (`what` names the table in errors).

        Raises `InvalidArgumentError` for a missing column or a column of a kind it cannot be used as.
        """
        available = ", ".join(sorted(kinds)) or "none"

        def kind_of(role: str, column: str) -> str:
            if column not in kinds:
                raise InvalidArgumentError(
                    f"{role} column {column!r} is not in {what} (its columns: {available}); "
                    f"name an existing column")
            return kinds[column]

        body_kind = kind_of("the body", self.body)
        if body_kind not in _BODY_KINDS:
            raise InvalidArgumentError(
                f"the body column {self.body!r} has an unsupported type; a body must be a binary or string "
                "column, or a struct, map or array column (sent as JSON): cast it first")
        for name in KEY_FIELDS:
            column = getattr(self, name)
            if column is not None and kind_of(f"the {name}", column) not in _KEY_KINDS:
                raise InvalidArgumentError(
                    f"the {name} column {column!r} must hold strings (or numbers, dates or booleans, sent as text)")
        if isinstance(self.properties, str):
            if kind_of("the properties", self.properties) != MAP:
                raise InvalidArgumentError(
                    f"properties={self.properties!r} names one column, so it must be a map column; pass a list "
                    "to copy several columns")
        else:
            for column in self.properties or ():
                if kind_of("a property", column) not in _PROPERTY_KINDS:
                    raise InvalidArgumentError(
                        f"the property column {column!r} must hold strings, bytes, numbers, booleans, dates or "
                        "timestamps; nested values are not application properties")

    def columns(self) -> list[str]:
        """Every column the spec reads, each once."""
        names = [self.body, *(getattr(self, n) for n in KEY_FIELDS)]
        names += [self.properties] if isinstance(self.properties, str) else list(self.properties or ())
        return list(dict.fromkeys(n for n in names if n is not None))

    def envelopes(self, table: pa.Table) -> list[dict[str, Any]]:
        """The rows as encoded messages, in row order (validate the table's kinds first).

        A row's envelope is what sending `Message(body, partition_key=..., ...)` of its values would
        send (`Message.to_envelope`), encoded straight from the columns by `rb.encode_messages`
        without building `Message`s: per row, that is most of a write task's work. Raises
        `InvalidArgumentError` naming the first row that does not make a valid message.
        """
        table = table.select(self.columns())
        keys = {name: _texts(table.column(column)) if (column := getattr(self, name)) is not None else None
                for name in KEY_FIELDS}
        content_type = JSON_CONTENT_TYPE if arrow_kind(table.schema.field(self.body).type) in (JSON, MAP) else None
        return rb.encode_messages(_bodies(table.column(self.body)), message_ids=keys["message_id"],
                                  session_ids=keys["session_id"], partition_keys=keys["partition_key"],
                                  content_type=content_type,
                                  application_properties=_properties(table, self.properties))


def _bodies(column: pa.ChunkedArray) -> list[bytes]:
    kind = arrow_kind(column.type)
    if kind == BINARY:
        return [b"" if v is None else v for v in column.to_pylist()]
    if kind == STRING:
        return [b"" if v is None else v.encode("utf-8") for v in column.to_pylist()]
    return [json.dumps(_jsonable(v, column.type), separators=(",", ":"), default=_json_default).encode("utf-8")
            for v in column.to_pylist()]


def _jsonable(value: Any, data_type: pa.DataType) -> Any:
    """A value as Arrow's `to_pylist` gives it, with maps made into JSON objects."""
    if value is None:
        return None
    if pa.types.is_map(data_type):
        return {str(k): _jsonable(v, data_type.item_type) for k, v in value}
    if pa.types.is_struct(data_type):
        return {f.name: _jsonable(value[f.name], f.type) for f in data_type}
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        return [_jsonable(v, data_type.value_type) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} values cannot be sent as JSON")


def _texts(column: pa.ChunkedArray) -> list[str | None]:
    """Key values as text; a null (or empty) key is no key."""
    return [None if v is None or v == "" else v if isinstance(v, str) else _scalar_text(v)
            for v in column.to_pylist()]


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)


def _property_value(value: Any) -> Any:
    """A column value as an application property (dates and decimals as text)."""
    if isinstance(value, dt.datetime) or not isinstance(value, (dt.date, decimal.Decimal)):
        return value
    return _scalar_text(value)


def _properties(table: pa.Table, properties: str | Sequence[str] | None) -> list[dict[str, Any]] | None:
    if properties is None:
        return None
    if isinstance(properties, str):
        return [{str(k): _property_value(v) for k, v in (entries or ())}
                for entries in table.column(properties).to_pylist()]
    columns = {name: table.column(name).to_pylist() for name in properties}
    return [{name: _property_value(values[i]) for name, values in columns.items()} for i in range(table.num_rows)]


def sort_envelopes(envelopes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Encoded messages in an order that depends only on their content (keys, then the payload), not
    on the order they came in."""
    return sorted(envelopes, key=lambda e: (e.get("session_id") or "", e.get("partition_key") or "",
                                            e.get("message_id") or "", e["payload"]))


def property_text(value: Any) -> str | None:
    """An application property as the text of the read column `application_properties`."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return _scalar_text(value)


PROPERTIES_JSON = "application_properties_json"
"""The text column that carries `application_properties` into Spark as a JSON object (made into
the map column again by `from_json`). Spark takes maps and lists from pandas only as Python
objects, one per row: the two list columns this replaced cost 1.5 s more per 200,000 rows to
bring into Spark than one text column."""

_NO_PROPERTIES_JSON = "{}"


def _properties_json(message: rb.ReceivedMessage) -> str:
    properties = message.application_properties
    if not properties:
        return _NO_PROPERTIES_JSON
    return json.dumps({k: property_text(v) for k, v in properties.items()}, separators=(",", ":"),
                      ensure_ascii=False)


def _read_columns(messages: Sequence[rb.ReceivedMessage]) -> dict[str, Any]:
    """Every read column but the properties, one value per message."""
    columns: dict[str, Any] = {name: [getattr(m, name) for m in messages] for name in _TEXT_COLUMNS}
    columns["body"] = [m.body for m in messages]
    columns["sequence_number"] = [m.sequence_number for m in messages]
    columns["partition"] = [rb.partition_of(m.sequence_number) for m in messages]
    columns["enqueued_time_utc"] = [m.enqueued_time_utc for m in messages]
    columns["delivery_count"] = [m.delivery_count for m in messages]
    return columns


def table_from_messages(messages: Sequence[rb.ReceivedMessage]) -> pa.Table:
    """The read columns (`READ_SCHEMA`) of received or peeked messages, one row each."""
    columns = _read_columns(messages)
    columns["application_properties"] = [[(k, property_text(v)) for k, v in m.application_properties.items()]
                                         for m in messages]
    return pa.Table.from_pydict({f.name: columns[f.name] for f in READ_SCHEMA}, schema=READ_SCHEMA)


JSON_SCHEMA = pa.schema([pa.field(PROPERTIES_JSON, pa.string()) if f.name == "application_properties" else f
                         for f in READ_SCHEMA])
"""`READ_SCHEMA` with the properties as one JSON text column (`PROPERTIES_JSON`)."""


def json_table_from_messages(messages: Sequence[rb.ReceivedMessage]) -> pa.Table:
    """The read columns of received or peeked messages with the properties as JSON text
    (`JSON_SCHEMA`): the form Spark takes from Ray Data and pandas."""
    columns = _read_columns(messages)
    columns[PROPERTIES_JSON] = [_properties_json(m) for m in messages]
    return pa.Table.from_pydict({f.name: columns[f.name] for f in JSON_SCHEMA}, schema=JSON_SCHEMA)
