"""One event loop on a daemon thread, where an adapter's async work runs (sync callers wait on it)."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, TypeVar

from ..errors import InvalidOperationError

T = TypeVar("T")


class LoopThread:
    """An asyncio loop running on its own daemon thread.

    Example:
        loop = LoopThread("tasks")
        assert loop.run(asyncio.sleep(0, result=1)) == 1
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result from this (other) thread."""
        try:
            self.check_outside()
        except InvalidOperationError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def check_outside(self) -> None:
        """`InvalidOperationError` when called on the loop's own thread, which a sync call would block."""
        if threading.current_thread() is self._thread:
            raise InvalidOperationError("a sync adapter method was called from the adapter's own event loop "
                                        "(an async task handler): await its async variant instead")

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and await its result from the caller's loop."""
        if threading.current_thread() is self._thread:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def spawn(self, coro: Coroutine[Any, Any, T]) -> "asyncio.Future[T]":
        """Start `coro` on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[return-value]
