"""A partition's waiting receives: calls that park on a condition until messages may be available
(every group of operations that may make some available notifies it), each check the receive
itself, and which end at once when their receiver closes."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from ray_broker.callers import CallerWatch, Token
from ray_broker.protocol import PEEK_LOCK
from ray_broker.routing.receive_state import release_op
from ray_broker.wire import PartitionRequest, Receive, Settle

logger = logging.getLogger("ray_broker.partition")


class WaitingReceives:
    """The waits of one partition.

    Args:
        lock: the partition's lock (the condition's).
        run: runs one partition request on the engine (under the lock, made durable).
        where: names the partition in log lines.
    """

    def __init__(self, lock: threading.RLock, run: Callable[[PartitionRequest], Any], where: str) -> None:
        self.changed = threading.Condition(lock)
        """Notified whenever messages may have become available."""
        self._lock = lock
        self._run = run
        self._where = where
        self._callers = CallerWatch()
        self._waiting: dict[str, int] = {}
        """Receivers with waiting receives under way here, and how many."""
        self._ended: set[str] = set()
        """Receivers whose waiting receives are to end now (they are closing)."""

    def wait(self, check: Callable[[], Any], timeout: float) -> Any:
        """Run `check` (under the lock) now and after every wake-up until it returns something
        other than None, or `timeout` seconds pass (then one last check)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                result = check()
                if result is not None:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.changed.wait(remaining)

    def receive(self, receiver_id: str, request: Receive, timeout: float, caller: Token | None) -> dict[str, Any]:
        """Run `request` for `receiver_id` as soon as it finds messages (up to `timeout`; an empty
        reply then, or at once when `end` is called for the receiver).

        Each check (at the start and after every wake-up) is the receive itself, one transaction
        that finds the messages or nothing, rather than a test for messages and then the receive.
        Messages found after waiting go only to a `caller` that is still there (see `callers`):
        those locked for one that died are released at once, no delivery counted."""
        empty: dict[str, Any] = {"messages": [], "more": False, "backlog": 0}
        checks = 0

        def ready() -> dict[str, Any] | None:
            nonlocal checks
            checks += 1
            if receiver_id in self._ended:
                return empty
            reply: dict[str, Any] = self._run(request)
            return reply if reply["messages"] else None

        with self._lock:
            self._waiting[receiver_id] = self._waiting.get(receiver_id, 0) + 1
        try:
            reply = self.wait(ready, timeout)
        finally:
            with self._lock:
                left = self._waiting.pop(receiver_id) - 1
                if left:
                    self._waiting[receiver_id] = left
                else:
                    self._ended.discard(receiver_id)
        if reply is None:
            return empty
        if checks > 1 and request.mode == PEEK_LOCK and reply["messages"] and self._callers.gone(caller):
            self._release(request, reply["messages"])
            return empty
        return reply

    def _release(self, request: Receive, records: list[dict[str, Any]]) -> None:
        """Release messages locked for a caller that is gone, without counting a delivery."""
        ops = [release_op(r) for r in records]
        logger.warning("%s: the caller of a waiting receive on %r is gone; %d message(s) locked for it released",
                       self._where, request.entity, len(ops))
        self._run(Settle(request.entity, request.subq, ops, request.session))

    def end(self, receiver_id: str) -> None:
        """End the waiting receives of `receiver_id` now, if any is under way (its receiver is closing)."""
        with self._lock:
            if receiver_id in self._waiting:
                self._ended.add(receiver_id)
                self.changed.notify_all()
