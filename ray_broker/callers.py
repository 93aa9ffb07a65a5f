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
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, OwnerDiedError

CALLER_CHECK_S = 2.0
"""How long a check waits for the token; a check that does not finish counts the caller as there."""

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
