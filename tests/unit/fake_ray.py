"""A stand-in for a Ray actor call's object ref, for tests of the Ray shell without Ray running."""
from __future__ import annotations

import concurrent.futures
from typing import Any


class FakeRef:
    """An actor call's object ref that answered `outcome` (failed with it when it is an error), or
    that has not answered (`silent`) until the test calls `answer`, if ever."""

    def __init__(self, outcome: Any = None, *, silent: bool = False) -> None:
        self._done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if not silent:
            self.answer(outcome)

    def answer(self, outcome: Any) -> None:
        """The call answers `outcome` now (fails with it when it is an error)."""
        if isinstance(outcome, BaseException):
            self._done.set_exception(outcome)
        else:
            self._done.set_result(outcome)

    def future(self) -> concurrent.futures.Future[Any]:
        """The call's future, as `ObjectRef.future()` gives it."""
        return self._done
