"""Who may use the console: when it asks for a token, and whether a request's token is good. Pure.

A request presents `Authorization: Bearer <secret>` (or a `SharedAccessSignature ...` token as the
Azure SDKs sign it). The secret is good when it is the namespace's auth token (the one it was
started with), the text of one of its shared access keys with the Manage right (`ray-broker keys
list --show-keys`), or a SAS token signed with such a key for the namespace.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Iterable, Mapping

from ..errors import UnauthorizedError
from ..keys.sas import MANAGE, TOKEN_PREFIX, SasKey, verify_token

BEARER = "bearer"
AUTHORIZATION = "authorization"


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name the console binds to) reaches only this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def needs_token(host: str, require_token: bool) -> bool:
    """Whether a console bound to `host` asks every request for a token: when told to, and always
    when it listens beyond this machine."""
    return require_token or not is_loopback(host)


def presented_secret(headers: Mapping[str, str]) -> str:
    """The secret a request presents (headers with lower-case names); `UnauthorizedError` when it
    presents none."""
    value = headers.get(AUTHORIZATION, "").strip()
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == BEARER:
        value = rest.strip()
    if not value:
        raise UnauthorizedError("this console needs a token: the namespace's auth token, or a shared access key with "
                                "the Manage right (`ray-broker keys list --show-keys -n NAME`)")
    return value


def check_secret(secret: str, keys: Iterable[SasKey], auth_token_hash: str | None, now: float) -> None:
    """`UnauthorizedError` unless `secret` is the namespace's auth token (kept as `auth_token_hash`),
    the text of a key with Manage, or a SAS token signed with one for the whole namespace."""
    if secret.startswith(TOKEN_PREFIX):
        claim = verify_token(secret, keys, now)
        if not claim.allows("", MANAGE, now):
            raise UnauthorizedError("the shared access signature does not grant Manage on the namespace; sign it "
                                    "with a key that has the Manage right, for the namespace")
        return
    if auth_token_hash is not None and hmac.compare_digest(
            hashlib.sha256(secret.encode("utf-8")).hexdigest(), auth_token_hash):
        return
    for key in keys:
        if hmac.compare_digest(secret.encode("utf-8"), key.key.encode("utf-8")):
            if key.grants(MANAGE):
                return
            raise UnauthorizedError(f"shared access key {key.name!r} lacks the Manage right the console needs; "
                                    "use a key with Manage")
    raise UnauthorizedError("the token is neither the namespace's auth token nor one of its shared access keys; "
                            "`ray-broker keys list --show-keys -n NAME` shows the keys")
