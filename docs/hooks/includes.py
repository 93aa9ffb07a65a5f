"""MkDocs hook: pages made of a file that lives elsewhere in the repository.

A line `<!-- include PATH -->` (PATH from the repository's root) is replaced by that file's text.
Its links to files beside it (manifests, scripts), which are not pages of the site, become the
files' repository paths in code, so the site builds in strict mode and the file stays the one
source of its text.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

INCLUDE = re.compile(r"^<!-- include (\S+) -->$", re.M)
LINK = re.compile(r"\[([^\]]+)\]\(([^)#:\s]+)\)")
ROOT = Path(__file__).resolve().parents[2]


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Put each included file in place of its line."""
    return INCLUDE.sub(lambda m: _included(m.group(1)), markdown)


def _included(path: str) -> str:
    source = ROOT / path
    folder = Path(path).parent
    text = source.read_text(encoding="utf-8")
    return LINK.sub(lambda m: _repository_path(m.group(1), (folder / m.group(2)).as_posix()), text)


def _repository_path(label: str, target: str) -> str:
    return f"`{target}`" if label.strip("`") == Path(target).name else f"{label} (`{target}`)"
