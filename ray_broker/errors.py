"""Typed errors raised by ray_broker.

Every error names what was wrong and what to do about it. All broker errors derive from
`ServiceBusError`; `MessageAlreadySettled` is a `ValueError`, as in the azure-servicebus SDK.
"""
from __future__ import annotations

from typing import Any

__all__ = [
    "ServiceBusError",
    "MessagingEntityNotFoundError",
    "NamespaceNotRunningError",
    "MessagingEntityAlreadyExistsError",
    "MessagingEntityDisabledError",
    "MessageSizeExceededError",
    "InvalidOperationError",
    "InvalidArgumentError",
    "PartitionUnavailableError",
    "MessageLockLostError",
    "MessageNotFoundError",
    "SessionLockLostError",
    "SessionCannotBeLockedError",
    "QuotaExceededError",
    "OperationTimeoutError",
    "TransactionTimeoutError",
    "ServerBusyError",
    "UnauthorizedError",
    "StoreLockedError",
    "ReplicationError",
    "StaleEpochError",
    "OutOfOrderChangeError",
    "ClusterUnreachableError",
    "RayStartupError",
    "MissingDependencyError",
    "PortUnavailableError",
    "EmulatorConfigError",
    "MessageAlreadySettled",
    "ReplicationWarning",
    "unwrap_remote_error",
    "RuleSyntaxError",
]


class ServiceBusError(Exception):
    """Base class of every broker error.

    `entity` and `partition` name where the error happened when that is known.
    """

    def __init__(self, message: str, *, entity: str | None = None, partition: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.entity = entity
        self.partition = partition

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.entity, self.partition))


def _rebuild(cls: type[ServiceBusError], message: str, entity: str | None, partition: int | None) -> ServiceBusError:
    return cls(message, entity=entity, partition=partition)


class MessagingEntityNotFoundError(ServiceBusError):
    """The queue, topic or subscription does not exist."""


class NamespaceNotRunningError(MessagingEntityNotFoundError):
    """No reachable Ray cluster runs the namespace; the message says how to start it."""


class MessagingEntityAlreadyExistsError(ServiceBusError):
    """An entity with that name (compared case-insensitively) already exists."""


class MessagingEntityDisabledError(ServiceBusError):
    """The entity's status forbids the operation (Disabled, SendDisabled, ReceiveDisabled)."""


class MessageSizeExceededError(ServiceBusError, ValueError):
    """A message or a batch is larger than the namespace allows."""


class InvalidOperationError(ServiceBusError):
    """The operation is not allowed here (SKU, entity settings, keys, receiver kind)."""


class InvalidArgumentError(InvalidOperationError, ValueError):
    """An argument is malformed or out of range (a name, a duration, a count, a type)."""


class PartitionUnavailableError(ServiceBusError):
    """The partition that must serve a keyed operation did not answer within the timeout."""


class NotLeaderError(PartitionUnavailableError):
    """A replica that does not lead its partition (a follower, or a leader that was deposed or
    cannot reach enough followers) was asked to serve it: the caller finds the leader in the
    routing table and asks again."""


class MessageLockLostError(ServiceBusError):
    """The message's lock expired or the message was settled elsewhere."""


class MessageNotFoundError(ServiceBusError):
    """No message with that sequence number is in the state the operation needs."""


class SessionLockLostError(ServiceBusError):
    """The session lock expired or was released."""


class SessionCannotBeLockedError(ServiceBusError):
    """The session is locked by another receiver."""


class QuotaExceededError(ServiceBusError):
    """A namespace or entity quota would be exceeded."""


class OperationTimeoutError(ServiceBusError):
    """The operation did not complete within its time limit."""


class TransactionTimeoutError(OperationTimeoutError):
    """A transaction was not committed within 2 minutes of its first operation and was rolled back."""


class ServerBusyError(ServiceBusError):
    """The broker is overloaded; retry after a back-off."""


class UnauthorizedError(ServiceBusError):
    """The caller may not perform this operation."""


class StoreLockedError(InvalidOperationError):
    """Another process owns the partition store: one writer per store, so this opener touched nothing."""


class ReplicationError(InvalidOperationError):
    """A replica of a partition's store refused a leader's change or copy.

    `epoch` and `position` are the replica's own: the epoch it follows (or leads) and the last
    change it holds, from which a leader can resume.
    """

    def __init__(self, message: str, *, epoch: int = 0, position: int = 0, entity: str | None = None,
                 partition: int | None = None) -> None:
        super().__init__(message, entity=entity, partition=partition)
        self.epoch = epoch
        self.position = position

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), dict(self.__dict__))


class StaleEpochError(ReplicationError):
    """The change, copy or epoch comes from an epoch older than the replica's: its sender was
    deposed and must stop leading."""


class OutOfOrderChangeError(ReplicationError):
    """The change does not follow the replica's last one (a gap, or a position it holds from
    another epoch): the leader resends from the replica's `position`, or sends a full copy."""


class ClusterUnreachableError(ServiceBusError, ConnectionError):
    """No Ray cluster answers at the address given (or found in RAY_ADDRESS)."""


class RayStartupError(ServiceBusError):
    """The local Ray the library starts for a program (no cluster to join) did not come up, after
    one more try; the message says what Ray reported and what to do."""


class MissingDependencyError(InvalidOperationError):
    """What was asked for needs packages that are not installed here (an extra of ray-broker,
    named in the message with its `pip install`)."""


class PortUnavailableError(InvalidOperationError):
    """A port the namespace would serve on cannot be listened on (another process holds it, or it
    needs privileges): found before anything is started."""


class EmulatorConfigError(InvalidArgumentError):
    """The emulator's `Config.json` cannot be used: it is not JSON (the message gives the line and
    column), or it names an unknown property or a value the broker refuses (the message names the
    entity and the property). Found before anything is started."""


class ReplicationWarning(UserWarning):
    """A replication setting that is accepted but protects less than it may seem to
    (`replicas=2` cannot fail over)."""


class MessageAlreadySettled(ValueError):
    """The message was already settled, or was received in RECEIVE_AND_DELETE mode."""


def unwrap_remote_error(exc: BaseException) -> BaseException:
    """Return the broker error carried inside a Ray task error, or `exc` itself.

    Ray wraps an exception raised in an actor in a `RayTaskError` whose `cause` is the original;
    callers should see the typed broker error with its own message, not the wrapper.
    """
    seen = 0
    while seen < 8:
        cause = getattr(exc, "cause", None)
        if cause is None or cause is exc or not isinstance(cause, BaseException):
            break
        exc = cause
        seen += 1
    return exc


class RuleSyntaxError(InvalidArgumentError):
    """A SQL filter or SQL rule action cannot be parsed.

    `expression` is the text, `line` and `column` (1-based) where the problem is; the message says
    what was expected there.
    """

    def __init__(self, message: str, *, expression: str | None = None, line: int | None = None,
                 column: int | None = None, entity: str | None = None, partition: int | None = None) -> None:
        super().__init__(message, entity=entity, partition=partition)
        self.expression = expression
        self.line = line
        self.column = column

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,), dict(self.__dict__))
