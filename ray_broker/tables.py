"""Plain-text tables, shared by the command line and the demo."""
from __future__ import annotations

from typing import Any, Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Render rows as a plain-text table with right-aligned numbers."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_is_number(row[i]) for row in cells[1:]) and len(cells) > 1 for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(row, widths, numeric)).rstrip()

    separator = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), separator] + [line(row) for row in cells[1:]])


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()
