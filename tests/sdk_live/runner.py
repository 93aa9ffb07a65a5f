"""Runs the azure-servicebus SDK's own live tests, unmodified, against a ray_broker namespace.

    .venv/bin/python -m tests.sdk_live.runner            # every live test, 4 groups at once (~30 min)
    .venv/bin/python -m tests.sdk_live.runner --fast     # the CI subset (selection.FAST)
    .venv/bin/python -m tests.sdk_live.runner --only mgmt_tests/test_mgmt_queues.py

It fetches the SDK's source package with pip into a cache directory, checks its pinned SHA-256,
extracts its `tests/`, puts this directory's stubs in place of Azure's test framework
(devtools_testutils, the preparers), starts namespaces in memory with an AMQP port and a
management port on an embedded local Ray (one per group of tests, `selection.GROUPS`), runs each
group with pytest in a subprocess, and prints a JSON summary: counts in all and by file, and each
failing test with the first line of its error. Exits 0 when no selected test failed, 1 otherwise."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from . import selection
from .sdist import SDK_VERSION, extract_tests, fetch_sdist

STUBS = Path(__file__).with_name("stubs")
DEFAULT_CACHE = Path(os.environ.get("SB_LIVE_CACHE", Path.home() / ".cache" / "ray_broker" / "sdk_live"))
PYTEST_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = ignore::DeprecationWarning
markers =
    liveTest: a live test
    live_test_only: a live test only
    playback_test_only: a playback test only
"""


@dataclass(frozen=True)
class Target:
    """Where the SDK's tests find the namespace."""

    name: str
    amqp_port: int
    ray_address: str
    ca_file: str
    key_name: str
    key: str


def target_of(ns: Any) -> Target:
    """The `Target` of running namespace `ns` (an rb.Namespace serving AMQP), seen from this process's Ray."""
    import ray

    from ray_broker.management_http.certificate import certificate_path

    config = ns.config
    key = config.shared_access_keys()[0]
    return Target(config.name, config.amqp_port, str(ray.get_runtime_context().gcs_address),
                  certificate_path(config.name, config.data_dir), key.name, key.key)


@contextmanager
def started_namespaces(count: int) -> Iterator[list[Target]]:
    """`count` standard namespaces in memory, each serving AMQP and the management API on free
    ports, on this process's Ray or, when it joined none, on an embedded local Ray of its own
    (never another process's `ray start` head, which its owner may stop), stopped at the end."""
    import ray

    import ray_broker as rb
    from tests.integration.helpers import free_port

    ports: list[int] = []
    while len(ports) < 2 * count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    names: list[str] = []
    try:
        targets = []
        for amqp_port, management_port in zip(ports[::2], ports[1::2]):
            names.append(f"sdklive-{uuid.uuid4().hex[:6]}")
            ns = rb.start(names[-1], durability="memory", amqp_port=amqp_port, management_port=management_port,
                          address=None if ray.is_initialized() else "local")
            targets.append(target_of(ns))
        yield targets
    finally:
        for name in names:
            rb.stop(name)


