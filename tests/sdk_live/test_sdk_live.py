"""The azure-servicebus SDK's own live tests against namespaces of the session's Ray
(tests/sdk_live/runner.py): by default the fast subset (`selection.FAST`), every one of which must
pass; with --long every live test, where only those `selection.KNOWN_FAILING` names may fail."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import selection
from .runner import DEFAULT_CACHE, prepare, run_sdk_tests, started_namespaces

FULL_RUN_TIMEOUT_S = 3 * 3600


def run(tmp_path: Path, groups: list[list[str] | None], timeout_per_test: int) -> dict:  # type: ignore[type-arg]
    """The summary of running `groups` of the SDK's tests at once, each against a namespace of its own."""
    tests = prepare(DEFAULT_CACHE, tmp_path / "sdk")
    with started_namespaces(len(groups)) as targets:
        return run_sdk_tests(targets, tests, groups, timeout_per_test=timeout_per_test)


def test_the_fast_subset_of_the_sdks_live_tests_passes(ray_instance: None, tmp_path: Path, long_run: bool) -> None:
    if long_run:
        pytest.skip("--long runs every live test instead (test_every_sdk_live_test_passes_but_the_known_failures)")
    summary = run(tmp_path, [list(selection.FAST)], timeout_per_test=60)
    assert summary["failed"] == 0, "SDK tests failed:\n" + "\n".join(
        f"{f['id']}: {f['error']}" for f in summary["failures"]) + f"\n(pytest's output: {summary['logs']})"
    assert summary["passed"] == len(selection.FAST), json.dumps(summary, indent=1)


@pytest.mark.timeout(FULL_RUN_TIMEOUT_S)
def test_every_sdk_live_test_passes_but_the_known_failures(ray_instance: None, tmp_path: Path,
                                                           long_run: bool) -> None:
    if not long_run:
        pytest.skip("the full run takes about an hour: --long")
    summary = run(tmp_path, [list(group) for group in selection.GROUPS], timeout_per_test=150)
    unexpected = [f for f in summary["failures"] if not any(
        f["id"] == known or f["id"].startswith(known + "[") for known in selection.KNOWN_FAILING)]
    print(json.dumps({k: summary[k] for k in ("passed", "failed", "skipped", "deselected", "seconds")}))
    assert not unexpected, "SDK tests failed that are not known to:\n" + "\n".join(
        f"{f['id']}: {f['error']}" for f in unexpected)
