"""Tables shared by the command line and the demo, built with rich: a header row, numbers right-aligned."""
from __future__ import annotations

import io
from typing import Any, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

PLAIN_WIDTH = 240
"""The width a table is laid out in when it is rendered to text (wide enough that rows never wrap)."""


def make_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> Table:
    """A rich table of `rows` under `headers`; a column whose cells are all numbers is right-aligned,
    and None shows as "-"."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
    for i, header in enumerate(headers):
        numeric = bool(cells) and all(_is_number(row[i]) for row in cells)
        table.add_column(str(header), justify="right" if numeric else "left", overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """`make_table` rendered as plain text (no colour), for `print`."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=PLAIN_WIDTH, color_system=None, force_terminal=False)
    console.print(make_table(headers, rows, title=title))
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()
