"""A namespace's named keys (made, listed, removed, kept in a file) and subscription rules as the
`$management` rule operations carry them. Pure: no Ray, no front end."""
from __future__ import annotations

from pathlib import Path

import pytest
from proton import Data, Described

from ray_broker.amqp.rule_mapping import (
    CORRELATION_FILTER_CODE,
    EMPTY_ACTION_CODE,
    FALSE_FILTER_CODE,
    RULE_DESCRIPTION_CODE,
    SQL_ACTION_CODE,
    SQL_FILTER_CODE,
    TRUE_FILTER_CODE,
    described_rule,
    rule_from_description,
)
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from ray_broker.filters import CorrelationFilter, FalseFilter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter
from ray_broker.keys.keyring import KeyRing, key_rows, keys_from_rows, load_keys, rights_of, save_keys
from ray_broker.keys.sas import LISTEN, MANAGE, ROOT_KEY_NAME, SEND, root_keys


def test_rights_are_taken_in_any_case_and_in_one_text() -> None:
    assert rights_of(["listen", "SEND"]) == (SEND, LISTEN)
    assert rights_of("send, listen") == (SEND, LISTEN)
    with pytest.raises(InvalidArgumentError, match="admin"):
        rights_of(["send", "admin"])
    with pytest.raises(InvalidArgumentError, match="none"):
        rights_of([])


def test_a_key_ring_makes_lists_and_removes_keys() -> None:
    ring = KeyRing(root_keys())
    sender = ring.add("orders-sender", "send")
    assert (sender.name, sender.rights) == ("orders-sender", (SEND,)) and len(sender.key) >= 40
    assert [k.name for k in ring.keys] == [ROOT_KEY_NAME, "orders-sender"]
    with pytest.raises(InvalidOperationError, match="already has a key named 'orders-sender'"):
        ring.add("orders-sender", "listen")
    with pytest.raises(InvalidArgumentError, match="invalid key name"):
        ring.add("no spaces", "listen")
    ring.remove("orders-sender")
    with pytest.raises(MessagingEntityNotFoundError, match="no key named 'orders-sender'"):
        ring.remove("orders-sender")
    assert [k.name for k in ring.keys] == [ROOT_KEY_NAME]


def test_the_last_key_that_manages_stays() -> None:
    ring = KeyRing(root_keys())
    with pytest.raises(InvalidOperationError, match="last key with the Manage right"):
        ring.remove(ROOT_KEY_NAME)
    ring.add("admin", [MANAGE])
    ring.remove(ROOT_KEY_NAME)
    assert [k.name for k in ring.keys] == ["admin"]


def test_keys_are_kept_in_the_data_directory(tmp_path: Path) -> None:
    assert load_keys(str(tmp_path)) is None and load_keys(None) is None
    ring = KeyRing(root_keys())
    ring.add("reader", ["listen"])
    save_keys(str(tmp_path), ring.keys)
    assert load_keys(str(tmp_path)) == ring.keys
    assert keys_from_rows(key_rows(ring.keys)) == ring.keys


def encoded(value: object) -> object:
    """`value` encoded as AMQP and decoded again (what a client reads)."""
    data = Data()
    data.put_object(value)
    again = Data()
    again.decode(data.encode())
    again.rewind()
    again.next()
    return again.get_object()


@pytest.mark.parametrize("description, expected", [
    ({"sql-filter": {"expression": "Color = 'Red'"}}, RuleProperties("r", SqlFilter("Color = 'Red'"))),
    ({"sql-filter": {"expression": "1=1"}}, RuleProperties("r", TrueFilter())),
    ({"sql-filter": {"expression": "1 = 0"}}, RuleProperties("r", FalseFilter())),
    ({}, RuleProperties("r", TrueFilter())),
    ({"correlation-filter": {"correlation-id": "important", "label": "Red", "properties": {"n": 1}},
      "sql-rule-action": {"expression": "SET Color = 'x'"}},
     RuleProperties("r", CorrelationFilter(correlation_id="important", subject="Red", properties={"n": 1}),
                    SqlRuleAction("SET Color = 'x'"))),
])
def test_an_add_rule_description_is_the_rule_it_names(description: dict, expected: RuleProperties) -> None:
    assert rule_from_description("r", description) == expected


@pytest.mark.parametrize("description, message", [
    ("no map", "rule-description map"),
    ({"sql-filter": {"expression": "1=1"}, "correlation-filter": {}}, "not both"),
    ({"sql-filter": "Color = 'Red'"}, "'expression' string"),
    ({"sql-filter": {"expression": "Color ="}}, "cannot parse the SQL filter"),
    ({"correlation-filter": {"properties": [1]}}, "properties"),
])
def test_a_bad_rule_description_says_what_is_wrong(description: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        rule_from_description("r", description)


def test_enumerated_rules_are_described_lists_with_the_documented_codes() -> None:
    correlation = described_rule(RuleProperties("c", CorrelationFilter(correlation_id="x", subject="Red",
                                                                       properties={"n": 1})))
    assert correlation == encoded(correlation)
    assert int(correlation.descriptor) == RULE_DESCRIPTION_CODE
    rule_filter, action, name = correlation.value
    assert (int(rule_filter.descriptor), rule_filter.value) == \
        (CORRELATION_FILTER_CODE, ["x", None, None, None, "Red", None, None, None, {"n": 1}])
    assert (int(action.descriptor), action.value, name) == (EMPTY_ACTION_CODE, [], "c")
    sql = described_rule(RuleProperties("s", SqlFilter("a = 1"), SqlRuleAction("SET b = 2")))
    assert [(int(part.descriptor), part.value) for part in sql.value[:2]] == \
        [(SQL_FILTER_CODE, ["a = 1"]), (SQL_ACTION_CODE, ["SET b = 2"])]
    assert int(described_rule(RuleProperties("t", TrueFilter())).value[0].descriptor) == TRUE_FILTER_CODE
    assert int(described_rule(RuleProperties("f", FalseFilter())).value[0].descriptor) == FALSE_FILTER_CODE
    assert isinstance(sql, Described)
