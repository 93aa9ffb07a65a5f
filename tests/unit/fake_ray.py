"""A stand-in for a Ray actor call's object ref, for tests of the Ray shell without Ray running."""
from __future__ import annotations

import concurrent.futures
from typing import Any


class FakeRef:
    """An actor call's object ref that answered `outcome` (failed with it when it is an error), or
    that never answers (`silent`)."""

    def __init__(self, outcome: Any = None, *, silent: bool = False) -> None:
        self.outcome = outcome
        self.silent = silent

    def future(self) -> concurrent.futures.Future[Any]:
        """The call's future, as `ObjectRef.future()` gives it."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.silent:
            return done
        if isinstance(self.outcome, BaseException):
            done.set_exception(self.outcome)
        else:
            done.set_result(self.outcome)
        return done
