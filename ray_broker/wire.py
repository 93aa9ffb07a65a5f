"""The wire: typed records for what travels between routers and partitions.

Here are the partition operations (`PartitionRequest`): what one partition actor runs, each in
one store transaction; a router sends them, and a transaction is a list of them applied together.
The values they share with the router's own requests (`router_requests`) are here too: a
settlement, a session lock as partitions check it and as clients hold it.

Each record is a `NamedTuple`: named fields in the code and in tests. On the wire it is a plain
list: Ray packs lists, dicts, str, bytes and numbers with msgpack, but pickles tuples (a
NamedTuple among them) at several times the cost, so a request crosses Ray as `encode(request)`,
`[OPERATION, *fields]` with its nested records (settlements, session locks, a transaction's
operations) as lists too, the same bytes the positional lists of old made, and `decode` rebuilds
it typed on the other side. A record's `OPERATION` (a class attribute, not a field) names it in
operation tables, logs and metrics. Imports no Ray.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence, Union

from .errors import InvalidOperationError


# ---------------------------------------------------------------------------- values


class Settlement(NamedTuple):
    """One settlement of a locked message: `action` (one of `protocol.SETTLE_ACTIONS`) on the
    message `sequence_number` under the lock `lock_token`; `reason` and `description` are a
    dead-lettering's."""

    action: str
    sequence_number: int
    lock_token: bytes
    reason: str | None = None
    description: str | None = None


class SessionRef(NamedTuple):
    """A held session lock as a partition checks it."""

    session_id: str
    lock_token: bytes


class HeldSession(NamedTuple):
    """A held session lock as clients carry it to routers: the lock, where the session lives,
    until when it is locked (epoch seconds), and the highest sequence number its receiver has
    seen (so a receive after a lost reply skips nothing and repeats nothing)."""

    session_id: str
    lock_token: bytes
    partition: int
    locked_until: float
    seen: int = 0

    @property
    def ref(self) -> SessionRef:
        """The lock as partitions check it."""
        return SessionRef(self.session_id, self.lock_token)

    @classmethod
    def granted(cls, lock: Mapping[str, Any], partition: int) -> HeldSession:
        """The session a partition's session lock (its `AcceptSession` reply) grants, where it
        lives (`partition`)."""
        return cls(lock["session_id"], lock["lock_token"], partition, lock["locked_until"])


class Delivered(NamedTuple):
    """A partition's reply to a receive (`Receive`, or a waiting receive): the records handed out,
    whether more are available, and how many are (its backlog). Crosses Ray as the mapping the
    engine makes (`delivered` types it)."""

    messages: list[dict[str, Any]]
    more: bool
    backlog: int


def delivered(reply: Mapping[str, Any]) -> Delivered:
    """The `Delivered` of a partition's receive reply as it crossed Ray."""
    return Delivered(reply["messages"], reply["more"], reply["backlog"])


def typed_results(calls: Sequence[Any], results: Sequence[Any]) -> list[Any]:
    """A partition call's results (one per request of `calls`), a receive's typed (`Delivered`),
    the others as they are."""
    return [delivered(result) if isinstance(call, Receive) else result for call, result in zip(calls, results)]


# ---------------------------------------------------------------------------- partition operations


class CreateEntity(NamedTuple):
    """Create a queue, topic or subscription from its full definition."""

    OPERATION = "create_entity"
    definition: Mapping[str, Any]


class UpdateEntity(NamedTuple):
    """Replace an entity's definition (its mutable options)."""

    OPERATION = "update_entity"
    definition: Mapping[str, Any]


class DeleteEntity(NamedTuple):
    """Delete an entity and its messages."""

    OPERATION = "delete_entity"
    name: str


class GetEntity(NamedTuple):
    """An entity's definition."""

    OPERATION = "get_entity"
    name: str


class ListEntities(NamedTuple):
    """Every entity's definition."""

    OPERATION = "list_entities"


class Runtime(NamedTuple):
    """An entity's message counts here."""

    OPERATION = "runtime"
    entity: str


class ListSessions(NamedTuple):
    """The sessions of an entity here with active messages or a stored state; with `updated_after`
    (epoch seconds), those whose state was set after it instead."""

    OPERATION = "list_sessions"
    entity: str
    updated_after: float | None = None


class IntegrityCheck(NamedTuple):
    """The store's integrity check."""

    OPERATION = "integrity_check"


class AddRule(NamedTuple):
    """Add a rule to a subscription."""

    OPERATION = "add_rule"
    subscription: str
    rule: Mapping[str, Any]


class UpdateRule(NamedTuple):
    """Replace a subscription rule's filter and action."""

    OPERATION = "update_rule"
    subscription: str
    rule: Mapping[str, Any]


class RemoveRule(NamedTuple):
    """Remove a subscription's rule."""

    OPERATION = "remove_rule"
    subscription: str
    name: str


class Send(NamedTuple):
    """Store a batch of encoded messages; `producer` (id, batch number) makes a repeat of the batch
    answer with the first reply instead of storing it again."""

    OPERATION = "send"
    entity: str
    envelopes: Sequence[Mapping[str, Any]]
    producer: tuple[str, int] | None = None


