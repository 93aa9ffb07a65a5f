"""Who may use the management API: every request carries a SAS token (`Authorization`) that must
grant Manage on what it touches; a forwarding target's supplementary token
(`ServiceBusSupplementaryAuthorization`, `ServiceBusDlqSupplementaryAuthorization`), when sent,
must be valid and grant Send on the target. Checked with the namespace's SAS rules
(`ray_broker.keys.sas`). Pure.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import UnauthorizedError
from ..keys.sas import MANAGE, SEND, SasKey, verify_token

AUTHORIZATION = "authorization"
FORWARD_AUTHORIZATION = "servicebussupplementaryauthorization"
FORWARD_DLQ_AUTHORIZATION = "servicebusdlqsupplementaryauthorization"
FORWARDING_TOKENS = (("forward_to", FORWARD_AUTHORIZATION),
                     ("forward_dead_lettered_messages_to", FORWARD_DLQ_AUTHORIZATION))
"""Each forwarding option and the header that carries its target's token."""


def authorize(headers: Mapping[str, str], entity_path: str, keys: Sequence[SasKey], now: float) -> None:
    """UnauthorizedError unless the request's token (headers in lower case) grants Manage on
    `entity_path` ("" for the namespace) at `now`, and every supplementary token it sends is valid."""
    token = headers.get(AUTHORIZATION)
    if not token:
        raise UnauthorizedError("the request has no Authorization header; send a SharedAccessSignature token "
                                "signed with a key that has the Manage right")
    claim = verify_token(token, keys, now)
    if not claim.allows(entity_path, MANAGE, now):
        raise UnauthorizedError(f"the token does not grant Manage on {entity_path or 'the namespace'!r}; sign it "
                                "with a key that has the Manage right, for the namespace or the entity")
    for _, header in FORWARDING_TOKENS:
        if header in headers:
            verify_token(headers[header], keys, now)


def check_forwarding(headers: Mapping[str, str], options: Mapping[str, Any], keys: Sequence[SasKey],
                     now: float) -> None:
    """UnauthorizedError if a supplementary token sent for a forwarding target in `options` does
    not grant Send on that target."""
    for option, header in FORWARDING_TOKENS:
        target = options.get(option)
        if target and header in headers and not verify_token(headers[header], keys, now).allows(target, SEND, now):
            raise UnauthorizedError(f"the {header} token does not grant Send on forwarding target {target!r}")
