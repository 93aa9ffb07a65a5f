"""The web console open on a page in a real headless browser while a benchmark runs: the console
served by a thread of this process, Debian's `chromium` driven by Selenium, the page left to
refresh on its own (every few seconds) as an operator's would.

    with console_open(ns, "#/queue/orders") as watch:
        ...                       # the work measured with the console open
    watch.api_calls               # the console API calls the page made meanwhile
"""
from __future__ import annotations

import asyncio
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import ray_broker as rb
from ray_broker.console.operations import ConsoleOperations
from ray_broker.console.server import ConsoleSettings, serve

LISTEN_WAIT_S = 30.0
"""How long the console has to listen, and the page to show its first figures."""
BROWSER_ARGUMENTS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1366,900")


class ConsoleUnavailable(RuntimeError):
    """The browser or its driver is missing, or the console did not come up."""


@dataclass
class ConsoleWatch:
    """What the open page did while it was open."""

    url: str
    api_calls: int = 0
    """Console API calls the page made while the block ran (its refreshes' requests)."""
    seconds: float = 0.0
    refreshed: bool = False
    """Whether the page made a call of its own after the block began (checked when it ends,
    waiting for the next refresh if the block was shorter than one)."""

    @property
    def calls_per_s(self) -> float:
        """Console API calls a second while the page was open."""
        return self.api_calls / self.seconds if self.seconds else 0.0


def browser_missing() -> str | None:
    """Why the console cannot be opened here (None: it can)."""
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        return "needs Debian's chromium and chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium (pip install -e '.[bench]')"
    return None


@contextmanager
def _console_server(ns: rb.Namespace) -> Iterator[str]:
    """The namespace's console on a free loopback port (no token asked), served by a thread."""
    found: list[str] = []
    stopping: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        stop = asyncio.Event()
        stopping.append((asyncio.get_running_loop(), stop))
        await serve(ConsoleOperations(ns), ConsoleSettings("127.0.0.1", 0, False), found.append, stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="benchmark-console", daemon=True)
    thread.start()
    deadline = time.monotonic() + LISTEN_WAIT_S
    while not found:
        if time.monotonic() > deadline or not thread.is_alive():
            raise ConsoleUnavailable(f"the console did not listen within {LISTEN_WAIT_S:g} s")
        time.sleep(0.05)
    try:
        yield found[0]
    finally:
        loop, stop = stopping[0]
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in BROWSER_ARGUMENTS:
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


API_CALLS_SCRIPT = ("return performance.getEntriesByType('resource')"
                    ".filter(e => e.name.indexOf('/api/') >= 0).length")


@contextmanager
def console_open(ns: rb.Namespace, page: str = "#/") -> Iterator[ConsoleWatch]:
    """The console of `ns` open on `page` (a route such as "#/queue/NAME") in a headless browser,
    refreshing on its own, for the duration of the block."""
    missing = browser_missing()
    if missing is not None:
        raise ConsoleUnavailable(missing)
    with _console_server(ns) as url:
        driver = _browser()
        try:
            driver.set_script_timeout(LISTEN_WAIT_S)
            driver.get(url + page)
            driver.execute_script("performance.setResourceTimingBufferSize(100000)")
            watch = ConsoleWatch(url)
            _wait_for_figures(driver)
            calls_before = int(driver.execute_script(API_CALLS_SCRIPT))
            began = time.perf_counter()
            yield watch
            watch.seconds = time.perf_counter() - began
            watch.api_calls = int(driver.execute_script(API_CALLS_SCRIPT)) - calls_before
            _wait_for_calls(driver, calls_before + 1)
            watch.refreshed = True
        finally:
            driver.quit()


def _wait_for_figures(driver: Any) -> None:
    """Wait until the page has made its first console API call (it shows figures)."""
    _wait_for_calls(driver, 1)


def _wait_for_calls(driver: Any, calls: int) -> None:
    """Wait until the page has made `calls` console API calls since it opened."""
    deadline = time.monotonic() + LISTEN_WAIT_S
    while int(driver.execute_script(API_CALLS_SCRIPT)) < calls:
        if time.monotonic() > deadline:
            raise ConsoleUnavailable(f"the console page made no API call of its own within {LISTEN_WAIT_S:g} s")
        time.sleep(0.1)
