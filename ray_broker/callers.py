"""Whether the process that made a call is still there, as the actor serving it can tell.

A caller sends, with a call that may wait a long time (a waiting receive), a token: a Ray object
this process owns, wrapped in a list so that Ray passes the reference instead of the value. When
the owner process dies, Ray answers a read of the object with `OwnerDiedError`. An actor that has
waited on the caller's behalf reads the token before handing out what it locked: it then hands
nothing to a caller that is gone and gives the messages back instead.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, OwnerDiedError

CALLER_CHECK_S = 2.0
"""How long a check waits for the token; a check that does not finish counts the caller as there."""
CALLER_FRESH_S = 0.5
"""How long a caller found there is taken as still there without asking again: about as long as
Ray itself takes to learn that a process died, so a busy receiver's waits cost no extra round trip."""
WATCHED_CALLERS = 4096
"""How many callers a `CallerWatch` remembers before it forgets those not seen lately."""

Token = list[Any]
"""A caller's token as calls carry it: `[ObjectRef]`."""

_lock = threading.Lock()
_token: Token | None = None


def caller_token() -> Token:
    """This process's token (made once; it lives as long as the process)."""
    global _token
    with _lock:
        if _token is None:
            _token = [ray.put(None)]
        return _token


def caller_gone(token: Token | None) -> bool:
    """Whether the process owning `token` has died (False without a token, or when Ray cannot tell
    within `CALLER_CHECK_S`)."""
    if not token:
        return False
    try:
        ray.get(token[0], timeout=CALLER_CHECK_S)
    except OwnerDiedError:
        return True
    except GetTimeoutError:
        return False
    return False


async def caller_gone_async(token: Token | None) -> bool:
    """`caller_gone` awaited on the running event loop."""
    if not token:
        return False
    try:
        await asyncio.wait_for(asyncio.wrap_future(token[0].future()), CALLER_CHECK_S)
    except OwnerDiedError:
        return True
    except asyncio.TimeoutError:
        return False
    return False


class CallerWatch:
    """`caller_gone`, asked at most once per `fresh_s` for each caller still there.

    Args:
        check: whether a token's process has died (`caller_gone`; injectable for tests).
        fresh_s: how long a caller found there counts as there without another check.
        clock: monotonic seconds.
    """

    def __init__(self, check: Callable[[Token | None], bool] = caller_gone, fresh_s: float = CALLER_FRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._check = check
        self._fresh_s = fresh_s
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def gone(self, token: Token | None) -> bool:
        """Whether the process owning `token` has died (False without a token)."""
        if not token:
            return False
        key = token[0].hex()
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None and now - seen < self._fresh_s:
            return False
        if self._check(token):
            with self._lock:
                self._seen.pop(key, None)
            return True
        with self._lock:
            self._seen[key] = now
            if len(self._seen) > WATCHED_CALLERS:
                self._seen = {k: t for k, t in self._seen.items() if now - t < self._fresh_s}
        return False
