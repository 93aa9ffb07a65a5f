"""The AMQP error conditions the Azure SDKs map to their exceptions, for broker errors. Pure."""
from __future__ import annotations

import uuid

from proton import Condition, symbol

from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    SessionCannotBeLockedError,
    SessionLockLostError,
    UnauthorizedError,
)

_CONDITIONS: tuple[tuple[type[BaseException], str, int], ...] = (
    (MessagingEntityNotFoundError, "amqp:not-found", 404),
    (UnauthorizedError, "amqp:unauthorized-access", 401),
    (MessageLockLostError, "com.microsoft:message-lock-lost", 410),
    (SessionLockLostError, "com.microsoft:session-lock-lost", 410),
    (SessionCannotBeLockedError, "com.microsoft:session-cannot-be-locked", 410),
    (OperationTimeoutError, "com.microsoft:timeout", 408),
    (MessageNotFoundError, "com.microsoft:message-not-found", 404),
    (MessageSizeExceededError, "amqp:link:message-size-exceeded", 413),
    (InvalidArgumentError, "amqp:invalid-field", 400),
    (InvalidOperationError, "amqp:not-allowed", 400),
)
"""Broker error -> AMQP condition and the status code a `$management` response carries, most
specific first."""


TRACKING_ID = symbol("com.microsoft:tracking-id")


def error_condition(error: BaseException) -> Condition:
    """The AMQP error condition for a broker error (`amqp:internal-error` for anything else).

    It carries a tracking id in its info, as Service Bus errors do: the SDKs read an error's
    condition, description and info, and fail on an error without info."""
    name = next((n for kind, n, _ in _CONDITIONS if isinstance(error, kind)), "amqp:internal-error")
    return Condition(name, str(error) or type(error).__name__, {TRACKING_ID: str(uuid.uuid4())})


def status_code(error: BaseException) -> int:
    """The status code a `$management` response carries for a broker error (500 for anything else)."""
    return next((code for kind, _, code in _CONDITIONS if isinstance(error, kind)), 500)
