"""SAS keys and tokens: tokens the Azure SDK signs verify, and every check refuses what it should."""
from __future__ import annotations

import pytest
from azure.servicebus._pyamqp.utils import generate_sas_token

from ray_broker.access_rules import AuthorizationRule, normalize_rules, rules_from_wire
from ray_broker.amqp.connection_string import connection_string
from ray_broker.errors import InvalidArgumentError, UnauthorizedError
from ray_broker.keys.sas import (
    LISTEN,
    MANAGE,
    ROOT_KEY_NAME,
    SEND,
    audience_path,
    covers,
    make_token,
    new_key,
    root_keys,
    token_audience_path,
    verify_token,
)

NOW = 1_800_000_000


def test_a_token_the_sdk_signs_verifies_with_the_keys_rights_and_path() -> None:
    key = new_key("sender", (SEND,))
    token = generate_sas_token("sb://localhost:5672/orders", key.name, key.key, NOW + 60)
    claim = verify_token(token, [key], NOW)
    assert (claim.path, claim.rights, claim.expires) == ("orders", (SEND,), NOW + 60)
    assert claim.allows("orders", SEND, NOW) and claim.allows("Orders/$DeadLetterQueue", SEND, NOW)
    assert not claim.allows("orders", LISTEN, NOW)
    assert not claim.allows("orders-2", SEND, NOW)
    assert not claim.allows("orders", SEND, NOW + 60)


def test_our_tokens_are_the_sdks_tokens() -> None:
    key = new_key("k", (LISTEN,))
    assert make_token("sb://h/q", key.name, key.key, NOW) == generate_sas_token("sb://h/q", key.name, key.key, NOW)


def test_the_root_key_manages_everything_under_a_namespace_token() -> None:
    [root] = root_keys()
    assert (root.name, set(root.rights)) == (ROOT_KEY_NAME, {MANAGE, SEND, LISTEN})
    claim = verify_token(make_token("sb://localhost:5672", root.name, root.key, NOW + 5), [root], NOW)
    assert claim.path == "" and claim.allows("t/subscriptions/s", LISTEN, NOW) and claim.allows("q", SEND, NOW)


@pytest.mark.parametrize("mangle, message", [
    (lambda t: t.replace("sig=", "sig=AA"), "does not match"),
    (lambda t: t.replace("skn=k", "skn=other"), "no shared access key named 'other'"),
    (lambda t: t.replace("SharedAccessSignature ", "Bearer "), "not a shared access signature"),
    (lambda t: t.split("&se=")[0], "lacks se"),
])
def test_a_bad_token_is_refused_saying_why(mangle, message) -> None:  # type: ignore[no-untyped-def]
    key = new_key("k", (SEND,))
    with pytest.raises(UnauthorizedError, match=message):
        verify_token(mangle(make_token("sb://h/q", "k", key.key, NOW + 60)), [key], NOW)


def test_an_expired_token_is_refused() -> None:
    key = new_key("k", (SEND,))
    with pytest.raises(UnauthorizedError, match="expired"):
        verify_token(make_token("sb://h/q", "k", key.key, NOW - 1), [key], NOW)


def test_a_token_signed_with_another_key_of_the_same_name_is_refused() -> None:
    key, impostor = new_key("k", (SEND,)), new_key("k", (SEND,))
    with pytest.raises(UnauthorizedError, match="does not match"):
        verify_token(make_token("sb://h/q", "k", impostor.key, NOW + 60), [key], NOW)


def test_paths_cover_whole_segments_only() -> None:
    assert audience_path("sb://host:1/A/b/") == "a/b" and audience_path("sb://host") == ""
    assert covers("", "anything") and covers("a", "a/b") and covers("a/b", "A/B")
    assert not covers("a", "ab") and not covers("a/b", "a")


def test_keys_need_a_name_and_known_rights() -> None:
    with pytest.raises(InvalidArgumentError):
        new_key("k", ("Admin",))
    with pytest.raises(InvalidArgumentError):
        new_key("", (SEND,))
    assert new_key("k", (SEND,)).key != new_key("k", (SEND,)).key


def test_the_connection_string_is_what_the_sdk_parses() -> None:
    from azure.servicebus._base_handler import _parse_conn_str

    key = new_key("k", (SEND, LISTEN))
    host, name, secret, entity, *_, emulator = _parse_conn_str(connection_string("localhost", 5999, key))
    assert (host, name, secret, entity, emulator) == ("localhost:5999", "k", key.key, None, True)


