"""One thread, alive as long as the process, for the blocking calls an event loop hands off.

Starting a local Ray from a thread ties Ray's processes to that thread: Linux kills them when the
thread that started them ends (Ray starts them with `PR_SET_PDEATHSIG`). A pool thread, such as
`asyncio.to_thread` uses, ends when `asyncio.run` shuts the loop's executor down, which would take
an embedded Ray along with it while the process still uses it (an exception leaving
`asyncio.run` then hangs in Ray's exception hook). This thread is a daemon that never ends, so a
Ray started from it lives as long as the process, as one started from the main thread does.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from typing import Any, Callable

_Job = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]


class BlockingThread:
    """Runs calls one at a time on a daemon thread that lives as long as the process."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, function: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Queue `function(*args)`; its future holds the result or the exception."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="ray-broker-blocking", daemon=True)
                self._thread.start()
        self._jobs.put((future, function, args))
        return future

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` on the thread, awaited on the running event loop."""
        return await asyncio.wrap_future(self.submit(function, *args))

    def _serve(self) -> None:
        while True:
            future, function, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                future.set_exception(exc)


BLOCKING = BlockingThread()
"""The process's thread for blocking lifecycle calls made from event loops."""
