"""Stand-in for devtools_testutils.sanitizers: nothing is recorded, so nothing is sanitized."""
from __future__ import annotations

from typing import Any


def add_remove_header_sanitizer(**_: Any) -> None:
    """No recordings."""


def add_general_regex_sanitizer(**_: Any) -> None:
    """No recordings."""


def add_oauth_response_sanitizer(**_: Any) -> None:
    """No recordings."""
