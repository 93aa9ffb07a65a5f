"""MkDocs hook: pages made of a file that lives elsewhere in the repository.

A line `<!-- include PATH -->` (PATH from the repository's root) is replaced by that file's text.
Its links to pages of the site (Markdown files under docs/, an anchor kept) become links from the
including page. Its links to other files beside it (manifests, scripts), which are not pages of the
site, become the files' repository paths in code, so the site builds in strict mode and the file
stays the one source of its text.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

INCLUDE = re.compile(r"^<!-- include (\S+) -->$", re.M)
LINK = re.compile(r"\[([^\]]+)\]\(([^)#:\s]+)(#[^)\s]*)?\)")
ROOT = Path(__file__).resolve().parents[2]
DOCS = "docs/"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put each included file in place of its line."""
    return INCLUDE.sub(lambda m: _included(m.group(1), page.file.src_uri), markdown)


def _included(path: str, page: str) -> str:
    source = ROOT / path
    folder = posixpath.dirname(path)
    text = source.read_text(encoding="utf-8")
    return LINK.sub(lambda m: _link(m.group(1), posixpath.normpath(posixpath.join(folder, m.group(2))),
                                    m.group(3) or "", page), text)


def _link(label: str, target: str, anchor: str, page: str) -> str:
    if target.startswith(DOCS) and target.endswith(".md"):
        return f"[{label}]({posixpath.relpath(target[len(DOCS):], posixpath.dirname(page) or '.')}{anchor})"
    return _repository_path(label, target)


def _repository_path(label: str, target: str) -> str:
    return f"`{target}`" if label.strip("`") == Path(target).name else f"{label} (`{target}`)"
