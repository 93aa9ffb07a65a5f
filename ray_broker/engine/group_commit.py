"""Group commit: concurrent callers of one partition share one store commit.

Callers on several threads `submit` their work, a list of partition requests (`wire`, as a
partition's `run_batch` takes them). The first caller to find no commit under way leads: it takes the queued
submissions in arrival order (up to a bound on their operations), runs them all in one
`PartitionEngine.unit_of_work()` (a lone operation bare: it commits itself), commits once, and
only then answers every caller of the group with its results or its error. Callers that arrived
meanwhile wait for the next group, which the leader hands to the first of them. Nothing is
answered before the commit that holds it.

Each caller's work keeps its own semantics inside the group: every operation runs in a savepoint
of its own (the engine's operations open one each), and an operation that raises ends that
caller's work only (its earlier operations stay, as do the other callers'). A commit that fails
fails every caller of its group and rolls the whole group back, leaving the engine usable.

The `Group` is the unit a replicated partition ships to its followers: one commit, one round.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Callable, ContextManager, Iterator, Sequence

from ..wire import PartitionRequest
from .operations import operation
from .partition import PartitionEngine

logger = logging.getLogger("ray_broker.group_commit")

Execute = Callable[[PartitionRequest], Any]
"""Runs one partition request on the engine and returns its result."""

MAX_GROUP_OPERATIONS = 256
"""A group takes queued submissions until it holds this many operations (always at least one
submission): a bound on how long one commit keeps the engine and its callers waiting."""


class TransactionLostError(RuntimeError):
    """SQLite rolled back a group's transaction itself (as it does on some I/O errors): the group
    failed as a whole."""


class Submission:
    """One caller's work: its operations, then its results or its error once its group is done.

    Args:
        requests: the operations, run in order; the first that raises ends the rest.
    """

    def __init__(self, requests: Sequence[PartitionRequest]) -> None:
        self.requests: list[PartitionRequest] = list(requests)
        self.results: list[Any] = []
        """The results of the operations that ran, in order."""
        self.error: BaseException | None = None
        """The error that ended the work (an operation's, or the group's commit failure)."""
        self._event = threading.Event()
        self._answered = False

    def run(self, execute: Execute) -> None:
        """Run the operations in order until one raises (its error is kept, the rest skipped)."""
        for request in self.requests:
            try:
                self.results.append(execute(request))
            except Exception as exc:  # noqa: BLE001 - the caller's error, raised to it once its group is committed
                self.error = exc
                return

    def fail(self, error: BaseException) -> None:
        """The group failed as a whole: nothing of this work was kept."""
        self.results = []
        self.error = error

    def answer(self) -> None:
        """Wake the caller: its group is committed (or failed)."""
        self._answered = True
        self._event.set()

    def hand_lead(self) -> None:
        """Wake the caller to lead the next group, which begins with this submission."""
        self._event.set()

    def wait(self) -> bool:
        """Block until answered (False) or handed the lead (True)."""
        self._event.wait()
        return not self._answered

    def outcome(self) -> list[Any]:
        """The results, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.results


class Group:
    """Submissions committed together, in arrival order, in one store transaction.

    Args:
        number: the group's place among the groups this committer has formed (1, 2, ...).
        submissions: the callers' work, in arrival order.
    """

    def __init__(self, number: int, submissions: list[Submission]) -> None:
        self.number = number
        self.submissions = submissions

    def __len__(self) -> int:
        return len(self.submissions)

    def requests(self) -> Iterator[PartitionRequest]:
        """Every request of the group, in order."""
        return (request for submission in self.submissions for request in submission.requests)


