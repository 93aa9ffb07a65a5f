"""JSON with comments, as Microsoft's emulator reads its `Config.json`: `//` line comments and
`/* */` block comments are dropped outside strings; everything else is strict JSON. A parse error
names the line and column in the file as written (comments are blanked, not removed, so positions
do not move). Pure.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import EmulatorConfigError


def strip_comments(text: str, source: str = "the file") -> str:
    """`text` with every comment outside strings replaced by spaces (newlines kept).

    >>> strip_comments('{"a": "//x", // note\\n "b": /* c */ 1}')
    '{"a": "//x",        \\n "b":         1}'
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
        elif ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line, column = _position(text, i)
                raise EmulatorConfigError(f"{source} is not JSON: the comment that opens at line {line}, column "
                                          f"{column} is never closed with */")
            out.append("".join(c if c == "\n" else " " for c in text[i:end + 2]))
            i = end + 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _position(text: str, index: int) -> tuple[int, int]:
    """The 1-based line and column of `text[index]`."""
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def loads(text: str, source: str = "the file") -> Any:
    """The JSON document `text` holds once its comments are dropped; `EmulatorConfigError` naming
    `source`, the line and the column where it stops being JSON."""
    try:
        return json.loads(strip_comments(text, source))
    except json.JSONDecodeError as exc:
        raise EmulatorConfigError(f"{source} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; "
                                  "fix the file (// and /* */ comments are allowed)") from None
