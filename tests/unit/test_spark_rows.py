"""Columns to messages and back (spark_bridge.rows), on Arrow tables, a peeking reader's saved
positions (spark_bridge.positions) and how a writer groups messages (spark_bridge.batch_sending): no
Spark, no Ray."""
from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest

from ray_broker import codec
from ray_broker.errors import InvalidArgumentError
from ray_broker.message import Message, ReceivedMessage
from ray_broker import partition_for_key
from spark_bridge.entity import Entity
from spark_bridge.positions import POSITIONS_FILE, PeekPositions
from spark_bridge.rows import (
    BINARY,
    JSON,
    JSON_CONTENT_TYPE,
    JSON_SCHEMA,
    MAP,
    NULL,
    OTHER,
    PROPERTIES_JSON,
    READ_SCHEMA,
    SCALAR,
    STRING,
    WriteSpec,
    arrow_kind,
    arrow_kinds,
    json_table_from_messages,
    sort_envelopes,
    table_from_messages,
)
from spark_bridge.batch_sending import IN_FLIGHT, batches, partition_groups


def orders() -> pa.Table:
    return pa.table({
        "body": pa.array([b"a", b"b", b"c"], pa.binary()),
        "customer": ["c1", None, "c2"],
        "order_id": [1, 2, 3],
        "amount": [1.5, 2.0, None],
        "when": pa.array([dt.date(2026, 1, 2)] * 3, pa.date32()),
        "price": pa.array([decimal.Decimal("1.25")] * 3, pa.decimal128(5, 2)),
        "tags": pa.array([[("k", "v")], None, []], pa.map_(pa.string(), pa.string())),
        "doc": pa.array([{"x": 1, "y": [("m", 2)]}, None, {"x": 3, "y": []}],
                        pa.struct([("x", pa.int64()), ("y", pa.map_(pa.string(), pa.int64()))])),
    })


def sent(envelopes: list[dict[str, object]]) -> list[dict[str, object]]:
    """What each envelope sends: its wire form, as a partition stores it."""
    return [codec.unpackb(e["payload"]) for e in envelopes]  # type: ignore[arg-type]


def test_arrow_kinds() -> None:
    assert arrow_kinds(orders().schema) == {"body": BINARY, "customer": STRING, "order_id": SCALAR, "amount": SCALAR,
                                            "when": SCALAR, "price": SCALAR, "tags": MAP, "doc": JSON}
    assert arrow_kind(pa.list_(pa.int32())) == JSON
    assert arrow_kind(pa.null()) == NULL
    assert arrow_kind(pa.duration("s")) == OTHER


def test_binary_body_keys_and_property_columns() -> None:
    spec = WriteSpec(body="body", partition_key="customer", message_id="order_id",
                     properties=["amount", "when", "price"])
    table = orders()
    spec.validate(arrow_kinds(table.schema), "the table")
    envelopes = spec.envelopes(table)
    assert envelopes == [    # each row encoded as the Message of its values would be
        Message(b"a", partition_key="c1", message_id="1",
                application_properties={"amount": 1.5, "when": "2026-01-02", "price": "1.25"}).to_envelope(),
        Message(b"b", message_id="2",                                  # a null key is no key
                application_properties={"amount": 2.0, "when": "2026-01-02", "price": "1.25"}).to_envelope(),
        Message(b"c", partition_key="c2", message_id="3",
                application_properties={"amount": None, "when": "2026-01-02", "price": "1.25"}).to_envelope()]
    assert [e.get("partition_key") for e in envelopes] == ["c1", None, "c2"]
    assert all("content_type" not in wire for wire in sent(envelopes))


def test_map_column_properties_and_string_body() -> None:
    table = orders().append_column("text", pa.array(["é", "", None]))
    spec = WriteSpec(body="text", session_id="customer", partition_key="customer", properties="tags")
    spec.validate(arrow_kinds(table.schema), "the table")
    assert spec.envelopes(table) == [
        Message("é", session_id="c1", partition_key="c1", application_properties={"k": "v"}).to_envelope(),
        Message(b"").to_envelope(),
        Message(b"", session_id="c2", partition_key="c2").to_envelope()]