class GroupCommitter:
    """Runs the work of concurrent callers on `engine` in shared commits.

    Args:
        engine: the partition's engine.
        execute: runs one request (default: through the operation table, `engine.operations`).
        lock: held around every group, to serialize the engine with its other users.
        durable: called after each group's commit, under `lock`, to make the commit durable beyond
            this store (a replicated partition ships it to its followers); when it raises, the group's
            callers get its error instead of their results (their work is committed here, but not
            acknowledged).
        committed: called with each group after its commit and before its callers are answered,
            still under `lock`; it must not raise (an error there is logged and ignored).
        max_operations: see `MAX_GROUP_OPERATIONS`.

    Example:
        >>> from ray_broker.engine.store import Store
        >>> from ray_broker.wire import ListEntities
        >>> committer = GroupCommitter(PartitionEngine(0, 1, Store(None, "memory")))
        >>> committer.submit([ListEntities()])
        [[]]
    """

    def __init__(self, engine: PartitionEngine, execute: Execute | None = None, *,
                 lock: ContextManager[Any] | None = None, durable: Callable[[], None] | None = None,
                 committed: Callable[[Group], None] | None = None,
                 max_operations: int = MAX_GROUP_OPERATIONS) -> None:
        self._engine = engine
        self._execute: Execute = execute or (lambda request: operation(request).run(engine, request))
        self._lock: ContextManager[Any] = lock if lock is not None else threading.RLock()
        self._durable = durable
        self._committed = committed
        self._max_operations = max_operations
        self._mutex = threading.Lock()
        """Guards the queue, the leading flag and the group count."""
        self._queue: deque[Submission] = deque()
        self._leading = False
        self._groups = 0

    @property
    def queued(self) -> int:
        """How many submissions wait for a group to take them."""
        with self._mutex:
            return len(self._queue)

    def submit(self, requests: Sequence[PartitionRequest]) -> list[Any]:
        """Run `requests` in order in the next group; their results once that group is committed.

        Raises the error of the operation that ended them (the ones before it are committed), or
        the group's commit failure (nothing of them is)."""
        submission = Submission(requests)
        with self._mutex:
            self._queue.append(submission)
            leads = not self._leading
            self._leading = True
        if leads or submission.wait():
            self._lead()
        return submission.outcome()

    def _lead(self) -> None:
        """Commit the next group (it begins with the leader's own submission), then hand the lead
        to the first caller queued meanwhile, or give it up."""
        with self._mutex:
            group = self._take()
        try:
            self._commit(group)
        finally:
            with self._mutex:
                if self._queue:
                    self._queue[0].hand_lead()
                else:
                    self._leading = False

    def _take(self) -> Group:
        """The queued submissions, in arrival order, up to the operation bound (called under the mutex)."""
        taken = [self._queue.popleft()]
        operations = len(taken[0].requests)
        while self._queue and operations + len(self._queue[0].requests) <= self._max_operations:
            operations += len(self._queue[0].requests)
            taken.append(self._queue.popleft())
        self._groups += 1
        return Group(self._groups, taken)

    def _commit(self, group: Group) -> None:
        """Run the group in one unit of work and commit it; answer its callers after.

        A group of one operation runs it bare: every engine operation commits its own writes
        before it returns, so wrapping it would only add statements."""
        try:
            with self._lock:
                try:
                    if len(group) == 1 and len(group.submissions[0].requests) == 1:
                        group.submissions[0].run(self._execute)
                    else:
                        self._run_together(group)
                except BaseException as exc:
                    for submission in group.submissions:
                        submission.fail(exc)
                    if not isinstance(exc, Exception):
                        raise
                    return
                if self._durable is not None:
                    try:
                        self._durable()
                    except Exception as exc:  # noqa: BLE001 - not acknowledged: every caller of the group gets it
                        for submission in group.submissions:
                            submission.fail(exc)
                if self._committed is not None:
                    try:
                        self._committed(group)
                    except Exception:  # noqa: BLE001 - the group is committed: its callers are answered regardless
                        logger.exception("the hook after group %d's commit failed", group.number)
        finally:
            for submission in group.submissions:
                submission.answer()

    def _run_together(self, group: Group) -> None:
        """Run the group's submissions in one unit of work, committed when it ends."""
        with self._engine.unit_of_work() as db:
            for submission in group.submissions:
                submission.run(self._execute)
                if not db.in_transaction:
                    raise TransactionLostError("the store rolled the group's transaction back")
