"""The message locks the front end's receivers hold, by lock token, for every connection of the
front end. Pure (no I/O, no Ray).

In Service Bus a lock token belongs to the entity, not to the link that received the message:
any receiver of the entity settles or renews it (the SDK completes a message on another receiver
through `$management`, and after its receive link is gone). So the front end keeps one table for
all its connections: the receiver that locked the message, the message, and the entity path it
came from (a token is refused on another entity's node, as a lock it does not know).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

from ..errors import MessageLockLostError

if TYPE_CHECKING:
    from ..message import ReceivedMessage

R = TypeVar("R")
PRUNE_EVERY = 1000
"""Locks held between two sweeps of the locks that ran out unsettled."""
GRACE_S = 60.0
"""How long after its expiry a lock stays in the table (a renewal may be on its way)."""


@dataclass
class HeldLock(Generic[R]):
    """One lock: the entity path it was taken on, the receiver that holds it, the message."""

    path: str
    receiver: R
    message: ReceivedMessage


class HeldLocks(Generic[R]):
    """The locks of a front end's receivers by lock token.

    Args:
        clock: epoch seconds now (locks that ran out are swept from time to time).

    Example:
        locks = HeldLocks()
        locks.hold("orders", receiver, message)
        held = locks.get(message.lock_token, "orders")   # from any connection of the front end
        locks.drop(message.lock_token)                   # once settled
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._locks: dict[uuid.UUID, HeldLock[R]] = {}
        self._since_sweep = 0

    def __len__(self) -> int:
        return len(self._locks)

    def hold(self, path: str, receiver: R, message: ReceivedMessage) -> None:
        """Remember that `receiver` holds the lock on `message`, received from `path`."""
        if message.lock_token is None:
            return
        self._locks[message.lock_token] = HeldLock(path, receiver, message)
        self._since_sweep += 1
        if self._since_sweep >= PRUNE_EVERY:
            self._sweep()

    def get(self, token: uuid.UUID, path: str) -> HeldLock[R]:
        """The lock `token` taken on `path`; `MessageLockLostError` when no receiver of the front end
        holds it there (it expired, was settled, or was never taken on this entity)."""
        held = self._locks.get(token)
        if held is None or held.path.lower() != path.lower():
            raise MessageLockLostError(f"lock {token} is not held on {path!r} (expired, settled, or taken on "
                                       "another entity)")
        return held

    def drop(self, token: uuid.UUID | None) -> None:
        """Forget lock `token` (its message was settled)."""
        if token is not None:
            self._locks.pop(token, None)

    def _sweep(self) -> None:
        """Forget the locks that ran out more than `GRACE_S` ago."""
        self._since_sweep = 0
        gone = self._clock() - GRACE_S
        for token in [t for t, held in self._locks.items()
                      if held.message.locked_until is not None and held.message.locked_until < gone]:
            del self._locks[token]
