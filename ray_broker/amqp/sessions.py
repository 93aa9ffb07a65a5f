"""Session receivers over AMQP, as the Azure SDKs open them. Pure.

A session receiver attaches with the source filter `com.microsoft:session-filter`: a session id,
or null for the next available session. The attach that answers it names the session locked in
the same filter, and the lock's expiry in the link property `com.microsoft:locked-until-utc`
(.NET ticks: 100 ns since 0001-01-01).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from proton import Data, symbol

from ..errors import InvalidArgumentError
from ..protocol import NEXT_AVAILABLE_SESSION, SessionFilter

SESSION_FILTER = symbol("com.microsoft:session-filter")
SESSION_LOCKED_UNTIL = symbol("com.microsoft:locked-until-utc")
OPERATION_TIMEOUT = symbol("com.microsoft:timeout")
"""The link property in which an SDK says how long (ms) to wait for the next available session."""
NEXT_AVAILABLE = NEXT_AVAILABLE_SESSION
"""What `session_filter` returns for a filter asking for the next available session (no session
id; an empty one names the session "", as Service Bus takes it)."""
_DOTNET_EPOCH_TICKS = 621_355_968_000_000_000
"""1970-01-01 in .NET ticks."""


def session_filter(filter_set: Data) -> str | SessionFilter | None:
    """The session a link's source filter asks for: its id, `NEXT_AVAILABLE`, or None when the
    link is no session receiver; `InvalidArgumentError` for a filter value that is no string."""
    filter_set.rewind()
    if filter_set.next() is None:
        return None
    filters: Any = filter_set.get_object()
    if not isinstance(filters, dict) or SESSION_FILTER not in filters:
        return None
    wanted = filters[SESSION_FILTER]
    if wanted is None:
        return NEXT_AVAILABLE
    if isinstance(wanted, (bytes, memoryview)):
        return bytes(wanted).decode("utf-8")
    if not isinstance(wanted, str):
        raise InvalidArgumentError(f"the session filter names a session by its id, a string (or null for the next "
                                   f"available session), not {wanted!r}")
    return str(wanted)


def session_wait(properties: dict[Any, Any] | None, default: float) -> float:
    """How long (seconds) a session receiver's attach waits for a session: the link's
    `com.microsoft:timeout` if the SDK sent one, else `default`."""
    timeout = (properties or {}).get(OPERATION_TIMEOUT)
    return default if timeout is None else max(0.0, int(timeout) / 1000)


def dotnet_ticks(moment: datetime | None) -> int:
    """A UTC time as .NET ticks (0 for none)."""
    if moment is None:
        return 0
    aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return _DOTNET_EPOCH_TICKS + int(round(aware.timestamp() * 10_000_000))