class CancelScheduled(NamedTuple):
    """Cancel scheduled messages by sequence number."""

    OPERATION = "cancel_scheduled"
    entity: str
    sequence_numbers: Sequence[int]


class Receive(NamedTuple):
    """Take up to `max_count` messages of a sub-queue (of a held session, after `session_seen`)."""

    OPERATION = "receive"
    entity: str
    subq: int
    max_count: int
    mode: str
    session: SessionRef | None = None
    session_seen: int | None = None


class HasAvailable(NamedTuple):
    """Whether a sub-queue (a session, or any free session) has a message to take now."""

    OPERATION = "has_available"
    entity: str
    subq: int
    session_id: str | None = None
    free_session: bool = False


class Settle(NamedTuple):
    """Apply settlements to locked messages of a sub-queue (under a held session's lock)."""

    OPERATION = "settle"
    entity: str
    subq: int
    settlements: Sequence[Settlement]
    session: SessionRef | None = None


class ReceiveDeferred(NamedTuple):
    """Take deferred messages by sequence number."""

    OPERATION = "receive_deferred"
    entity: str
    subq: int
    sequence_numbers: Sequence[int]
    mode: str
    session: SessionRef | None = None


class Peek(NamedTuple):
    """Read messages from `from_sequence` on (up to `to_sequence`, exclusive) without locking them."""

    OPERATION = "peek"
    entity: str
    subq: int
    from_sequence: int
    max_count: int
    session_id: str | None = None
    to_sequence: int | None = None


class Purge(NamedTuple):
    """Remove up to `max_count` messages of a sub-queue (of every state but on their way to a
    forwarding destination), locked ones too, only those enqueued before `before` (epoch seconds)
    when given; replies `{"removed", "more"}`."""

    OPERATION = "purge"
    entity: str
    subq: int
    max_count: int
    before: float | None = None


class CommitTransaction(NamedTuple):
    """Apply a transaction's sends and settlements all or nothing, once (a repeat answers with the
    first commit's results) and only before `deadline` (epoch seconds)."""

    OPERATION = "commit_transaction"
    transaction_id: str
    deadline: float
    operations: Sequence[TransactionOperation]


class AcceptSession(NamedTuple):
    """Lock a session (`session_id`, or any free one when None)."""

    OPERATION = "accept_session"
    entity: str
    session_id: str | None


class RenewSession(NamedTuple):
    """Extend a held session's lock."""

    OPERATION = "renew_session"
    entity: str
    session: SessionRef


class ReleaseSession(NamedTuple):
    """Let go of a held session."""

    OPERATION = "release_session"
    entity: str
    session: SessionRef


class GetSessionState(NamedTuple):
    """A held session's state."""

    OPERATION = "get_session_state"
    entity: str
    session: SessionRef


class SetSessionState(NamedTuple):
    """Set (or with None clear) a held session's state."""

    OPERATION = "set_session_state"
    entity: str
    session: SessionRef
    state: bytes | None


TransactionOperation = Union[Send, Settle]
"""What a transaction holds: sends and settlements, applied on one partition in one unit of work."""

SessionOperation = Union[RenewSession, ReleaseSession, GetSessionState, SetSessionState]
"""The operations on a held session, which go to the session's partition."""

PartitionRequest = Union[CreateEntity, UpdateEntity, DeleteEntity, GetEntity, ListEntities, Runtime, ListSessions,
                         IntegrityCheck, AddRule, UpdateRule, RemoveRule, Send, CancelScheduled, Receive, HasAvailable,
                         Settle, ReceiveDeferred, Peek, Purge, CommitTransaction, AcceptSession, RenewSession,
                         ReleaseSession, GetSessionState, SetSessionState]
"""Everything a partition runs."""

SESSION_OPERATIONS: dict[str, type[Any]] = {cls.OPERATION: cls for cls in (RenewSession, ReleaseSession,
                                                                          GetSessionState, SetSessionState)}
"""The operations on a held session by name, as a client asks a router for them."""

PARTITION_REQUESTS: tuple[type[Any], ...] = (
    CreateEntity, UpdateEntity, DeleteEntity, GetEntity, ListEntities, Runtime, ListSessions, IntegrityCheck, AddRule,
    UpdateRule, RemoveRule, Send, CancelScheduled, Receive, HasAvailable, Settle, ReceiveDeferred, Peek, Purge,
    CommitTransaction, AcceptSession, RenewSession, ReleaseSession, GetSessionState, SetSessionState)
"""Every partition request type, for operation tables (each must cover them all)."""


# ---------------------------------------------------------------------------- encoding


def _session_ref(fields: Sequence[Any] | None) -> SessionRef | None:
    return None if fields is None else SessionRef(fields[0], fields[1])


def settlements_to_wire(settlements: Sequence[Settlement]) -> list[list[Any]]:
    """Settlements as they cross Ray: each a list (partition and router requests carry them so)."""
    return [list(s) for s in settlements]


