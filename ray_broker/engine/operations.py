"""The partition operation table: how a `PartitionEngine` runs each partition request, and
whether running it may make messages available to waiting receivers (who are then woken).

The partition actor, and the stub channel of the tests, run every request through this table
(`operation`). Imports no Ray.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .. import wire
from ..errors import InvalidOperationError
from .partition import PartitionEngine


class Operation(NamedTuple):
    """How the engine runs one request type, and whether it may wake waiting receivers."""

    run: Callable[[PartitionEngine, Any], Any]
    wakes: bool


OPERATIONS: dict[type[Any], Operation] = {
    wire.CreateEntity: Operation(lambda e, r: e.create_entity(r.definition), False),
    wire.UpdateEntity: Operation(lambda e, r: e.update_entity(r.definition), True),
    wire.DeleteEntity: Operation(lambda e, r: e.delete_entity(r.name), False),
    wire.GetEntity: Operation(lambda e, r: e.get_entity(r.name), False),
    wire.ListEntities: Operation(lambda e, r: e.list_entities(), False),
    wire.Runtime: Operation(lambda e, r: e.runtime(r.entity), False),
    wire.ListSessions: Operation(lambda e, r: e.list_sessions(r.entity, r.updated_after), False),
    wire.IntegrityCheck: Operation(lambda e, r: e.integrity_check(), False),
    wire.AddRule: Operation(lambda e, r: e.add_rule(r.subscription, r.rule), False),
    wire.UpdateRule: Operation(lambda e, r: e.update_rule(r.subscription, r.rule), False),
    wire.RemoveRule: Operation(lambda e, r: e.remove_rule(r.subscription, r.name), False),
    wire.Send: Operation(lambda e, r: e.send(r.entity, r.envelopes, r.producer), True),
    wire.CancelScheduled: Operation(lambda e, r: e.cancel_scheduled(r.entity, r.sequence_numbers), False),
    wire.Receive: Operation(lambda e, r: e.receive(r.entity, r.subq, r.max_count, r.mode, r.session,
                                                   r.session_seen), False),
    wire.HasAvailable: Operation(lambda e, r: e.has_available(r.entity, r.subq, r.session_id, r.free_session),
                                 False),
    wire.Settle: Operation(lambda e, r: e.settle(r.entity, r.subq, r.settlements, r.session), True),
    wire.ReceiveDeferred: Operation(lambda e, r: e.receive_deferred(r.entity, r.subq, r.sequence_numbers, r.mode,
                                                                    r.session), False),
    wire.Peek: Operation(lambda e, r: e.peek(r.entity, r.subq, r.from_sequence, r.max_count, r.session_id,
                                             r.to_sequence), False),
    wire.Purge: Operation(lambda e, r: e.purge(r.entity, r.subq, r.max_count, r.before), False),
    wire.CommitTransaction: Operation(lambda e, r: e.commit_transaction(r.transaction_id, r.deadline,
                                                                        r.operations), True),
    wire.AcceptSession: Operation(lambda e, r: e.accept_session(r.entity, r.session_id), False),
    wire.RenewSession: Operation(lambda e, r: e.renew_session(r.entity, r.session.session_id,
                                                              r.session.lock_token), False),
    wire.ReleaseSession: Operation(lambda e, r: e.release_session(r.entity, r.session.session_id,
                                                                  r.session.lock_token), True),
    wire.GetSessionState: Operation(lambda e, r: e.get_session_state(r.entity, r.session.session_id,
                                                                     r.session.lock_token), False),
    wire.SetSessionState: Operation(lambda e, r: e.set_session_state(r.entity, r.session.session_id,
                                                                     r.session.lock_token, r.state), False),
}
"""Every partition request type, and how it runs."""


def operation(request: wire.PartitionRequest) -> Operation:
    """How `request` runs; `InvalidOperationError` for anything that is not a partition request."""
    found = OPERATIONS.get(type(request))
    if found is None:
        raise InvalidOperationError(f"a partition runs partition requests, not {type(request).__name__}")
    return found
