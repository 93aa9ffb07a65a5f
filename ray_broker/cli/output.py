"""What the commands print: tables and lines on standard output, progress and notes on standard
error, messages as table rows or JSON lines, and JSON documents for `--json`."""
from __future__ import annotations

import base64
import json
import sys
from dataclasses import fields, is_dataclass
from datetime import datetime, timedelta
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..tables import PLAIN_WIDTH, make_table

BODY_PREVIEW = 60
PROPERTIES_PREVIEW = 60
MESSAGE_HEADERS = ["sequence", "partition", "message id", "key", "deliveries", "enqueued (UTC)", "subject",
                   "properties", "body"]
_DEAD_LETTER_PROPERTIES = ("DeadLetterReason", "DeadLetterErrorDescription")
"""Properties the body column shows as the dead-lettering's reason instead."""


def _console(stream: Any) -> Console:
    """A console on `stream` (read when printing, so redirections apply): as wide as the terminal,
    or wide enough that nothing wraps when the output goes to a pipe or a file."""
    terminal = stream.isatty()
    return Console(file=stream, width=None if terminal else PLAIN_WIDTH, soft_wrap=not terminal,
                   highlight=False, emoji=False, markup=False)


def out(text: str = "") -> None:
    """Print a line on standard output."""
    _console(sys.stdout).print(text)


def note(text: str) -> None:
    """Print a line for the user on standard error (kept out of data written to standard output)."""
    _console(sys.stderr).print(text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """Print a table on standard output."""
    _console(sys.stdout).print(make_table(headers, rows, title=title))


def json_document(document: Any) -> None:
    """Print `document` as one JSON document on standard output (dataclasses as objects, durations
    as seconds, times as ISO 8601), unwrapped and uncoloured, for programs to parse."""
    print(json.dumps(plain(document), indent=2))


def plain(value: Any) -> Any:
    """`value` as JSON has it: a dataclass as an object of its fields, a duration as seconds (None
    for "never"), a time as ISO 8601 text, bytes as text or base64, lists and mappings element-wise."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, timedelta):
        return None if value == timedelta.max else value.total_seconds()
    return _plain(value)


def progress(total: int, what: str) -> Progress:
    """A progress bar on standard error for `total` items (drawn on a terminal only)."""
    console = _console(sys.stderr)
    return Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console, transient=True, disable=not console.is_terminal or total <= 1,
                    redirect_stdout=False, redirect_stderr=False)


def body_text(body: bytes) -> str | None:
    """The body as UTF-8 text, or None when it is not text."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def message_row(message: Any) -> list[Any]:
    """A message as a row under `MESSAGE_HEADERS`."""
    text = body_text(message.body)
    if text is None:
        preview = f"<{len(message.body)} bytes, not UTF-8>"
    else:
        preview = text if len(text) <= BODY_PREVIEW else text[:BODY_PREVIEW - 3] + "..."
    key = message.session_id if message.session_id is not None else message.partition_key
    enqueued = message.enqueued_time_utc
    if message.dead_letter_reason:
        preview += f"  [dead-lettered: {message.dead_letter_reason}]"
    return [message.sequence_number, message.partition_index, message.message_id, key, message.delivery_count,
            enqueued.strftime("%Y-%m-%d %H:%M:%S") if enqueued else None, message.subject,
            properties_text(message.application_properties), preview]


def properties_text(properties: dict[str, Any]) -> str | None:
    """Application properties as a table cell: `key=value` pairs (text quoted, so that `n=1` and
    `n='1'` differ), cut short when long; None when there are none."""
    shown = ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={_plain(v)}"
                      for k, v in properties.items() if k not in _DEAD_LETTER_PROPERTIES)
    if not shown:
        return None
    return shown if len(shown) <= PROPERTIES_PREVIEW else shown[:PROPERTIES_PREVIEW - 3] + "..."


def message_json(message: Any) -> str:
    """A message as one JSON line: its fields, the body as text (or base64 in `body_base64` when
    it is not UTF-8)."""
    record: dict[str, Any] = {
        "sequence_number": message.sequence_number, "partition": message.partition_index,
        "message_id": message.message_id, "session_id": message.session_id,
        "partition_key": message.partition_key, "correlation_id": message.correlation_id,
        "subject": message.subject, "content_type": message.content_type,
        "delivery_count": message.delivery_count, "enqueued_time_utc": _iso(message.enqueued_time_utc),
        "time_to_live": plain(message.time_to_live), "expires_at_utc": _iso(message.expires_at_utc),
        "dead_letter_reason": message.dead_letter_reason,
        "application_properties": {str(k): _plain(v) for k, v in message.application_properties.items()},
    }
    text = body_text(message.body)
    if text is None:
        record["body_base64"] = base64.b64encode(message.body).decode("ascii")
    else:
        record["body"] = text
    return json.dumps(record)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _plain(value: Any) -> Any:
    """An application property value as JSON has it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return body_text(value) or base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