def test_struct_body_is_json() -> None:
    wires = sent(WriteSpec(body="doc").envelopes(orders()))
    assert [json.loads(w["body"]) for w in wires] == [{"x": 1, "y": {"m": 2}}, None, {"x": 3, "y": {}}]  # type: ignore[arg-type]
    assert {w["content_type"] for w in wires} == {JSON_CONTENT_TYPE}


@pytest.mark.parametrize(("spec", "error"), [
    (WriteSpec(body="missing"), "the body column 'missing' is not in the table"),
    (WriteSpec(body="amount"), "unsupported type"),
    (WriteSpec(partition_key="doc"), "must hold strings"),
    (WriteSpec(properties="customer"), "must be a map column"),
    (WriteSpec(properties=["doc"]), "nested values are not application properties"),
    (WriteSpec(properties=["body", "nope"]), "a property column 'nope' is not in the table"),
])
def test_validation_names_the_problem(spec: WriteSpec, error: str) -> None:
    with pytest.raises(InvalidArgumentError, match=error):
        spec.validate(arrow_kinds(orders().schema), "the table")


@pytest.mark.parametrize("kwargs", [{"body": ""}, {"body": None}, {"partition_key": 3}, {"properties": [1]},
                                    {"properties": 5}])
def test_spec_arguments_are_checked(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        WriteSpec(**kwargs)  # type: ignore[arg-type]


def test_columns_lists_each_column_once() -> None:
    spec = WriteSpec(body="body", partition_key="customer", session_id="customer", properties=["amount", "body"])
    assert spec.columns() == ["body", "customer", "amount"]


@pytest.mark.parametrize(("columns", "spec", "error"), [
    ({"key": ["k", "k" * 129]}, WriteSpec(partition_key="key"), "row 1 .* partition_key is 129 characters long"),
    ({"s": ["a", "b"], "p": ["a", "c"]}, WriteSpec(session_id="s", partition_key="p"),
     "row 1 .* partition_key 'c' differs from session_id 'b'"),
    ({"big": pa.array([1, 1 << 63], pa.uint64())}, WriteSpec(properties=["big"]),
     "row 1 .* does not fit in a signed 64-bit integer"),
    ({"m": pa.array([[("k", [1])]], pa.map_(pa.string(), pa.list_(pa.int64())))}, WriteSpec(properties="m"),
     "row 0 .* application_properties\\['k'\\] has type list"),
])
def test_a_row_that_makes_no_valid_message_is_an_argument_error(columns: dict[str, object], spec: WriteSpec,
                                                                 error: str) -> None:
    count = len(next(iter(columns.values())))  # type: ignore[arg-type]
    table = pa.table({"body": [b"x"] * count, **columns})
    with pytest.raises(InvalidArgumentError, match=error):
        spec.envelopes(table)


def test_sort_envelopes_ignores_input_order() -> None:
    messages = [Message(b"b", partition_key="k2"), Message(b"a", partition_key="k1"), Message(b"c"),
                Message(b"a", partition_key="k1", application_properties={"n": 1})]
    envelopes = [m.to_envelope() for m in messages]
    forward = sort_envelopes(envelopes)
    assert forward == sort_envelopes(reversed(envelopes))
    assert sent(forward[:1]) == [{"body": b"c"}]


def test_table_from_messages_has_the_read_columns() -> None:
    when = dt.datetime(2026, 11, 23, 1, 2, 3, tzinfo=dt.timezone.utc)
    received = ReceivedMessage({"body": b"x", "message_id": "m1", "partition_key": "p", "subject": "s",
                                "sequence_number": (3 << 48) | 7, "delivery_count": 2,
                                "enqueued_time": when.timestamp(),
                                "application_properties": {"a": 1, "b": True, "c": None, "d": b"raw"}}, peeked=True)
    table = table_from_messages([received])
    assert table.schema == READ_SCHEMA
    row = table.to_pylist()[0]
    assert row["body"] == b"x" and row["message_id"] == "m1" and row["partition_key"] == "p"
    assert row["session_id"] is None and row["subject"] == "s"
    assert row["sequence_number"] == (3 << 48) | 7 and row["partition"] == 3 and row["delivery_count"] == 2
    assert row["enqueued_time_utc"] == when
    assert dict(row["application_properties"]) == {"a": "1", "b": "true", "c": None, "d": "raw"}
    assert table_from_messages([]).num_rows == 0


def test_peek_positions_survive_a_restart(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "reader")
    positions = PeekPositions(checkpoint, (0, 1, 2))
    assert positions.as_dict() == {0: 0, 1: 1 << 48, 2: 2 << 48}
    positions[1] = (1 << 48) | 42
    positions.save()
    assert PeekPositions(checkpoint, (0, 1, 2)).as_dict() == {0: 0, 1: (1 << 48) | 42, 2: 2 << 48}
    assert sorted(p.name for p in (tmp_path / "reader").iterdir()) == [POSITIONS_FILE]
    with pytest.raises(InvalidArgumentError, match="another entity"):
        PeekPositions(checkpoint, (0,))
    PeekPositions(None, (0,)).save()                                 # in memory only: writes nothing


def test_json_table_gives_the_properties_as_json_text_and_the_other_columns_as_they_are() -> None:
    messages = [ReceivedMessage({"body": b"a", "sequence_number": 1,
                                 "application_properties": {"x": 1, "y": None, "z": "\u00e9"}}, peeked=True),
                ReceivedMessage({"body": b"b", "sequence_number": 2}, peeked=True)]
    table = json_table_from_messages(messages)
    assert table.schema == JSON_SCHEMA
    assert [json.loads(text) for text in table.column(PROPERTIES_JSON).to_pylist()] == [
        {"x": "1", "y": None, "z": "\u00e9"}, {}]
    assert table.drop([PROPERTIES_JSON]).equals(table_from_messages(messages).drop(["application_properties"]))


def test_partition_groups_keep_each_key_in_order() -> None:
    entity = Entity("q", None, "queue", tuple(range(16)))
    envelopes = [Message(f"{i}".encode(), partition_key=f"k{i % 5}" if i % 3 else None).to_envelope()
                 for i in range(300)]
    groups = partition_groups(entity, envelopes)
    assert sorted(e["payload"] for g in groups for e in g.envelopes) == sorted(e["payload"] for e in envelopes)
    for group in [g.envelopes for g in groups]:
        keys = {e.get("partition_key") for e in group}
        assert None not in keys or keys == {None}                   # unkeyed ones apart from keyed ones
        if None not in keys:
            assert len({partition_for_key(k, 16) for k in keys}) == 1
        for key in keys - {None}:
            bodies = [int(w["body"]) for w in sent([e for e in group if e.get("partition_key") == key])]
            assert bodies == sorted(bodies)
    assert sum(1 for g in groups if g.envelopes[0].get("partition_key") is None) == IN_FLIGHT
    assert all(g.keyed == (g.envelopes[0].get("partition_key") is not None) for g in groups)


def test_batches_pack_envelopes_in_order_within_the_size_given() -> None:
    envelopes = [Message(b"x" * 100, message_id=str(i)).to_envelope() for i in range(10)]
    limit = 3 * envelopes[0]["size"] + 1
    packed = list(batches(limit, envelopes))
    assert [len(b) for b in packed] == [3, 3, 3, 1]
    assert all(b.max_size_in_bytes == limit and b.size_in_bytes <= limit for b in packed)
    assert [e for b in packed for e in b.envelopes] == envelopes
    assert list(batches(limit, [])) == []
