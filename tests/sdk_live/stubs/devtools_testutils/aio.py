"""Stand-in for devtools_testutils.aio: live async tests run as they are."""
from __future__ import annotations

from typing import Any, Callable


def recorded_by_proxy_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """No recording proxy: the test itself."""
    return fn
