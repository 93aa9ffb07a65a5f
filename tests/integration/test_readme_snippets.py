"""The Python snippets of README and of the documentation site's pages (`docs/`): each has a namespace
of its own and removes it at its end, so each runs again, and after any other; the main ones run
one after another in a process of their own (as one script of a user's would); with --long, twice
each, and the guides' other ones after them, once each. A program using the library as the
snippets do sees none of Ray's own notices."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import isolated_env, short_tmpdir

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""README and the site's pages, whose snippets a user copies."""
RAY_NOTICES = ("(raylet)", "Token authentication", "WARNING")
"""Text of Ray's start-up and worker notices, which must not reach a library user."""
MAIN_SNIPPETS = ("shop", "shop-async", "topics", "clock-demo")
"""The namespaces the main snippets start, in the order they run."""
GUIDE_SNIPPETS = ("transactions", "forwarding", "locks", "operator-demo")
"""The namespaces of the guides' other snippets that run on a local Ray alone, run with --long (each
namespace's start is 17 actor processes; the features they show have tests of their own; the Spark
one needs a Spark session, and the Azure SDK one a fixed port: their guides' own tests cover them)."""
RUN_SNIPPETS = """
import sys
for runs, path in zip(sys.argv[1::2], sys.argv[2::2]):
    source = open(path, encoding="utf-8").read()
    for run in range(1, int(runs) + 1):
        exec(compile(source, path, "exec"), {"__name__": "__main__"})
        print("RUN", path, run, "OK", flush=True)
"""
"""Runs the snippets given as pairs of arguments (how many times in a row, the path), in order."""


def python_snippets() -> list[str]:
    """Every ```python block of README and of the site's pages, as written (one shown on two pages
    counts once)."""
    found = [s for page in PAGES for s in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]
    return list(dict.fromkeys(found))


def started_namespaces(snippet: str) -> list[str]:
    """The names of the namespaces a snippet starts."""
    return re.findall(r"\brba?\.start\(\"([^\"]+)\"", snippet)


def snippet_starting(name: str) -> str:
    """The one snippet that starts namespace `name`."""
    (snippet,) = [s for s in python_snippets() if name in started_namespaces(s)]
    return snippet


def test_each_snippet_that_starts_a_namespace_has_its_own_and_deletes_it() -> None:
    starting = [s for s in python_snippets() if started_namespaces(s)]
    names = [name for s in starting for name in started_namespaces(s)]
    assert len(starting) >= 7 and len(names) == len(set(names)), names
    for snippet in starting:
        for name in started_namespaces(snippet):
            assert re.search(rf"\brba?\.stop\(\"{re.escape(name)}\", delete_data=True\)", snippet), snippet


def test_snippets_without_a_namespace_of_their_own_start_none() -> None:
    """Nor do they make entities with the Python client (the administration client's snippet works on
    the namespace its connection string names, as the SDK's own samples do)."""
    for snippet in python_snippets():
        if not started_namespaces(snippet):
            assert "rb.start" not in snippet and not re.search(r"\bns\.create_queue", snippet), snippet


@pytest.mark.ray
def test_the_snippets_run_in_a_process_of_their_own_without_ray_notices(tmp_path: Path, long_run: bool) -> None:
    """The main snippets one after another in one process; with --long, twice each (a snippet runs
    again after itself), then the guides' other ones."""
    runs = {name: 2 if long_run else 1 for name in MAIN_SNIPPETS} | \
        ({name: 1 for name in GUIDE_SNIPPETS} if long_run else {})
    scripts = {name: tmp_path / f"{name}.py" for name in runs}
    for name, script in scripts.items():
        script.write_text(snippet_starting(name), encoding="utf-8")
    ray_tmpdir = short_tmpdir("rb-readme-")
    try:
        result = subprocess.run([sys.executable, "-c", RUN_SNIPPETS,
                                 *(str(arg) for name in runs for arg in (runs[name], scripts[name]))],
                                capture_output=True, text=True, env=isolated_env(ray_tmpdir, str(tmp_path / "home")),
                                cwd=str(tmp_path), timeout=600, check=False)
    finally:
        shutil.rmtree(ray_tmpdir, ignore_errors=True)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert [line for line in result.stdout.splitlines() if line.startswith("RUN ")] == \
        [f"RUN {scripts[name]} {run} OK" for name in runs for run in range(1, runs[name] + 1)]
    for notice in RAY_NOTICES:
        assert notice not in result.stdout + result.stderr, f"Ray's notice reached the user:\n{result.stdout}\n" \
                                                            f"{result.stderr}"
    assert "lock lost" not in result.stdout, result.stdout
    assert not any((tmp_path / "home" / name).exists() for name in MAIN_SNIPPETS)


@pytest.mark.ray
@pytest.mark.slow
def test_the_async_snippet_alone_prints_none_of_rays_notices(tmp_path: Path) -> None:
    """Its `rba.start` starts Ray off the main thread (the library's thread for blocking calls)."""
    ray_tmpdir = short_tmpdir("rb-readme-")
    try:
        result = subprocess.run([sys.executable, "-c", snippet_starting("shop-async")], capture_output=True,
                                text=True, env=isolated_env(ray_tmpdir, str(tmp_path / "home")), cwd=str(tmp_path),
                                timeout=600, check=False)
    finally:
        shutil.rmtree(ray_tmpdir, ignore_errors=True)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    for notice in (*RAY_NOTICES, "SIGTERM handler"):
        assert notice not in result.stdout + result.stderr, f"Ray's notice reached the user:\n{result.stderr}"
