"""Shared access authorization rules on one queue or topic: keys that sign tokens for that entity
alone (and its subscriptions and sub-queues), as Service Bus's `AuthorizationRules` on an entity.
Pure: no I/O, no Ray.

A rule has a key name, a primary and a secondary key (either signs) and rights among Manage, Send
and Listen. Entities keep their rules in their options as wire rows,
`[key_name, primary_key, secondary_key, [rights]]` (plain lists, as requests cross processes).

Example:
    rule = AuthorizationRule("orders-reader", ("Listen",), primary_key=KEY, secondary_key=OTHER)
    ns.create_queue("orders", authorization_rules=[rule])
    # tokens signed with KEY (key name "orders-reader") may receive from "orders", nothing else
"""
from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .errors import InvalidArgumentError
from .keys.keyring import rights_of
from .keys.sas import KEY_BYTES, SasKey

_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,255}")
MAX_KEY_LENGTH = 256
MAX_RULES = 12
"""Service Bus's limit of authorization rules on one entity."""


@dataclass(frozen=True)
class AuthorizationRule:
    """A shared access key of one queue or topic: tokens it signs are good for that entity only.

    Attributes:
        key_name: the name tokens carry (`skn`).
        rights: among "Manage", "Send", "Listen" (Manage implies the other two).
        primary_key, secondary_key: the key texts; either signs tokens (a new random key for one
            left out).
    """

    key_name: str
    rights: tuple[str, ...]
    primary_key: str = field(default="", repr=False)
    secondary_key: str = field(default="", repr=False)

    def keys(self, entity: str) -> tuple[SasKey, ...]:
        """The rule's primary and secondary key as shared access keys scoped to `entity`."""
        return tuple(SasKey(self.key_name, key, self.rights, entity) for key in (self.primary_key, self.secondary_key))


def _random_key() -> str:
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def _key_text(value: Any, what: str, name: str) -> str:
    if value is None or value == "":
        return _random_key()
    if not isinstance(value, str) or len(value) > MAX_KEY_LENGTH:
        raise InvalidArgumentError(f"the {what} of authorization rule {name!r} must be a str of at most "
                                   f"{MAX_KEY_LENGTH} characters (or left out for a random one)")
    return value


def _rule(value: Any) -> AuthorizationRule:
    """An AuthorizationRule from one (an AuthorizationRule, a wire row, or an object with the SDK's
    attribute names), checked."""
    if isinstance(value, (list, tuple)) and len(value) == 4:
        name, primary, secondary, rights = value
    elif all(hasattr(value, a) for a in ("key_name", "rights", "primary_key", "secondary_key")):
        name, primary, secondary, rights = value.key_name, value.primary_key, value.secondary_key, value.rights
    else:
        raise InvalidArgumentError(f"an authorization rule must be an AuthorizationRule, not {type(value).__name__}")
    if not isinstance(name, str) or not _KEY_NAME.fullmatch(name):
        raise InvalidArgumentError(f"invalid authorization rule key name {name!r}: use 1 to 256 letters, digits, "
                                   "'.', '-' or '_', starting with a letter or digit")
    if isinstance(rights, str) or not isinstance(rights, Iterable):
        rights = [] if rights is None else [rights]
    granted = rights_of([getattr(r, "value", r) for r in rights])
    return AuthorizationRule(name, granted, _key_text(primary, "primary key", name),
                             _key_text(secondary, "secondary key", name))


def normalize_rules(value: Any) -> list[list[Any]]:
    """Authorization rules as entity options keep them (wire rows); `InvalidArgumentError` for a bad
    rule, a key name given twice, or more than `MAX_RULES`."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError("authorization_rules must be a list of AuthorizationRule, not "
                                   f"{type(value).__name__}")
    rules = [_rule(v) for v in value]
    names = [r.key_name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"authorization rule key names must differ within an entity; "
                                   f"{', '.join(twice)} is given more than once")
    if len(rules) > MAX_RULES:
        raise InvalidArgumentError(f"an entity takes at most {MAX_RULES} authorization rules, got {len(rules)}")
    return [[r.key_name, r.primary_key, r.secondary_key, list(r.rights)] for r in rules]


def rules_from_wire(rows: Sequence[Sequence[Any]] | None) -> tuple[AuthorizationRule, ...]:
    """The rules of `normalize_rules`'s rows."""
    return tuple(AuthorizationRule(str(name), tuple(rights), str(primary), str(secondary))
                 for name, primary, secondary, rights in rows or ())
