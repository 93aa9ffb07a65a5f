"""The pytest plugin the runner loads into the SDK's test run (`-p sdk_live_plugin`):

- the `test_proxy` fixture the SDK's conftest asks for (no recording proxy here);
- plain AMQP to the namespace's front end: an SDK client or handler made for its address (with a
  fully qualified namespace, or from a connection string without `UseDevelopmentEmulator=true`)
  gets `use_tls=False`, as `UseDevelopmentEmulator=true` gives it; the front end has no AMQP over
  TLS, and the SDK would otherwise go to port 5671 with TLS. Nothing else of the SDK is changed;
- the selection the runner passes (SB_LIVE_SELECTION, a JSON file: `deselect`, ids with reasons;
  `only`, the ids to run or null for all; `slow`, ids with the seconds they may take);
- a JSON report (SB_LIVE_REPORT): every test's outcome, the first line of its error and the
  seconds it took (setup, call and teardown), and how
  many of the tests collected the `deselect` list leaves out."""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Callable, Iterator

import pytest

ENDPOINT = os.environ["SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"]
"""The front end's host:port."""


def _ours(fully_qualified_namespace: Any) -> bool:
    """Whether an SDK client's namespace argument is the front end's address."""
    if not isinstance(fully_qualified_namespace, str):
        return False
    host = fully_qualified_namespace.strip().split("://", 1)[-1].split("/", 1)[0]
    return host == ENDPOINT


def _plain_amqp(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        if _ours(args[0] if args else kwargs.get("fully_qualified_namespace")):
            kwargs["use_tls"] = False
        init(self, *args, **kwargs)
    return patched


def _patch_sdk() -> None:
    from azure.servicebus import ServiceBusClient
    from azure.servicebus._base_handler import BaseHandler
    from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
    from azure.servicebus.aio._base_handler_async import BaseHandler as AsyncBaseHandler

    for cls in (ServiceBusClient, AsyncServiceBusClient, BaseHandler, AsyncBaseHandler):
        cls.__init__ = _plain_amqp(cls.__init__)  # type: ignore[method-assign]


_patch_sdk()


@pytest.fixture(scope="session")
def test_proxy() -> Iterator[None]:
    """No recording proxy: live tests only."""
    yield


def _matches(nodeid: str, entry: str) -> bool:
    """Whether a selection entry names this test: its id, its id without parameters, its class,
    its file, or a directory (ending with '/')."""
    if entry.endswith("/"):
        return nodeid.startswith(entry)
    return nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "[")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("SB_LIVE_SELECTION")
    if not path:
        return
    with open(path, encoding="utf-8") as stream:
        selection = json.load(stream)
    deselect, only, slow = list(selection.get("deselect", {})), selection.get("only"), selection.get("slow", {})
    keep, drop, unwanted = [], [], 0
    for item in items:
        seconds = next((s for entry, s in slow.items() if _matches(item.nodeid, entry)), None)
        if seconds is not None:
            item.add_marker(pytest.mark.timeout(seconds))
        left_out = any(_matches(item.nodeid, entry) for entry in deselect)
        wanted = only is None or any(_matches(item.nodeid, entry) for entry in only)
        unwanted += left_out
        (keep if wanted and not left_out else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _REPORT["deselected"] = unwanted


_OUTCOMES: dict[str, dict[str, object]] = {}
_REPORT: dict[str, object] = {"outcomes": _OUTCOMES, "deselected": 0}


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "error": "", "seconds": 0.0})
    entry["seconds"] = round(float(entry["seconds"]) + report.duration, 2)  # type: ignore[arg-type]
    if report.failed and entry["outcome"] != "failed":
        entry.update(outcome="failed", error=_first_line(report))
    elif report.skipped and entry["outcome"] == "passed":
        entry.update(outcome="skipped", error=_first_line(report))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _OUTCOMES[report.nodeid] = {"outcome": "failed", "error": "collection: " + _first_line(report)}


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("SB_LIVE_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(_REPORT, stream, indent=1, sort_keys=True)
