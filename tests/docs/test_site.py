"""The documentation site builds in strict mode: a broken link, a missing page or a reference the
API pages cannot resolve fails the build, and so this test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("ray-broker start", "ray-broker emulator", "ray-broker purge", "ray-broker queue create"):
        assert command in cli, f"the command-line reference lacks {command!r}"
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("get_queue_sender", "receive_messages", "MessagingEntityNotFoundError", "advance_clock"):
        assert name in api, f"the API reference lacks {name!r}"


def test_readme_is_a_first_visit_that_links_into_the_site() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert linked, "README links to no page of the documentation"
    assert all((ROOT / path).is_file() for path in linked), sorted(p for p in linked if not (ROOT / p).is_file())
