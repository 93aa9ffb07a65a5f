"""How the command line reports a failure: one line, `error: <ErrorType>: <what went wrong and what
to do>`, worded for a shell user.

The library's messages are written for Python callers: they name keyword arguments and functions
(`partitions=None`, `ray_broker.start('x')`, `create_message_batch()`). `shell_wording` rewrites
those into the options and commands of `ray-broker`.
"""
from __future__ import annotations

import re
from typing import Callable

from ..errors import unwrap_remote_error

USAGE_EXIT_CODE = 2
"""The status of a command line that does not parse (click's, and the shell convention)."""
MAX_MESSAGE_CHARS = 600
"""A longer message (a Ray error's dump, say) is cut here; `--debug` shows all of it."""

_OPTION_NAMES = {
    "lock_duration": "--lock-duration",
    "max_delivery_count": "--max-delivery-count",
    "default_message_time_to_live": "--ttl",
    "duplicate_detection_history_time_window": "--duplicate-window",
    "partition_key": "--partition-key",
    "session_id": "--session-id",
    "content_type": "--content-type",
    "message_id": "--message-id",
    "correlation_id": "--correlation-id",
    "time_to_live": "--ttl",
    "max_wait_time": "--wait",
    "max_message_count": "--count",
    "amqp_port": "--amqp-port",
    "management_port": "--management-port",
}
"""Keyword arguments the library's messages name, and the options that set them."""

_REWRITES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"`?(?:ray_broker|rb)\.start\('([^']*)'\)`?"), r"`ray-broker start -n \1`"),
    (re.compile(r"leave partitions=None"), "leave out --partitions"),
    (re.compile(r"\s*\(create_message_batch\(\) packs them for you\)"), " (lower --batch)"),
    (re.compile(r"pass auth_token= or set (\w+)"), r"set \1 to its token"),
    (re.compile(r"\b(" + "|".join(_OPTION_NAMES) + r")\b(?!=)"), lambda m: _OPTION_NAMES[m.group(1)]),
]


def shell_wording(message: str) -> str:
    """`message` with its Python advice (keyword arguments, function calls) put as `ray-broker`
    options and commands."""
    for pattern, replacement in _REWRITES:
        message = pattern.sub(replacement, message)
    return message


def is_command_line_error(exc: BaseException) -> bool:
    """Whether `exc` is the command line parser's (click's) report of arguments it cannot take."""
    return callable(getattr(exc, "format_message", None)) and getattr(exc, "exit_code", None) == USAGE_EXIT_CODE


def is_help_shown(exc: BaseException) -> bool:
    """Whether `exc` stands for a command given without arguments, whose help was printed instead."""
    return is_command_line_error(exc) and not exc.format_message()  # type: ignore[attr-defined]


def error_type(exc: BaseException) -> str:
    """The name a failure is reported under: the broker error's own type; `UsageError` for a
    command line that does not parse."""
    if is_command_line_error(exc):
        return "UsageError"
    return type(unwrap_remote_error(exc)).__name__


def error_line(exc: BaseException) -> str:
    """The one line `ray-broker` prints for `exc` (without its trailing newline)."""
    cause = unwrap_remote_error(exc)
    if is_command_line_error(exc):
        text = exc.format_message().replace("Value error, ", "")  # type: ignore[attr-defined]
        context = getattr(exc, "ctx", None)
        if context is not None:
            text += f" (see `{context.command_path} --help`)"
    else:
        text = shell_wording(str(getattr(cause, "message", None) or cause) or "no details")
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS - 3] + "... (run with --debug for all of it)"
    return f"error: {error_type(exc)}: {text}"


def exit_code(exc: BaseException) -> int:
    """The exit status for `exc`: 2 for a command line that does not parse, 1 for every other failure."""
    return USAGE_EXIT_CODE if is_command_line_error(exc) else 1
