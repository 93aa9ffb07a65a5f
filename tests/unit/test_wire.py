"""The wire: every partition request survives `encode`/`decode` typed, crosses as plain lists (the
bytes the positional lists of old made), and has an entry in the operation table; router
arguments holding records cross to a gateway as lists too. No Ray."""
from __future__ import annotations

from typing import Any

import msgpack
import pytest

from ray_broker import Message, wire
from ray_broker.clock import ManualClock
from ray_broker.engine.operations import OPERATIONS, operation
from ray_broker.engine.partition import PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.errors import InvalidOperationError
from ray_broker.protocol import MAIN, PEEK_LOCK

from .conftest import queue_definition

TOKEN = b"t" * 16
REF = wire.SessionRef("s1", TOKEN)
SETTLEMENTS = [wire.Settlement("complete", 7, TOKEN), wire.Settlement("dead_letter", 8, TOKEN, "why", "details")]
ENVELOPES = [Message("x", partition_key="k").to_envelope()]
DEFINITION = queue_definition("q")

EXAMPLES: dict[type[Any], wire.PartitionRequest] = {
    wire.CreateEntity: wire.CreateEntity(DEFINITION),
    wire.UpdateEntity: wire.UpdateEntity(DEFINITION),
    wire.DeleteEntity: wire.DeleteEntity("q"),
    wire.GetEntity: wire.GetEntity("q"),
    wire.ListEntities: wire.ListEntities(),
    wire.Runtime: wire.Runtime("q"),
    wire.ListSessions: wire.ListSessions("q"),
    wire.IntegrityCheck: wire.IntegrityCheck(),
    wire.AddRule: wire.AddRule("t/subscriptions/s", {"name": "r", "filter": {"kind": "true"}}),
    wire.UpdateRule: wire.UpdateRule("t/subscriptions/s", {"name": "r", "filter": {"kind": "false"}}),
    wire.RemoveRule: wire.RemoveRule("t/subscriptions/s", "r"),
    wire.Send: wire.Send("q", ENVELOPES, ("producer-1", 3)),
    wire.CancelScheduled: wire.CancelScheduled("q", [5, 6]),
    wire.Receive: wire.Receive("q", MAIN, 10, PEEK_LOCK, REF, 4),
    wire.HasAvailable: wire.HasAvailable("q", MAIN, "s1", False),
    wire.Settle: wire.Settle("q", MAIN, SETTLEMENTS, REF),
    wire.ReceiveDeferred: wire.ReceiveDeferred("q", MAIN, [7], PEEK_LOCK, REF),
    wire.Peek: wire.Peek("q", MAIN, 1, 10, "s1", 99),
    wire.Purge: wire.Purge("q", MAIN, 1000),
    wire.CommitTransaction: wire.CommitTransaction("tx", 1_700_000_100.0, [
        wire.Send("q", ENVELOPES), wire.Settle("q", MAIN, SETTLEMENTS[:1], REF)]),
    wire.AcceptSession: wire.AcceptSession("q", None),
    wire.RenewSession: wire.RenewSession("q", REF),
    wire.ReleaseSession: wire.ReleaseSession("q", REF),
    wire.GetSessionState: wire.GetSessionState("q", REF),
    wire.SetSessionState: wire.SetSessionState("q", REF, b"state"),
}


def only_lists(value: Any) -> bool:
    """Whether `value` holds no tuple anywhere (Ray would pickle it)."""
    if isinstance(value, tuple):
        return False
    if isinstance(value, list):
        return all(only_lists(v) for v in value)
    if isinstance(value, dict):
        return all(only_lists(v) for v in value.values())
    return True


def test_every_partition_request_has_an_example_and_an_operation() -> None:
    assert set(EXAMPLES) == set(wire.PARTITION_REQUESTS) == set(OPERATIONS)


@pytest.mark.parametrize("request_type", wire.PARTITION_REQUESTS, ids=lambda cls: cls.OPERATION)
def test_a_request_crosses_as_plain_lists_and_comes_back_typed(request_type: type[Any]) -> None:
    request = EXAMPLES[request_type]
    encoded = wire.encode(request)
    assert encoded[0] == request_type.OPERATION and only_lists(encoded)
    decoded = wire.decode(msgpack.unpackb(msgpack.packb(encoded)))
    assert decoded == request and type(decoded) is request_type


def test_nested_records_come_back_typed() -> None:
    commit = wire.decode(wire.encode(EXAMPLES[wire.CommitTransaction]))
    assert isinstance(commit, wire.CommitTransaction)
    send, settle = commit.operations
    assert isinstance(send, wire.Send) and isinstance(settle, wire.Settle)
    assert isinstance(settle.session, wire.SessionRef) and isinstance(settle.settlements[0], wire.Settlement)
    received = wire.decode(wire.encode(wire.Receive("q", MAIN, 1, PEEK_LOCK)))
    assert isinstance(received, wire.Receive) and received.session is None


def test_a_settle_and_a_receive_pack_to_the_bytes_of_the_positional_lists() -> None:
    settle = wire.Settle("q", MAIN, SETTLEMENTS, REF)
    positional = ["settle", "q", MAIN, [["complete", 7, TOKEN, None, None], ["dead_letter", 8, TOKEN, "why", "details"]],
                  ["s1", TOKEN]]
    assert msgpack.packb(wire.encode(settle)) == msgpack.packb(positional)
    receive = wire.Receive("q", MAIN, 10, PEEK_LOCK, REF, 4)
    assert msgpack.packb(wire.encode(receive)) == msgpack.packb(["receive", "q", MAIN, 10, PEEK_LOCK, ["s1", TOKEN], 4])


def test_an_unknown_operation_is_a_typed_error() -> None:
    with pytest.raises(InvalidOperationError, match="no operation 'drop_everything'"):
        wire.decode(["drop_everything", "q"])
    with pytest.raises(InvalidOperationError, match="partition requests"):
        operation(wire.HeldSession("s1", TOKEN, 0, 0.0))  # type: ignore[arg-type]


def test_the_table_runs_a_request_on_an_engine_and_says_what_wakes_receivers() -> None:
    engine = PartitionEngine(0, 1, Store(None, "memory"), ManualClock(1_700_000_000.0))
    for request in (wire.CreateEntity(DEFINITION), wire.Send("q", [Message("x").to_envelope()])):
        operation(request).run(engine, request)
    receive = wire.Receive("q", MAIN, 10, PEEK_LOCK)
    (record,) = operation(receive).run(engine, receive)["messages"]
    settle = wire.Settle("q", MAIN, [wire.Settlement("complete", record["sequence_number"], record["lock_token"])])
    assert operation(settle).run(engine, settle) == [None]
    assert {cls.OPERATION for cls, how in OPERATIONS.items() if how.wakes} == {
        "update_entity", "send", "settle", "commit_transaction", "release_session"}


def test_a_partitions_receive_reply_is_typed_where_the_router_takes_it() -> None:
    calls = [wire.Settle("q", MAIN, SETTLEMENTS[:1]), wire.Receive("q", MAIN, 10, PEEK_LOCK)]
    reply = {"messages": [{"sequence_number": 7}], "more": True, "backlog": 3}
    assert wire.typed_results(calls, [[None], reply]) == [[None], wire.Delivered([{"sequence_number": 7}], True, 3)]
    assert wire.delivered(reply).backlog == 3
