"""The router's data operations as typed requests and replies.

A client asks its router (embedded in the client, or in a gateway on the relay path) for one of
these, and `Router.run` runs it by its type. Each request is a `NamedTuple` whose fields are, in
order, the arguments of the router part that serves it; its `OPERATION` names it in logs, errors
and on the wire. A request crosses Ray to a gateway as `encode_router_request(request)`,
`[OPERATION, *fields]` with its held session, settlements and a transaction's operations as lists
(Ray packs lists with msgpack but pickles tuples), and `decode_router_request` types it again on
the other side; replies that are records cross as lists or dicts the same way
(`encode_router_reply`, `decode_router_reply`). Imports no Ray.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence, Union

from .errors import InvalidOperationError
from .wire import (
    HeldSession,
    Settlement,
    TransactionOperation,
    decode,
    encode,
    settlements_from_wire,
    settlements_to_wire,
)


# ---------------------------------------------------------------------------- requests


class SendRequest(NamedTuple):
    """Store a batch of messages (`envelopes`) on `entity`, within `timeout` seconds.

    `producer` (the sender's id and its batch number) tags the batch: a partition answers a repeat
    of a tag with the first reply, so a retry stores nothing twice. Reply: the sequence numbers in
    order (None for a dropped duplicate)."""

    OPERATION = "send"
    entity: str
    envelopes: list[dict[str, Any]]
    timeout: float
    producer: tuple[str, int] | None = None


class SendBatchesRequest(NamedTuple):
    """Store several `(envelopes, producer)` batches as `SendRequest` stores one, in as few
    partition calls as routing allows. Reply: each batch's sequence numbers."""

    OPERATION = "send_batches"
    entity: str
    batches: Sequence[tuple[list[dict[str, Any]], tuple[str, int] | None]]
    timeout: float


class SendPeekSessionRequest(NamedTuple):
    """Store messages of one session and browse up to `max_count` of that session's messages
    right after them, in one partition commit. Reply: `SentAndPeeked`."""

    OPERATION = "send_peek_session"
    entity: str
    envelopes: list[dict[str, Any]]
    timeout: float
    producer: tuple[str, int] | None
    max_count: int


class CancelScheduledRequest(NamedTuple):
    """Cancel scheduled messages by sequence number. Reply: None."""

    OPERATION = "cancel_scheduled"
    entity: str
    sequence_numbers: list[int]
    timeout: float


class CommitTransactionRequest(NamedTuple):
    """Commit a transaction's operations on `partition`, the one they are pinned to, retried
    there until `timeout`. Reply: one result per operation."""

    OPERATION = "commit_transaction"
    partition: int
    transaction_id: str
    deadline: float
    operations: list[TransactionOperation]
    timeout: float


class ReceiveRequest(NamedTuple):
    """Receive up to `max_count` messages for receiver `receiver_id` (waiting up to `max_wait`
    seconds for the first), carrying the receiver's `settlements`; `prefetch` messages more may be
    held for its next receives; `partitions` limits the partitions asked. Reply: `ReceiveReply`."""

    OPERATION = "receive"
    receiver_id: str
    entity: str
    subq: int
    mode: str
    session: HeldSession | None
    max_count: int
    max_wait: float
    prefetch: int
    settlements: list[Settlement]
    partitions: Sequence[int] | None = None


class SettleRequest(NamedTuple):
    """Apply settlements on the partitions holding their messages. Reply: one result per
    settlement, in order."""

    OPERATION = "settle"
    entity: str
    subq: int
    session: HeldSession | None
    settlements: list[Settlement]
    timeout: float


class CloseReceiverRequest(NamedTuple):
    """End a receiver's waits and release what it holds but never handed out. Reply: how many
    messages were released."""

    OPERATION = "close_receiver"
    receiver_id: str


class ReceiveDeferredRequest(NamedTuple):
    """Deferred messages by sequence number. Reply: their records."""

    OPERATION = "receive_deferred"
    entity: str
    subq: int
    mode: str
    session: HeldSession | None
    sequence_numbers: list[int]
    timeout: float


class PeekRequest(NamedTuple):
    """Browse up to `max_count` messages from `from_sequence` (up to `to_sequence`, exclusive),
    of a held session when `session` is given. Reply: the records, in sequence order."""

    OPERATION = "peek"
    entity: str
    subq: int
    session: HeldSession | None
    from_sequence: int
    max_count: int
    to_sequence: int | None = None


class PeekSessionRequest(NamedTuple):
    """Browse one session's messages as `PeekRequest` does, without its lock. Reply: the records."""

    OPERATION = "peek_session"
    entity: str
    subq: int
    session_id: str
    from_sequence: int
    max_count: int
    to_sequence: int | None = None


class AcceptSessionRequest(NamedTuple):
    """Lock session `session_id`, or the next available one (None), waiting up to `max_wait`
    seconds. Reply: the `HeldSession` granted."""

    OPERATION = "accept_session"
    entity: str
    session_id: str | None
    max_wait: float


class SessionCallRequest(NamedTuple):
    """Run `operation` (renew, release, get or set the state) on a held session with `args`.
    Reply: the operation's."""

    OPERATION = "session_call"
    entity: str
    session: HeldSession
    operation: str
    args: tuple[Any, ...] = ()


class DefinitionRequest(NamedTuple):
    """An entity's definition, from the router's cache unless `fresh`. Reply: the definition."""

    OPERATION = "definition"
    name: str
    fresh: bool = False


class PurgeRequest(NamedTuple):
    """Remove up to `max_count` messages of a sub-queue on each partition holding it (with
    `in_all`, about `max_count` over all), enqueued before `before` when given. Reply:
    `PurgeReply`."""

    OPERATION = "purge"
    entity: str
    subq: int
    max_count: int
    timeout: float
    before: float | None = None
    in_all: bool = False


RouterRequest = Union[SendRequest, SendBatchesRequest, SendPeekSessionRequest, CancelScheduledRequest,
                      CommitTransactionRequest, ReceiveRequest, SettleRequest, CloseReceiverRequest,
                      ReceiveDeferredRequest, PeekRequest, PeekSessionRequest, AcceptSessionRequest,
                      SessionCallRequest, DefinitionRequest, PurgeRequest]
"""Any request a router runs."""

ROUTER_REQUESTS: tuple[type[Any], ...] = RouterRequest.__args__  # type: ignore[attr-defined]
"""Every router request type."""

DATA_OPERATIONS: frozenset[str] = frozenset(cls.OPERATION for cls in ROUTER_REQUESTS)
"""The names of the router's operations; everything else a gateway serves is management."""


# ---------------------------------------------------------------------------- replies


class ReceiveReply(NamedTuple):
    """What a receive hands out: the messages (each record with its `partition`) and the results of
    the settlements it carried, one per settlement, in order."""

    messages: list[dict[str, Any]]
    settled: list[Any]


class SentAndPeeked(NamedTuple):
    """A `SendPeekSessionRequest`'s reply: the sequence numbers stored and the session's records."""

    sequence_numbers: list[int | None]
    records: list[dict[str, Any]]


class PurgeReply(NamedTuple):
    """How many messages a purge removed in all, and whether any partition holds more."""

    removed: int
    more: bool


# ---------------------------------------------------------------------------- across Ray


def _held(value: Sequence[Any] | None) -> HeldSession | None:
    return None if value is None else HeldSession(*value)


def _listed(session: HeldSession | None) -> list[Any] | None:
    return None if session is None else list(session)


def _listed_tag(producer: tuple[str, int] | None) -> list[Any] | None:
    return None if producer is None else list(producer)


def _tag(value: Sequence[Any] | None) -> tuple[str, int] | None:
    return None if value is None else (value[0], value[1])


_FIELD_ENCODERS: dict[str, Callable[[Any], Any]] = {
    "session": _listed,
    "settlements": settlements_to_wire,
    "operations": lambda operations: [encode(op) for op in operations],
    "producer": _listed_tag,
    "batches": lambda batches: [[envelopes, _listed_tag(producer)] for envelopes, producer in batches],
}
_FIELD_DECODERS: dict[str, Callable[[Any], Any]] = {
    "session": _held,
    "settlements": settlements_from_wire,
    "operations": lambda operations: [decode(op) for op in operations],
    "producer": _tag,
    "batches": lambda batches: [(envelopes, _tag(producer)) for envelopes, producer in batches],
}


def encode_router_request(request: RouterRequest) -> list[Any]:
    """`request` as it crosses Ray: `[OPERATION, *fields]`, its records and producer tags as lists
    (a session call's arguments spread after its operation).

    Example:
        >>> encode_router_request(SettleRequest("q", 0, None, [Settlement("complete", 7, b"t")], 60.0))
        ['settle', 'q', 0, None, [['complete', 7, b't', None, None]], 60.0]
    """
    fields = [_FIELD_ENCODERS[name](value) if name in _FIELD_ENCODERS else value
              for name, value in zip(request._fields, request)]
    if isinstance(request, SessionCallRequest):
        return [request.OPERATION, *fields[:-1], *request.args]
    return [request.OPERATION, *fields]


_BY_OPERATION: dict[str, type[Any]] = {cls.OPERATION: cls for cls in ROUTER_REQUESTS}


def decode_router_request(fields: Sequence[Any]) -> RouterRequest:
    """The request `encode_router_request` gave `fields` for, typed again; `InvalidOperationError`
    for an operation no router runs.

    Example:
        >>> decode_router_request(['settle', 'q', 0, None, [['complete', 7, b't', None, None]], 60.0]).settlements[0]
        Settlement(action='complete', sequence_number=7, lock_token=b't', reason=None, description=None)
    """
    cls = _BY_OPERATION.get(fields[0]) if fields else None
    if cls is None:
        raise InvalidOperationError(f"routers run no operation {fields[0] if fields else None!r}; they run "
                                    f"{', '.join(sorted(_BY_OPERATION))}")
    values = list(fields[1:])
    if cls is SessionCallRequest:
        values = [*values[:3], tuple(values[3:])]
    return cls(*(_FIELD_DECODERS[name](value) if name in _FIELD_DECODERS else value  # type: ignore[no-any-return]
                 for name, value in zip(cls._fields, values)))


def encode_router_reply(reply: Any) -> Any:
    """A router's reply as it crosses Ray: a receive's as the mapping it always was, a granted
    session and the other records as lists, anything else as it is."""
    if isinstance(reply, ReceiveReply):
        return {"messages": reply.messages, "settled": reply.settled}
    if isinstance(reply, PurgeReply):
        return {"removed": reply.removed, "more": reply.more}
    if isinstance(reply, (HeldSession, SentAndPeeked)):
        return list(reply)
    return reply


_REPLY_DECODERS: dict[type[Any], Callable[[Any], Any]] = {
    ReceiveRequest: lambda r: ReceiveReply(r["messages"], r["settled"]),
    PurgeRequest: lambda r: PurgeReply(r["removed"], r["more"]),
    AcceptSessionRequest: lambda r: HeldSession(*r),
    SendPeekSessionRequest: lambda r: SentAndPeeked(*r),
}


def decode_router_reply(request: RouterRequest, value: Any) -> Any:
    """The reply to `request` that `encode_router_reply` gave `value` for, typed again."""
    decoder = _REPLY_DECODERS.get(type(request))
    return value if decoder is None else decoder(value)
