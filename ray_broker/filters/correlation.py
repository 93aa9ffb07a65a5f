"""Correlation filters compiled into a match function: exact equality on every field given."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .properties import MISSING, MessageView
from .values import equal


def correlation_condition(fields: Mapping[str, str], properties: Mapping[str, Any]) -> Callable[[MessageView], bool]:
    """A function telling whether a message matches every field and every property, ANDed.

    `fields` maps wire keys (correlation_id, subject, ...) to the string each must equal exactly
    (case matters). A property must be present on the message and equal the value (a property
    expected to be None must be present with the value None); names are looked up as SQL filters
    look them up, case-insensitively with the exact spelling first.
    """
    checks = tuple(fields.items())
    expected = tuple((name, name.lower(), value) for name, value in properties.items())
    if len(checks) == 1 and not expected:
        ((key, wanted),) = checks
        return lambda view: view.wire.get(key) == wanted

    def matches(view: MessageView) -> bool:
        wire = view.wire
        for key, wanted in checks:
            if wire.get(key) != wanted:
                return False
        props = view.props
        for name, folded, wanted in expected:
            value = props.get(name, MISSING)
            if value is MISSING:
                value = view.user(name, folded)
                if value is MISSING:
                    return False
            if wanted is None:
                if value is not None:
                    return False
            elif equal(value, wanted) is not True:
                return False
        return True

    return matches
