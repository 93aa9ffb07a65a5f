"""The router's typed requests and replies: every request type crosses Ray to a gateway as lists
(nothing Ray would pickle), the same fields the router's parts take, and is typed again."""
from __future__ import annotations

import inspect
from typing import Any

import msgpack
import pytest

from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.errors import InvalidOperationError
from ray_broker.protocol import MAIN, PEEK_LOCK
from ray_broker.router_requests import (
    DATA_OPERATIONS,
    ROUTER_REQUESTS,
    AcceptSessionRequest,
    CancelScheduledRequest,
    CloseReceiverRequest,
    CommitTransactionRequest,
    DefinitionRequest,
    PeekRequest,
    PeekSessionRequest,
    PurgeReply,
    PurgeRequest,
    ReceiveDeferredRequest,
    ReceiveReply,
    ReceiveRequest,
    RouterRequest,
    SendBatchesRequest,
    SendPeekSessionRequest,
    SendRequest,
    SentAndPeeked,
    SessionCallRequest,
    SettleRequest,
    decode_router_reply,
    decode_router_request,
    encode_router_reply,
    encode_router_request,
)
from ray_broker.routing.router import Router
from ray_broker.sku import get_sku
from ray_broker.wire import HeldSession, Send, Settle, Settlement

from .stub_channel import StubChannel
from .test_wire import only_lists

TOKEN = b"t" * 16
HELD = HeldSession("s1", TOKEN, 3, 1_700_000_030.0, seen=9)
SETTLEMENTS = [Settlement("complete", 7, TOKEN), Settlement("dead_letter", 8, TOKEN, "why", "details")]
ENVELOPES = [Message("x", partition_key="k").to_envelope()]
TAG = ("sender-1", 4)

EXAMPLES: list[RouterRequest] = [
    SendRequest("q", ENVELOPES, 60.0, TAG),
    SendBatchesRequest("q", [(ENVELOPES, TAG), (ENVELOPES, None)], 60.0),
    SendPeekSessionRequest("q", ENVELOPES, 60.0, TAG, 100),
    CancelScheduledRequest("q", [5], 60.0),
    CommitTransactionRequest(3, "tx", 1_700_000_100.0, [Send("q", ENVELOPES), Settle("q", MAIN, SETTLEMENTS, HELD.ref)],
                             60.0),
    ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, HELD, 10, 5.0, 0, SETTLEMENTS, [1, 2]),
    SettleRequest("q", MAIN, None, SETTLEMENTS, 60.0),
    CloseReceiverRequest("r1"),
    ReceiveDeferredRequest("q", MAIN, PEEK_LOCK, HELD, [7], 60.0),
    PeekRequest("q", MAIN, HELD, 1, 10, 99),
    PeekSessionRequest("q", MAIN, "s1", 1, 10),
    AcceptSessionRequest("q", None, 5.0),
    SessionCallRequest("q", HELD, "set_session_state", (b"state",)),
    DefinitionRequest("q", True),
    PurgeRequest("q", MAIN, 1000, 60.0, 1_700_000_000.0, True),
]


def test_every_request_type_crosses_as_lists_and_comes_back_typed() -> None:
    assert {type(r) for r in EXAMPLES} == set(ROUTER_REQUESTS)
    assert DATA_OPERATIONS == {cls.OPERATION for cls in ROUTER_REQUESTS}
    for request in EXAMPLES:
        fields = encode_router_request(request)
        assert only_lists(fields) and fields[0] == request.OPERATION, request
        assert decode_router_request(msgpack.unpackb(msgpack.packb(fields))) == request, request


def test_a_receive_crosses_as_the_list_of_its_fields_in_order() -> None:
    fields = encode_router_request(ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, HELD, 10, 5.0, 0, SETTLEMENTS[:1]))
    assert fields == ["receive", "r1", "q", MAIN, PEEK_LOCK, ["s1", TOKEN, 3, 1_700_000_030.0, 9], 10, 5.0, 0,
                      [["complete", 7, TOKEN, None, None]], None]
    assert encode_router_request(SessionCallRequest("q", HELD, "renew_session")) == [
        "session_call", "q", ["s1", TOKEN, 3, 1_700_000_030.0, 9], "renew_session"], "no arguments, none sent"


def test_each_request_names_the_arguments_of_the_part_that_serves_it_in_order() -> None:
    router = Router("n", StubChannel(4, ManualClock()), get_sku("standard"))
    for cls, handler in router._handlers.items():
        parameters = list(inspect.signature(handler).parameters)
        assert parameters[:len(cls._fields)] == list(cls._fields), cls.__name__
        assert len(cls._fields) >= sum(p.default is inspect.Parameter.empty
                                       for p in inspect.signature(handler).parameters.values()), cls.__name__


def test_replies_that_are_records_cross_as_plain_values_and_come_back_typed() -> None:
    replies: list[tuple[RouterRequest, Any]] = [
        (ReceiveRequest("r1", "q", MAIN, PEEK_LOCK, None, 1, 0.0, 0, []), ReceiveReply([{"sequence_number": 1}], [None])),
        (PurgeRequest("q", MAIN, 10, 60.0), PurgeReply(10, True)),
        (AcceptSessionRequest("q", "s1", 5.0), HELD),
        (SendPeekSessionRequest("q", ENVELOPES, 60.0, TAG, 10), SentAndPeeked([5], [{"sequence_number": 5}])),
        (SendRequest("q", ENVELOPES, 60.0, TAG), [5]),
    ]
    for request, reply in replies:
        crossed = msgpack.unpackb(msgpack.packb(encode_router_reply(reply)))
        assert only_lists(encode_router_reply(reply))
        assert decode_router_reply(request, crossed) == reply, request
    assert encode_router_reply(ReceiveReply([], [])) == {"messages": [], "settled": []}, "a receive's reply as before"


def test_an_operation_no_router_runs_is_a_typed_error() -> None:
    with pytest.raises(InvalidOperationError, match="routers run no operation 'create_entity'"):
        decode_router_request(["create_entity", {}])