def settlements_from_wire(fields: Sequence[Sequence[Any]]) -> list[Settlement]:
    """The settlements `settlements_to_wire` gave `fields` for, typed again."""
    return [Settlement._make(s) for s in fields]


def _encode_send(r: Send) -> list[Any]:
    return [Send.OPERATION, r.entity, r.envelopes, None if r.producer is None else list(r.producer)]


def _decode_send(f: Sequence[Any]) -> Send:
    return Send(f[1], f[2], None if f[3] is None else (f[3][0], f[3][1]))


def _encode_settle(r: Settle) -> list[Any]:
    return [Settle.OPERATION, r.entity, r.subq, settlements_to_wire(r.settlements),
            None if r.session is None else list(r.session)]


def _decode_settle(f: Sequence[Any]) -> Settle:
    return Settle(f[1], f[2], settlements_from_wire(f[3]), _session_ref(f[4]))


def _encode_receive(r: Receive) -> list[Any]:
    return [Receive.OPERATION, r.entity, r.subq, r.max_count, r.mode, None if r.session is None else list(r.session),
            r.session_seen]


def _decode_receive(f: Sequence[Any]) -> Receive:
    return Receive(f[1], f[2], f[3], f[4], _session_ref(f[5]), f[6])


def _encode_receive_deferred(r: ReceiveDeferred) -> list[Any]:
    return [ReceiveDeferred.OPERATION, r.entity, r.subq, r.sequence_numbers, r.mode,
            None if r.session is None else list(r.session)]


def _decode_receive_deferred(f: Sequence[Any]) -> ReceiveDeferred:
    return ReceiveDeferred(f[1], f[2], f[3], f[4], _session_ref(f[5]))


def _encode_commit(r: CommitTransaction) -> list[Any]:
    return [CommitTransaction.OPERATION, r.transaction_id, r.deadline, [encode(op) for op in r.operations]]


def _decode_commit(f: Sequence[Any]) -> CommitTransaction:
    return CommitTransaction(f[1], f[2], [decode(op) for op in f[3]])


def _encode_session_call(r: SessionOperation) -> list[Any]:
    return [r.OPERATION, r.entity, list(r.session), *r[2:]]


def _session_decoder(cls: Any) -> Callable[[Sequence[Any]], PartitionRequest]:
    def decode_session_call(f: Sequence[Any]) -> PartitionRequest:
        return cls(f[1], SessionRef(f[2][0], f[2][1]), *f[3:])  # type: ignore[no-any-return]
    return decode_session_call


def _flat_decoder(cls: Any) -> Callable[[Sequence[Any]], PartitionRequest]:
    def decode_flat(f: Sequence[Any]) -> PartitionRequest:
        return cls(*f[1:])  # type: ignore[no-any-return]
    return decode_flat


_ENCODERS: dict[type[Any], Callable[[Any], list[Any]]] = {
    Send: _encode_send, Settle: _encode_settle, Receive: _encode_receive, ReceiveDeferred: _encode_receive_deferred,
    CommitTransaction: _encode_commit, RenewSession: _encode_session_call, ReleaseSession: _encode_session_call,
    GetSessionState: _encode_session_call, SetSessionState: _encode_session_call}
"""The records holding records: each encoded by a function of its own (the rest field by field)."""

_DECODERS: dict[str, Callable[[Sequence[Any]], PartitionRequest]] = {
    **{cls.OPERATION: _flat_decoder(cls) for cls in PARTITION_REQUESTS},
    Send.OPERATION: _decode_send, Settle.OPERATION: _decode_settle, Receive.OPERATION: _decode_receive,
    ReceiveDeferred.OPERATION: _decode_receive_deferred, CommitTransaction.OPERATION: _decode_commit,
    **{cls.OPERATION: _session_decoder(cls) for cls in (RenewSession, ReleaseSession, GetSessionState,
                                                         SetSessionState)}}
"""How each partition request is rebuilt from its list, by operation name."""


def encode(request: PartitionRequest) -> list[Any]:
    """A partition request as it crosses Ray: `[OPERATION, *fields]`, nested records as lists.

    Example:
        >>> encode(Settle("q", 0, [Settlement("complete", 7, b"t")]))
        ['settle', 'q', 0, [['complete', 7, b't', None, None]], None]
    """
    encoder = _ENCODERS.get(type(request))
    return [request.OPERATION, *request] if encoder is None else encoder(request)


def decode(fields: Sequence[Any]) -> PartitionRequest:
    """The partition request `encode` gave `fields` for, typed again (nested records too);
    `InvalidOperationError` for an operation no partition runs.

    Example:
        >>> decode(['settle', 'q', 0, [['complete', 7, b't', None, None]], None]).settlements[0].sequence_number
        7
    """
    decoder = _DECODERS.get(fields[0]) if fields else None
    if decoder is None:
        raise InvalidOperationError(f"partitions run no operation {fields[0] if fields else None!r}; they run "
                                    f"{', '.join(sorted(_DECODERS))}")
    return decoder(fields)