def prepare(cache_dir: Path, work_dir: Path) -> Path:
    """The SDK's tests extracted into `work_dir`, with the stub preparers in place; returns their directory."""
    tests = extract_tests(fetch_sdist(cache_dir), work_dir)
    shutil.copyfile(STUBS / "servicebus_preparer.py", tests / "servicebus_preparer.py")
    (tests / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")
    return tests


def environment(target: Target, selection_file: Path, report_file: Path) -> dict[str, str]:
    """The test process's environment: the namespace as the SDK's live pipeline describes one, its
    certificate trusted by both administration clients, the stubs importable."""
    endpoint = f"localhost:{target.amqp_port}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTEST_ADDOPTS")}
    env.update(
        SERVICEBUS_CONNECTION_STR=(f"Endpoint=sb://{endpoint};SharedAccessKeyName={target.key_name};"
                                   f"SharedAccessKey={target.key};UseDevelopmentEmulator=true"),
        SERVICEBUS_FULLY_QUALIFIED_NAMESPACE=endpoint,
        SERVICEBUS_SAS_POLICY=target.key_name,
        SERVICEBUS_SAS_KEY=target.key,
        SB_LIVE_NAMESPACE=target.name,
        SB_LIVE_RAY_ADDRESS=target.ray_address,
        SB_LIVE_CA_FILE=target.ca_file,
        REQUESTS_CA_BUNDLE=target.ca_file,
        SSL_CERT_FILE=target.ca_file,
        SB_LIVE_SELECTION=str(selection_file),
        SB_LIVE_REPORT=str(report_file),
        PYTHONPATH=os.pathsep.join([str(STUBS), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONUNBUFFERED="1",
    )
    return env


def summarize(outcomes: dict[str, dict[str, Any]], *, deselected: int, seconds: float,
              logs: list[str]) -> dict[str, Any]:
    """The run's summary: counts in all and by file, and the failing tests with their errors."""
    by_file: dict[str, Counter[str]] = {}
    for nodeid, result in outcomes.items():
        by_file.setdefault(nodeid.split("::", 1)[0], Counter())[result["outcome"]] += 1
    totals = Counter(result["outcome"] for result in outcomes.values())
    return {
        "sdk": f"azure-servicebus {SDK_VERSION}",
        "passed": totals["passed"], "failed": totals["failed"], "skipped": totals["skipped"],
        "deselected": deselected, "seconds": round(seconds),
        "by_file": {name: {k: counts[k] for k in ("passed", "failed", "skipped")}
                    for name, counts in sorted(by_file.items())},
        "failures": [{"id": nodeid, "error": result["error"]}
                     for nodeid, result in sorted(outcomes.items()) if result["outcome"] == "failed"],
        "skips": sorted({result["error"] for result in outcomes.values() if result["outcome"] == "skipped"}),
        "logs": logs,
    }


@dataclass(frozen=True)
class GroupResult:
    """What one pytest process reported."""

    outcomes: dict[str, dict[str, Any]]
    deselected: int
    seconds: float
    log: str


def run_group(target: Target, tests: Path, label: str, *, only: Sequence[str] | None,
              timeout_per_test: int, extra_args: Sequence[str] = ()) -> GroupResult:
    """Run the SDK's tests in `tests` (every live test that needs no real Azure, or those `only`
    names) against `target` with pytest in a subprocess; its files in `tests/../<label>-*`."""
    work = tests.parent
    selection_file, report_file, log = (work / f"{label}-{name}" for name in ("selection.json", "report.json",
                                                                               "pytest.log"))
    selection_file.write_text(json.dumps({"deselect": selection.deselected(), "slow": selection.SLOW,
                                          "only": list(only) if only is not None else None}), encoding="utf-8")
    report_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-p", "sdk_live_plugin", "-p", "no:cacheprovider", "-c",
               str(tests / "pytest.ini"), "--rootdir", str(tests), "--timeout", str(timeout_per_test),
               "--tb=short", "--show-capture=no", "--continue-on-collection-errors", "-rN", "-q", *extra_args,
               str(tests)]
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.run(command, cwd=str(tests), env=environment(target, selection_file, report_file),
                                 stdout=output, stderr=subprocess.STDOUT, check=False)
    report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.exists() else {}
    if not report.get("outcomes"):
        raise RuntimeError(f"the SDK's tests ran none (pytest exited {process.returncode}); see {log}:\n"
                           + log.read_text(encoding="utf-8")[-3000:])
    return GroupResult(report["outcomes"], report["deselected"], time.monotonic() - started, str(log))


def run_sdk_tests(targets: Sequence[Target], tests: Path, groups: Sequence[Sequence[str] | None], *,
                  timeout_per_test: int = 300, extra_args: Sequence[str] = ()) -> dict[str, Any]:
    """Run each group of tests (a list of selection entries, or None for every live test) at once,
    group `i` against `targets[i]`, and return the summary of them all."""
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        results = list(pool.map(
            lambda i: run_group(targets[i], tests, f"group{i}", only=groups[i], timeout_per_test=timeout_per_test,
                                extra_args=extra_args), range(len(groups))))
    outcomes = {nodeid: outcome for result in results for nodeid, outcome in result.outcomes.items()}
    return summarize(outcomes, deselected=max(result.deselected for result in results), seconds=max(r.seconds for r in results),
                     logs=[r.log for r in results])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.sdk_live.runner", description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                        help=f"where the SDK's source package is kept (default {DEFAULT_CACHE}; env SB_LIVE_CACHE)")
    parser.add_argument("--work-dir", type=Path, help="where its tests are extracted and run (default: a temp dir)")
    parser.add_argument("--fast", action="store_true", help="run only the CI subset (selection.FAST)")
    parser.add_argument("--only", action="append", metavar="ID",
                        help="run only this test, class, file or directory/ (repeatable)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds one test may take (default 300)")
    parser.add_argument("--json", type=Path, help="also write the summary to this file")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    only = list(selection.FAST) if args.fast else args.only
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="sdk_live-"))
    tests = prepare(args.cache_dir, work_dir / "sdk")
    groups: list[Sequence[str] | None] = [only] if only is not None else list(selection.GROUPS)
    with started_namespaces(len(groups)) as targets:
        summary = run_sdk_tests(targets, tests, groups, timeout_per_test=args.timeout, extra_args=args.pytest_args)
    text = json.dumps(summary, indent=1)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
