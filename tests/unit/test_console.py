"""The web console's Ray-free parts: who may use it (`console.auth`) and the documents its pages
show (`console.views`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

import pytest

from ray_broker.console import auth, views
from ray_broker.entities import PartitionRuntimeProperties, QueueRuntimeProperties
from ray_broker.errors import UnauthorizedError
from ray_broker.filters import CorrelationFilter, RuleProperties, SqlFilter, SqlRuleAction
from ray_broker.keys.sas import LISTEN, MANAGE, SEND, make_token, new_key
from ray_broker.message import ReceivedMessage

NOW = 1_800_000_000.0
MANAGER = new_key("manager", (MANAGE,))
SENDER = new_key("sender", (SEND, LISTEN))
TOKEN_HASH = hashlib.sha256(b"s3cret").hexdigest()


@pytest.mark.parametrize("host, told, needed", [
    ("127.0.0.1", False, False), ("localhost", False, False), ("::1", False, False), ("127.0.0.2", False, False),
    ("127.0.0.1", True, True), ("0.0.0.0", False, True), ("192.168.1.10", False, True), ("example.org", False, True),
])
def test_a_token_is_needed_off_loopback_or_when_told(host: str, told: bool, needed: bool) -> None:
    assert auth.needs_token(host, told) is needed


def test_the_secret_comes_from_a_bearer_or_sas_authorization_header() -> None:
    assert auth.presented_secret({"authorization": "Bearer abc"}) == "abc"
    assert auth.presented_secret({"authorization": "SharedAccessSignature sr=x"}) == "SharedAccessSignature sr=x"
    for headers in ({}, {"authorization": "Bearer  "}):
        with pytest.raises(UnauthorizedError, match="needs a token"):
            auth.presented_secret(headers)


def test_the_namespace_token_a_manage_key_or_a_namespace_sas_token_is_accepted() -> None:
    keys = [SENDER, MANAGER]
    auth.check_secret("s3cret", keys, TOKEN_HASH, NOW)
    auth.check_secret(MANAGER.key, keys, None, NOW)
    auth.check_secret(make_token("sb://localhost", MANAGER.name, MANAGER.key, int(NOW) + 60), keys, None, NOW)


@pytest.mark.parametrize("secret, wanted", [
    ("wrong", "neither the namespace's auth token nor one of its shared access keys"),
    (SENDER.key, "lacks the Manage right"),
    (make_token("sb://localhost", SENDER.name, SENDER.key, int(NOW) + 60), "does not grant Manage"),
    (make_token("sb://localhost", MANAGER.name, MANAGER.key, int(NOW) - 1), "expired"),
    (make_token("sb://localhost/orders", MANAGER.name, MANAGER.key, int(NOW) + 60), "does not grant Manage"),
    (make_token("sb://localhost", MANAGER.name, "another-key", int(NOW) + 60), "does not match"),
])
def test_anything_else_is_refused_saying_why(secret: str, wanted: str) -> None:
    with pytest.raises(UnauthorizedError, match=wanted):
        auth.check_secret(secret, [SENDER, MANAGER], TOKEN_HASH, NOW)


def runtime(name: str, per_partition: list[tuple[int, int, int, int] | None]) -> QueueRuntimeProperties:
    """Runtime properties with (active, dead-letter, scheduled, next sequence number) per partition."""
    parts = [PartitionRuntimeProperties(k, False) if c is None else
             PartitionRuntimeProperties(k, True, c[0], c[1], c[2], (k << 48) | c[3])
             for k, c in enumerate(per_partition)]
    available = [c for c in per_partition if c is not None]
    return QueueRuntimeProperties(name, sum(c[0] for c in available), sum(c[1] for c in available),
                                  sum(c[2] for c in available), availability="Limited" if None in per_partition
                                  else "Available", partitions=parts)


@dataclass(frozen=True)
class Status:
    index: int
    health: str
    node: str | None = "10.0.0.1 (abcdef12)"
    pid: int | None = 42
    restarts: int | None = 0


def test_partitions_sum_the_entities_counts_and_show_down_ones() -> None:
    rows = [views.counts_row("queue", "a", runtime("a", [(4, 1, 0, 10), (1, 0, 1, 3), None])),
            views.counts_row("queue", "b", runtime("b", [(5, 0, 0, 5), (0, 0, 0, 1), (0, 0, 0, 1)]))]
    assert rows[0]["partitions"][2] == {"index": 2, "available": False, "active": 0, "dead_letter": 0, "scheduled": 0}
    parts = views.partition_rows([Status(0, "up"), Status(1, "up"), Status(2, "up")], rows)
    assert [(p["total"], p["down"], p["share"]) for p in parts] == [(10, False, 1.0), (2, False, 0.2), (0, True, 0.0)]
    assert parts[2]["health"] == "not answering", "an entity's count could not reach it"
    missing = views.partition_rows([Status(0, "missing", None, None, None)], [])
    assert missing[0]["down"] and missing[0]["health"] == "missing" and missing[0]["share"] == 0.0


def test_throughput_counts_what_came_in_and_what_went_out_per_second() -> None:
    before = views.sample(100.0, [runtime("a", [(4, 0, 0, 11), (0, 0, 0, 1)])])
    assert (before.enqueued, before.held) == (12, 4), "the partition's index above bit 48 is not counted"
    assert views.throughput(None, before) == {"in_per_s": None, "out_per_s": None}
    after = views.sample(102.0, [runtime("a", [(2, 1, 0, 15), (0, 0, 0, 3)])])
    assert views.throughput(before, after) == {"in_per_s": 3.0, "out_per_s": 3.5}


def test_rules_show_their_filter_and_action_in_one_line() -> None:
    sql = views.rule_row(RuleProperties("big", SqlFilter("amount > 100"), SqlRuleAction("SET lane = 'fast'")))
    assert sql == {"name": "big", "filter_type": "sql", "filter": "amount > 100", "action": "SET lane = 'fast'"}
    corr = views.rule_row(RuleProperties("eu", CorrelationFilter(subject="order", properties={"region": "eu"})))
    assert corr["filter_type"] == "correlation" and corr["action"] is None
    assert "subject='order'" in corr["filter"] and "region" in corr["filter"]


def test_a_body_is_shown_as_text_json_and_hex() -> None:
    shown = views.body_views(b'{"a": [1, 2]}')
    assert shown["text"] == '{"a": [1, 2]}' and json.loads(shown["json"]) == {"a": [1, 2]}
    assert shown["json"].startswith("{\n  ")
    assert shown["hex"] == '00000000  7b 22 61 22 3a 20 5b 31 2c 20 32 5d 7d           {"a": [1, 2]}'
    binary = views.body_views(bytes(range(250, 256)) + b"\x00A" * 2100)
    assert binary["text"] is None and binary["json"] is None and binary["size"] == 4206
    assert binary["hex"].splitlines()[0].startswith("00000000  fa fb fc fd fe ff 00 41")
    assert len(binary["hex"].splitlines()) == views.HEX_PREVIEW_BYTES // 16 and binary["hex_truncated"]
    assert views.body_views(b"plain")["json"] is None


def test_a_message_document_has_every_field_and_typed_properties() -> None:
    message = ReceivedMessage({"body": b"hello", "sequence_number": (3 << 48) | 7, "subject": "greeting",
                               "application_properties": {"n": 5, "ok": True, "raw": b"\x01", "ratio": 0.5},
                               "time_to_live": 30.0, "dead_letter_reason": "bad",
                               "dead_letter_error_description": "too big"}, peeked=True)
    document = views.message_document(message)
    assert (document["sequence_number"], document["partition"], document["state"]) == ((3 << 48) | 7, 3, "active")
    assert document["fields"]["subject"] == "greeting" and document["fields"]["time_to_live"] == 30.0
    assert document["fields"]["dead_letter_error_description"] == "too big"
    assert set(document["fields"]) == set(views.MESSAGE_FIELDS)
    assert document["application_properties"] == {
        "n": {"type": "int", "value": 5}, "ok": {"type": "bool", "value": True},
        "raw": {"type": "bytes", "value": "AQ=="}, "ratio": {"type": "float", "value": 0.5}}
    assert document["body"]["text"] == "hello"
    json.dumps(document)


def test_entity_properties_are_plain_json() -> None:
    from ray_broker.entities import QueueProperties

    document = views.properties_document(QueueProperties("orders", lock_duration=timedelta(seconds=45)))
    assert document["lock_duration"] == 45.0 and document["auto_delete_on_idle"] is None
    json.dumps(document)


def test_a_failure_answers_with_the_status_of_its_kind() -> None:
    from ray_broker.console.server import http_status
    from ray_broker.errors import (InvalidOperationError, MessagingEntityNotFoundError, RuleSyntaxError,
                                   ServiceBusError)

    assert http_status(UnauthorizedError("no")) == 401
    assert http_status(MessagingEntityNotFoundError("gone")) == 404
    assert http_status(RuleSyntaxError("bad sql")) == 400, "a subtype of InvalidArgumentError"
    assert http_status(InvalidOperationError("not now")) == 409
    assert http_status(ServiceBusError("broken")) == 500
