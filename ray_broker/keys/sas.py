"""Shared access signatures: a namespace's named keys with rights, and the SAS tokens the Azure SDKs
sign with them (`SharedAccessSignature sr=<audience>&sig=<signature>&se=<expiry>&skn=<key name>`).

A token is signed as the SDKs sign it: HMAC-SHA256, keyed by the key's text, over the audience as
the token writes it (URL-encoded, as the SDKs write it, or as it is, as hand-made tokens often do),
a newline and the expiry in epoch seconds, then base64. A token is good for its audience
and every entity below it (a namespace token, `sb://host`, covers every entity), until its expiry,
for the rights of the key that signed it. A key of one entity (an authorization rule on a queue or
topic) signs tokens only for an audience that entity covers. Pure: no I/O, no Ray.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import parse_qs, quote_plus, urlencode, urlsplit

from ..errors import InvalidArgumentError, UnauthorizedError

MANAGE, SEND, LISTEN = "Manage", "Send", "Listen"
RIGHTS = (MANAGE, SEND, LISTEN)
ROOT_KEY_NAME = "RootManageSharedAccessKey"
"""The key every namespace is created with, holding every right (as on Azure)."""
TOKEN_PREFIX = "SharedAccessSignature "
KEY_BYTES = 32


@dataclass(frozen=True)
class SasKey:
    """A named shared access key and the rights it grants (`Manage` implies `Send` and `Listen`).

    Example:
        key = new_key("sender", (SEND,))
        token = make_token("sb://localhost:5672/orders", key.name, key.key, expiry=1_900_000_000)
    """

    name: str
    key: str
    rights: tuple[str, ...]
    entity: str = ""
    """The entity path the key belongs to (an authorization rule on it), "" for a namespace key."""

    def grants(self, right: str) -> bool:
        """Whether the key grants `right`."""
        return right in self.rights or MANAGE in self.rights


@dataclass(frozen=True)
class Claim:
    """What a verified token grants: its audience's entity path ("" for the whole namespace), its
    rights and its expiry (epoch seconds)."""

    path: str
    rights: tuple[str, ...]
    expires: float

    def allows(self, entity_path: str, right: str, now: float) -> bool:
        """Whether the claim grants `right` on `entity_path` at time `now`."""
        if now >= self.expires or (right not in self.rights and MANAGE not in self.rights):
            return False
        return covers(self.path, entity_path)


def new_key(name: str, rights: Iterable[str]) -> SasKey:
    """A new random key (32 bytes, base64) named `name` granting `rights`."""
    granted = tuple(rights)
    unknown = [r for r in granted if r not in RIGHTS]
    if not name or unknown or not granted:
        raise InvalidArgumentError(f"a SAS key needs a name and rights among {', '.join(RIGHTS)}; "
                                   f"got name={name!r}, rights={granted!r}")
    return SasKey(name, base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii"), granted)


def root_keys() -> tuple[SasKey, ...]:
    """The keys a new namespace starts with: `RootManageSharedAccessKey` with every right."""
    return (new_key(ROOT_KEY_NAME, RIGHTS),)


def signature(audience: str, expiry: int, key: str) -> str:
    """The base64 HMAC-SHA256 signature of `audience` (URL-encoded) and `expiry` with `key`, as the
    SDKs compute it."""
    return _signed(quote_plus(audience), expiry, key)


def _signed(resource: str, expiry: int, key: str) -> str:
    """The base64 HMAC-SHA256 signature of `resource` (as written in a token), a newline and `expiry`."""
    signed = f"{resource}\n{expiry}".encode("utf-8")
    return base64.b64encode(hmac.new(key.encode("utf-8"), signed, hashlib.sha256).digest()).decode("ascii")


def make_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """A SAS token for `audience` valid until `expiry` (epoch seconds), signed with `key`."""
    fields = {"sr": audience, "sig": signature(audience, expiry, key), "se": str(expiry), "skn": key_name}
    return TOKEN_PREFIX + urlencode(fields)


def audience_path(audience: str) -> str:
    """The entity path an audience names, lower case, without slashes at either end: "" for a
    namespace audience (`sb://host`), "orders" for `sb://host/orders`."""
    parts = urlsplit(audience)
    path = parts.path if parts.scheme else audience
    return path.strip("/").lower()


def covers(audience: str, entity_path: str) -> bool:
    """Whether a token for audience path `audience` covers `entity_path`: it is the namespace, the
    path itself, or a path above it (whole segments, case-insensitive)."""
    entity = entity_path.strip("/").lower()
    return audience == "" or entity == audience or entity.startswith(audience + "/")


def _raw_resource(fields: str) -> str:
    """The `sr` field of a token as written (not URL-decoded): a signature covers the resource as
    the token writes it, URL-encoded (as the SDKs write it) or not (as some hand-made tokens do)."""
    return next((part.split("=", 1)[1] for part in fields.split("&") if part.lower().startswith("sr=")), "")


def _fields(token: str) -> dict[str, str]:
    """A SAS token's fields by lower-case name (`UnauthorizedError` if it is no SAS token)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise UnauthorizedError("the token is not a shared access signature (it must start with "
                                f"{TOKEN_PREFIX.strip()!r})")
    return {k.lower(): v[0] for k, v in parse_qs(token[len(TOKEN_PREFIX):], keep_blank_values=True).items()}


def token_audience_path(token: str) -> str:
    """The entity path a SAS token's audience names ("" for the namespace), unverified: which
    entity's keys may have signed it (`UnauthorizedError` if it is no SAS token)."""
    return audience_path(_fields(token).get("sr", ""))


def verify_token(token: str, keys: Iterable[SasKey], now: float) -> Claim:
    """The claim a SAS token makes once its signature, key, scope and expiry check out; else
    `UnauthorizedError` saying which check failed. A key scoped to an entity signs tokens for that
    entity's audience (or one below it) only."""
    fields = _fields(token)
    missing = [f for f in ("sr", "sig", "se", "skn") if not fields.get(f)]
    if missing:
        raise UnauthorizedError(f"the shared access signature lacks {', '.join(missing)}")
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise UnauthorizedError(f"the shared access signature's expiry {fields['se']!r} is not epoch seconds") from None
    named = [k for k in keys if k.name == fields["skn"]]
    if not named:
        raise UnauthorizedError(f"the namespace has no shared access key named {fields['skn']!r}")
    written = _raw_resource(token[len(TOKEN_PREFIX):])
    key = next((k for k in named if any(hmac.compare_digest(_signed(resource, expiry, k.key), fields["sig"])
                                        for resource in {quote_plus(fields["sr"]), written})), None)
    if key is None:
        raise UnauthorizedError(f"the shared access signature does not match key {named[0].name!r}")
    path = audience_path(fields["sr"])
    if key.entity and not covers(key.entity.strip("/").lower(), path):
        raise UnauthorizedError(f"key {key.name!r} belongs to entity {key.entity!r} and signs tokens for it alone, "
                                f"not for {path or 'the namespace'!r}; use a namespace key or that entity's address")
    if expiry <= now:
        raise UnauthorizedError(f"the shared access signature expired at {expiry} (epoch seconds); get a new one")
    return Claim(path, key.rights, float(expiry))