def hand_signed(uri: str, name: str, key: str, expiry: int) -> str:
    """A token signed over the resource as written, not URL-encoded (as the SDK's published samples
    sign one by hand), with its signature URL-quoted."""
    import base64
    import hashlib
    import hmac
    from urllib.parse import quote

    digest = hmac.new(key.encode(), f"{uri}\n{expiry}".encode(), hashlib.sha256).digest()
    return f"SharedAccessSignature sr={uri}&sig={quote(base64.b64encode(digest))}&se={expiry}&skn={name}"


def test_a_token_signed_over_the_resource_as_written_verifies() -> None:
    key = new_key("sender", (SEND,))
    claim = verify_token(hand_signed("sb://127.0.0.1/orders", key.name, key.key, NOW + 60), [key], NOW)
    assert (claim.path, claim.rights) == ("orders", (SEND,))
    with pytest.raises(UnauthorizedError, match="does not match"):
        verify_token(hand_signed("sb://127.0.0.1/orders", key.name, new_key("x", (SEND,)).key, NOW + 60), [key], NOW)


def test_an_entity_key_signs_for_its_entity_and_what_is_below_it_only() -> None:
    rule = AuthorizationRule("orders-app", (SEND, LISTEN), "primary", "secondary")
    keys = [*root_keys(), *rule.keys("Orders")]
    for signing_key in ("primary", "secondary"):
        for audience in ("sb://h/orders", "sb://h/Orders/$DeadLetterQueue"):
            claim = verify_token(make_token(audience, "orders-app", signing_key, NOW + 60), keys, NOW)
            assert claim.rights == (SEND, LISTEN) and claim.allows(audience_path(audience), LISTEN, NOW)
    for audience, shown in (("sb://h/orders-2", "orders-2"), ("sb://h", "the namespace")):
        with pytest.raises(UnauthorizedError, match=f"belongs to entity 'Orders' and signs tokens for it alone, "
                                                    f"not for '{shown}'"):
            verify_token(make_token(audience, "orders-app", "primary", NOW + 60), keys, NOW)
    topic_key = AuthorizationRule("events-app", (LISTEN,), "tk", "tk2").keys("events")
    claim = verify_token(make_token("sb://h/events/subscriptions/audit", "events-app", "tk", NOW + 60),
                         topic_key, NOW)
    assert claim.path == "events/subscriptions/audit"
    assert token_audience_path(make_token("sb://h/events/subscriptions/audit", "x", "k", NOW)) == \
        "events/subscriptions/audit"


def test_a_namespace_key_and_an_entity_key_of_one_name_each_verify_their_own_tokens() -> None:
    namespace_key = new_key("shared", (LISTEN,))
    entity_keys = AuthorizationRule("shared", (SEND,), "entity-primary", "entity-secondary").keys("orders")
    keys = [namespace_key, *entity_keys]
    assert verify_token(make_token("sb://h/orders", "shared", "entity-primary", NOW + 9), keys, NOW).rights == (SEND,)
    assert verify_token(make_token("sb://h/orders", "shared", namespace_key.key, NOW + 9), keys, NOW).rights == \
        (LISTEN,)


def test_authorization_rules_are_checked_and_get_random_keys_when_left_out() -> None:
    [row] = normalize_rules([AuthorizationRule("app", ("listen", "SEND"))])
    assert row[0] == "app" and row[3] == [SEND, LISTEN] and len(row[1]) == len(row[2]) == 44 and row[1] != row[2]
    assert rules_from_wire([row]) == (AuthorizationRule("app", (SEND, LISTEN), row[1], row[2]),)
    assert normalize_rules(None) == []
    for bad, message in (([AuthorizationRule("a b", (SEND,))], "invalid authorization rule key name"),
                         ([AuthorizationRule("a", ("Admin",))], "rights among Manage, Send, Listen"),
                         ([AuthorizationRule("a", ())], "rights among"),
                         ([AuthorizationRule("a", (SEND,))] * 2, "a is given more than once"),
                         ([AuthorizationRule(f"k{i}", (SEND,)) for i in range(13)], "at most 12"),
                         ("rule", "must be a list of AuthorizationRule"),
                         ([42], "must be an AuthorizationRule, not int")):
        with pytest.raises(InvalidArgumentError, match=message):
            normalize_rules(bad)
