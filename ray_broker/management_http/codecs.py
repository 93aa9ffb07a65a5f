"""How one property of a description travels as XML text, both ways: flags, counts, durations,
statuses, text and entity references (`sb://host/<path>`). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable
from urllib.parse import urlsplit

from ..errors import InvalidArgumentError
from .durations import format_duration, parse_duration


def _parse_flag(text: str, what: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidArgumentError(f"{what} must be true or false, got {text!r}")
    return lowered == "true"


def _parse_count(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidArgumentError(f"{what} must be a whole number, got {text!r}") from None


def _parse_timespan(text: str, what: str) -> timedelta | None:
    seconds = parse_duration(text, what)
    return None if seconds is None else timedelta(seconds=seconds)


def _format_timespan(value: Any) -> str:
    return format_duration(None if value is None else value.total_seconds())


def entity_reference(host: str, path: str | None) -> str | None:
    """How Service Bus names a forwarding target: `sb://<host>/<path>` (None stays None)."""
    return None if path is None else f"sb://{host}/{path}"


def amqp_address(host: str, amqp_port: int | None) -> str:
    """The namespace's address as its connection string names it: the host name a request was
    sent to (`host`, host:port) with the namespace's AMQP port, whichever port the request came to
    (the management port too). `host` as it is without an AMQP port.

    >>> amqp_address("localhost:5300", 5672), amqp_address("[::1]:5300", 5672), amqp_address("bus", 5672)
    ('localhost:5672', '[::1]:5672', 'bus:5672')
    """
    if amqp_port is None:
        return host
    name = urlsplit(f"//{host}").hostname or host
    return f"[{name}]:{amqp_port}" if ":" in name else f"{name}:{amqp_port}"


def referenced_path(text: str) -> str | None:
    """The entity path a forwarding target names, whether `sb://host/<path>` or the bare path; None
    for an empty text."""
    stripped = text.strip()
    parts = urlsplit(stripped)
    path = (parts.path if parts.scheme else stripped).strip("/")
    return path or None


@dataclass(frozen=True)
class Codec:
    """Reads a property from XML text (`parse(text, what)`) and writes it back (`format(value)`)."""

    parse: Callable[[str, str], Any]
    format: Callable[[Any], str]


FLAG = Codec(_parse_flag, lambda value: "true" if value else "false")
COUNT = Codec(_parse_count, str)
TIMESPAN = Codec(_parse_timespan, _format_timespan)
TEXT = Codec(lambda text, what: text, str)
ENTITY = Codec(lambda text, what: referenced_path(text), str)
