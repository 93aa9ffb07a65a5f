"""Subscription rule semantics through compile_rules(...).select(...)."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest

from ray_broker.errors import InvalidArgumentError, RuleSyntaxError
from ray_broker.filters import (DEFAULT_RULE_NAME, CorrelationFilter, FalseFilter, RuleProperties, Selection,
                                SqlFilter, SqlRuleAction, TrueFilter, compile_rules, rule_to_wire)

SYSTEM = {"sequence_number": 7, "enqueued_time_utc": datetime(2024, 6, 1, tzinfo=timezone.utc),
          "enqueued_sequence_number": 7, "size": 120, "delivery_count": 0}


def message(**properties: Any) -> dict[str, Any]:
    return {"body": b"payload", "message_id": "m-1", "subject": "orders", "application_properties": properties}


def rules(*items: RuleProperties) -> Any:
    return compile_rules([rule_to_wire(item) for item in items])


def rule(name: str, filter: Any = None, action: str | None = None) -> RuleProperties:
    return RuleProperties(name, filter or TrueFilter(), None if action is None else SqlRuleAction(action))


def test_no_rules_select_nothing() -> None:
    compiled = rules()
    assert compiled.needs_properties is False
    assert compiled.select(message(), SYSTEM) == Selection(False, [], None)
    assert compiled.select(None, SYSTEM).plain is False


def test_one_true_filter_delivers_the_message_once() -> None:
    compiled = rules(rule(DEFAULT_RULE_NAME))
    assert compiled.needs_properties is False
    assert compiled.select(None, {}) == Selection(True, [], None)
    assert compiled.select(message(), SYSTEM).plain is True


def test_false_filter_matches_nothing() -> None:
    compiled = rules(rule("never", FalseFilter()), rule("never-with-action", FalseFilter(), "SET a = 1"))
    assert compiled.needs_properties is False
    assert compiled.select(message(), SYSTEM) == Selection(False, [], None)


def test_constant_sql_filters_need_no_properties() -> None:
    assert rules(rule("t", SqlFilter("1=1")), rule("f", SqlFilter("1 = 0"))).needs_properties is False
    assert rules(rule("s", SqlFilter("user.a = 1"))).needs_properties is True
    assert rules(rule("c", CorrelationFilter(subject="orders"))).needs_properties is True
    assert rules(rule("t", TrueFilter(), "SET user.a = 1")).needs_properties is True


def test_several_matching_rules_without_actions_give_one_plain_copy() -> None:
    compiled = rules(rule("a", SqlFilter("n > 1")), rule("b", SqlFilter("n > 2")),
                     rule("c", CorrelationFilter(subject="orders")), rule("d", SqlFilter("n > 100")))
    selection = compiled.select(message(n=5), SYSTEM)
    assert selection == Selection(True, [], None)
    assert compiled.select(message(n=0), SYSTEM).plain is True
    assert compiled.select({"subject": "other", "application_properties": {"n": 0}}, SYSTEM).plain is False


def test_each_matching_rule_with_an_action_gives_its_own_copy() -> None:
    compiled = rules(
        rule("gold", SqlFilter("user.total > 100"), "SET user.tier = 'gold'; REMOVE user.tmp; SET sys.Label = 'vip'"),
        rule("audit", TrueFilter(), "SET user.audited = TRUE; SET sys.TimeToLive = 60"),
        rule("skip", SqlFilter("user.total > 1000"), "SET user.tier = 'platinum'"),
    )
    original = message(total=150, tmp="x")
    before = copy.deepcopy(original)
    selection = compiled.select(original, SYSTEM)
    assert selection.plain is False and selection.error is None
    gold, audit = selection.copies
    assert gold["application_properties"] == {"total": 150, "tier": "gold", "RuleName": "gold"}
    assert gold["subject"] == "vip" and gold["body"] == b"payload"
    assert audit["application_properties"] == {"total": 150, "tmp": "x", "audited": True, "RuleName": "audit"}
    assert audit["subject"] == "orders" and audit["time_to_live"] == 60.0
    assert original == before
    assert gold is not original and gold["application_properties"] is not original["application_properties"]


def test_plain_and_action_rules_together() -> None:
    compiled = rules(rule(DEFAULT_RULE_NAME),
                     rule("tagged", SqlFilter("EXISTS(tag)"), "SET user.seen = sys.SequenceNumber"))
    selection = compiled.select(message(tag="t"), SYSTEM)
    assert selection.plain is True
    assert [c["application_properties"] for c in selection.copies] == [{"tag": "t", "seen": 7, "RuleName": "tagged"}]
    assert compiled.select(message(), SYSTEM) == Selection(True, [], None)


def test_rule_name_overrides_a_property_set_by_the_action() -> None:
    selection = rules(rule("r", TrueFilter(), "SET user.RuleName = 'mine'")).select(message(), SYSTEM)
    assert selection.copies[0]["application_properties"]["RuleName"] == "r"


def test_a_failing_filter_reports_an_error_and_other_rules_still_apply() -> None:
    compiled = rules(rule("broken", SqlFilter("user.n / user.zero > 1")), rule("ok", SqlFilter("user.n = 4")),
                     rule("copy", SqlFilter("user.n > 1"), "SET user.x = 1"),
                     rule("also-broken", SqlFilter("user.n * 'a' = 1")))
    selection = compiled.select(message(n=4, zero=0), SYSTEM)
    assert selection.plain is True
    assert [c["application_properties"]["RuleName"] for c in selection.copies] == ["copy"]
    assert selection.error is not None
    assert selection.error.startswith('rule "broken": the filter "user.n / user.zero > 1" failed: division by zero')


def test_a_failing_action_reports_an_error_and_gives_no_copy() -> None:
    compiled = rules(rule("bad", TrueFilter(), "SET user.x = user.s * 2"), rule("good", TrueFilter(), "SET user.y = 1"))
    selection = compiled.select(message(s="a"), SYSTEM)
    assert selection.plain is False
    assert [c["application_properties"]["RuleName"] for c in selection.copies] == ["good"]
    assert selection.error is not None
    assert selection.error.startswith('rule "bad": the action "SET user.x = user.s * 2" failed: cannot compute')


def test_only_a_failure_gives_an_error_and_no_match() -> None:
    selection = rules(rule("broken", SqlFilter("1 / n = 1"))).select(message(n=0), SYSTEM)
    assert (selection.plain, selection.copies) == (False, [])
    assert selection.error is not None and "division by zero" in selection.error


def test_system_values_come_from_the_system_mapping() -> None:
    compiled = rules(rule("r", SqlFilter("sys.SequenceNumber = 7 AND sys.Size < 200 AND sys.DeliveryCount = 0")))
    assert compiled.select(message(), SYSTEM).plain is True
    assert compiled.select(message(), {**SYSTEM, "size": 500}).plain is False
    with_parameter = rules(RuleProperties("r", SqlFilter("sys.EnqueuedTimeUtc > @t AND sys.SequenceNumber = 7",
                                                         {"@t": datetime(2024, 1, 1, tzinfo=timezone.utc)})))
    assert with_parameter.select(message(), SYSTEM).plain is True
    assert with_parameter.select(message(), {}).plain is False


def test_filters_never_read_the_body() -> None:
    compiled = rules(rule("r", SqlFilter("EXISTS(body) OR body IS NOT NULL")))
    assert compiled.select(message(), SYSTEM).plain is False


def test_actions_read_names_that_start_with_a_keyword_as_names() -> None:
    compiled = rules(rule("r", SqlFilter("orders > 1 AND notes IS NULL"),
                          "SET isbn = 'x'; SET order_id = orders + 1; SET setting = TRUE; "
                          "REMOVE removed; SET andrew = nullable + nothing"))
    selection = compiled.select(message(orders=2, removed=1, nullable=4, nothing=5), SYSTEM)
    assert selection.error is None
    assert selection.copies[0]["application_properties"] == {
        "orders": 2, "nullable": 4, "nothing": 5, "isbn": "x", "order_id": 3, "setting": True,
        "andrew": 9, "RuleName": "r"}
    assert compiled.select(message(orders=2, notes="n"), SYSTEM) == Selection(False, [], None)


@pytest.mark.parametrize(("text", "column", "found"), [
    ("SET a = 1 ORDERS", 11, "ORDERS"),
    ("SET a = 1 SETb = 2", 11, "SETb"),
    ("SET a = b ANDy", 11, "ANDy"),
    ("SET a = 1; REMOVEd", 12, "REMOVEd"),
    ("SETTINGS = 1", 1, "SETTINGS"),
    ("REMOVEfoo", 1, "REMOVEfoo"),
])
def test_actions_refuse_keywords_glued_to_names(text: str, column: int, found: str) -> None:
    with pytest.raises(RuleSyntaxError) as caught:
        SqlRuleAction(text)
    assert (caught.value.line, caught.value.column) == (1, column)
    assert f'at line 1, column {column}: expected ' in str(caught.value)
    assert str(caught.value).endswith(f'found "{found}"')


def test_compile_rules_checks_its_input() -> None:
    with pytest.raises(InvalidArgumentError):
        compile_rules({"name": "r"})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        compile_rules([{"name": "bad name", "filter": {"type": "true"}}])
    with pytest.raises(RuleSyntaxError):
        compile_rules([{"name": "r", "filter": {"type": "sql", "sql_expression": "a ="}}])


def test_selection_fields() -> None:
    selection = rules(rule("r", TrueFilter(), "SET a = 1")).select(message(), SYSTEM)
    assert isinstance(selection.copies, list) and selection.error is None
    with pytest.raises(AttributeError):
        selection.plain = True  # type: ignore[misc]
