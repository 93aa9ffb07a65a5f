"""Where filters and actions read message properties: the system property table and `MessageView`.

User property names are case-insensitive. A lookup takes the key spelled exactly as written when
the message has one; otherwise the first key, in the message's own key order, that equals the name
ignoring case.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..clock import to_datetime

MISSING: Any = object()
"""What `MessageView.user` returns for a property the message does not have."""

_NO_PROPERTIES: Mapping[str, Any] = {}


@dataclass(frozen=True)
class SystemProperty:
    """A property named with `sys.`: where its value lives and whether actions may set it."""

    name: str
    """The name as documentation spells it, e.g. "MessageId"."""
    key: str
    """The key in the message's wire dict, or in the broker's `system` mapping."""
    in_wire: bool
    """True when the value is in the wire dict; False when the broker passes it in `system`."""
    settable: str | None = None
    """"text" or "seconds" when a rule action may SET and REMOVE it; None otherwise."""


_SYSTEM = (
    SystemProperty("MessageId", "message_id", True, "text"),
    SystemProperty("CorrelationId", "correlation_id", True, "text"),
    SystemProperty("To", "to", True, "text"),
    SystemProperty("ReplyTo", "reply_to", True, "text"),
    SystemProperty("Label", "subject", True, "text"),
    SystemProperty("Subject", "subject", True, "text"),
    SystemProperty("SessionId", "session_id", True, "text"),
    SystemProperty("ReplyToSessionId", "reply_to_session_id", True, "text"),
    SystemProperty("ContentType", "content_type", True, "text"),
    SystemProperty("TimeToLive", "time_to_live", True, "seconds"),
    SystemProperty("PartitionKey", "partition_key", True),
    SystemProperty("ScheduledEnqueueTimeUtc", "scheduled_enqueue_time", True),
    SystemProperty("SequenceNumber", "sequence_number", False),
    SystemProperty("EnqueuedTimeUtc", "enqueued_time_utc", False),
    SystemProperty("EnqueuedSequenceNumber", "enqueued_sequence_number", False),
    SystemProperty("Size", "size", False),
    SystemProperty("DeliveryCount", "delivery_count", False),
)
SYSTEM_PROPERTIES: dict[str, SystemProperty] = {prop.name.lower(): prop for prop in _SYSTEM}
"""The system properties by lower-case name."""

SYSTEM_NAMES = ", ".join(prop.name for prop in _SYSTEM)
SETTABLE_NAMES = ", ".join(prop.name for prop in _SYSTEM if prop.settable)


class MessageView:
    """One message as filters read it: its wire dict, the broker's values, its user properties."""

    __slots__ = ("wire", "system", "props", "_folded")

    def __init__(self, wire: Mapping[str, Any], system: Mapping[str, Any]) -> None:
        self.wire = wire
        self.system = system
        self.props: Mapping[str, Any] = wire.get("application_properties") or _NO_PROPERTIES
        self._folded: dict[str, Any] | None = None

    def user(self, name: str, folded: str) -> Any:
        """The user property `name` (`folded` is `name.lower()`), or MISSING."""
        props = self.props
        value = props.get(name, MISSING)
        if value is MISSING and props:
            index = self._folded
            if index is None:
                index = self._folded = {}
                for key, item in props.items():
                    index.setdefault(key.lower(), item)
            value = index.get(folded, MISSING)
        return value

    def properties_changed(self) -> None:
        """Forget what was learnt from the user properties (an action changed them)."""
        self._folded = None


def system_reader(prop: SystemProperty) -> Callable[[MessageView], Any]:
    """A function reading `prop` from a message; None when the message lacks it."""
    key = prop.key
    if not prop.in_wire:
        return lambda view: view.system.get(key)
    if key == "scheduled_enqueue_time":
        return lambda view: to_datetime(view.wire.get(key))
    return lambda view: view.wire.get(key)
