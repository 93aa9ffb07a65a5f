"""The rule language: SQL filters, correlation filters, actions, their errors and wire forms."""
from __future__ import annotations

import pickle
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from ray_broker import codec
from ray_broker.errors import InvalidArgumentError, RuleSyntaxError
from ray_broker.filters import (DEFAULT_RULE_NAME, CorrelationFilter, FalseFilter, FilterEvaluationError,
                                RuleProperties, SqlFilter, SqlRuleAction, TrueFilter, action_from_wire,
                                check_rule_name, compile_rules, filter_from_wire, rule_from_wire, rule_to_wire)
from ray_broker.filters.properties import MessageView
from ray_broker.message import Message
from ray_broker.filters.sql import compile_action, compile_condition

ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
WIRE: dict[str, Any] = {
    "body": b"never read by filters",
    "message_id": "m-1", "correlation_id": "corr", "subject": "orders", "to": "dest", "reply_to": "rt",
    "session_id": "s-1", "reply_to_session_id": "rs", "content_type": "application/json",
    "time_to_live": 60.0, "scheduled_enqueue_time": 1_700_000_000.0,
    "application_properties": {
        "priority": 5, "region": "eu", "ratio": 0.5, "flag": True, "name": "it's", "my prop": "x",
        "when": datetime(2024, 1, 1, tzinfo=timezone.utc), "id": ID, "data": b"\x01", "nothing": None,
        "Mixed": "M", "code": "10%off",
    },
}
SYSTEM = {"sequence_number": 42, "enqueued_time_utc": datetime(2024, 6, 1, tzinfo=timezone.utc),
          "enqueued_sequence_number": 42, "size": 300, "delivery_count": 0}
PARAMETERS = {"@min": 3, "@Region": "eu", "@when": datetime(2023, 1, 1, tzinfo=timezone.utc), "@id": ID,
              "data": b"\x01"}

TABLE = [
    # comparison operators
    ("priority = 5", True),
    ("priority <> 5", False),
    ("priority != 4", True),
    ("priority > 4", True),
    ("priority >= 5", True),
    ("priority < 5", False),
    ("priority <= 5", True),
    ("ratio < 1", True),
    ("priority = 5.0", True),
    ("region = 'eu'", True),
    ("region = 'EU'", False),
    ("region > 'ab'", True),
    # logic with unknown (a missing user property)
    ("missing = 1", False),
    ("NOT missing = 1", False),
    ("missing = 1 OR priority = 5", True),
    ("missing = 1 AND priority = 5", False),
    ("NOT (missing = 1 AND priority = 4)", True),
    ("NOT (missing = 1 OR priority = 5)", False),
    ("NOT (missing = 1 OR priority = 4)", False),
    ("TRUE", True),
    ("FALSE", False),
    ("NOT FALSE", True),
    # arithmetic
    ("priority + 1 = 6", True),
    ("priority - 7 = -2", True),
    ("priority * 2 = 10", True),
    ("priority / 2 = 2", True),
    ("priority / 2.0 = 2.5", True),
    ("priority % 3 = 2", True),
    ("-priority = -5", True),
    ("priority + ratio = 5.5", True),
    ("2 + 3 * 4 = 14", True),
    ("(2 + 3) * 4 = 20", True),
    ("1.5e1 = 15", True),
    ("missing + 1 IS NULL", True),
    # string concatenation
    ("region + '-' + sys.label = 'eu-orders'", True),
    # LIKE
    ("sys.label LIKE 'ord%'", True),
    ("sys.label LIKE 'ord_rs'", True),
    ("sys.label LIKE 'ord_'", False),
    ("sys.label LIKE '%DERS'", False),
    ("code LIKE '10!%%' ESCAPE '!'", True),
    ("code LIKE '10!%' ESCAPE '!'", False),
    ("sys.label NOT LIKE 'x%'", True),
    ("priority LIKE '5'", False),
    ("NOT priority LIKE '5'", False),
    ("missing NOT LIKE 'x%'", False),
    # IN
    ("region IN ('us', 'eu')", True),
    ("region IN ('us', 'asia')", False),
    ("region NOT IN ('us', 'asia')", True),
    ("priority IN (1, 5, 9)", True),
    ("priority IN (1, NULL)", False),
    ("priority NOT IN (1, NULL)", False),
    ("priority IN (5, NULL)", True),
    ("missing IN (1, 2)", False),
    ("missing NOT IN (1, 2)", False),
    # IS [NOT] NULL
    ("missing IS NULL", True),
    ("nothing IS NULL", True),
    ("region IS NOT NULL", True),
    ("sys.PartitionKey IS NULL", True),
    # EXISTS
    ("EXISTS(region)", True),
    ("EXISTS missing", False),
    ("EXISTS(nothing)", True),
    ("NOT EXISTS(missing)", True),
    ("EXISTS(sys.SessionId) AND NOT EXISTS(sys.PartitionKey)", True),
    # sys. vs user. vs bare names
    ("user.priority = 5", True),
    ("sys.MessageId = 'm-1'", True),
    ("sys.Label = 'orders' AND sys.Subject = 'orders'", True),
    ("sys.CorrelationId = 'corr' AND sys.To = 'dest' AND sys.ReplyTo = 'rt'", True),
    ("sys.SessionId = 's-1' AND sys.ReplyToSessionId = 'rs' AND sys.ContentType = 'application/json'", True),
    ("sys.TimeToLive = 60", True),
    ("sys.SequenceNumber = 42 AND sys.Size > 100 AND sys.DeliveryCount = 0 AND sys.EnqueuedSequenceNumber = 42",
     True),
    ("label = 'orders'", False),
    # case-insensitive names and keywords
    ("PRIORITY = 5", True),
    ("User.Priority = 5", True),
    ("SYS.LABEL = 'orders'", True),
    ("priority = 5 and region = 'eu' Or false", True),
    ("mixed = 'M'", True),
    ("region like 'E%'", False),
    # type mismatches give unknown, never an error
    ("priority > 'abc'", False),
    ("NOT priority > 'abc'", False),
    ("region = 5", False),
    ("flag = 1", False),
    ("when = '2024-01-01'", False),
    ("id > @id", False),
    # bools
    ("flag = TRUE", True),
    ("flag", True),
    ("NOT flag", False),
    ("flag <> FALSE", True),
    # parameters
    ("priority > @min", True),
    ("region = @region", True),
    ("data = @data", True),
    # datetimes, uuids, bytes
    ("when > @when", True),
    ("sys.EnqueuedTimeUtc > when", True),
    ("sys.ScheduledEnqueueTimeUtc < when", True),
    ("id = @id", True),
    ("id = '12345678-1234-5678-1234-567812345678'", True),
    ("data = '\x01'", False),
    # quoted strings and bracketed or quoted names
    ("name = 'it''s'", True),
    ("[my prop] = 'x'", True),
    ("user.[my prop] = 'x'", True),
    ('"my prop" = \'x\'', True),
    # functions
    ("property('region') = 'eu'", True),
    ("p('sys.Label') = 'orders'", True),
    ("p('user.' + 'region') = 'eu'", True),
    ("newid() IS NOT NULL", True),
    ("newid() LIKE '________-____-4___-____-____________'", True),
    # several lines
    ("priority = 5\n  AND region = 'eu'\n", True),
]


def matches(expression: str, wire: dict[str, Any] | None = None, parameters: dict[str, Any] | None = None) -> bool:
    rule = RuleProperties("r", SqlFilter(expression, parameters))
    return compile_rules([rule_to_wire(rule)]).select(WIRE if wire is None else wire, SYSTEM).plain


def evaluate(expression: str, properties: dict[str, Any] | None = None) -> bool | None:
    wire = {"application_properties": properties or {}}
    return compile_condition(expression).evaluate(MessageView(wire, SYSTEM))


def test_the_table_is_large_enough() -> None:
    assert len(TABLE) >= 60


@pytest.mark.parametrize(("expression", "expected"), TABLE)
def test_sql_filter_table(expression: str, expected: bool) -> None:
    assert matches(expression, parameters=PARAMETERS) is expected


U = "missing = 1"
TRUTH = {True: "TRUE", False: "FALSE", None: U}


@pytest.mark.parametrize("left", [True, False, None])
@pytest.mark.parametrize("right", [True, False, None])
def test_and_or_truth_tables(left: bool | None, right: bool | None) -> None:
    expected_and = False if False in (left, right) else None if None in (left, right) else True
    expected_or = True if True in (left, right) else None if None in (left, right) else False
    assert evaluate(f"({TRUTH[left]}) AND ({TRUTH[right]})") is expected_and
    assert evaluate(f"({TRUTH[left]}) OR ({TRUTH[right]})") is expected_or


@pytest.mark.parametrize(("operand", "expected"), [(True, False), (False, True), (None, None)])
def test_not_truth_table(operand: bool | None, expected: bool | None) -> None:
    assert evaluate(f"NOT ({TRUTH[operand]})") is expected


def test_comparisons_with_unknown_are_unknown() -> None:
    for op in ("=", "<>", "!=", ">", ">=", "<", "<="):
        assert evaluate(f"missing {op} 1") is None
        assert evaluate(f"1 {op} NULL") is None


def test_constant_conditions_are_known_at_compile_time() -> None:
    assert compile_condition("1=1").constant is True
    assert compile_condition("1=0").constant is False
    assert compile_condition("NULL = 1").constant is False
    assert compile_condition("x = 1").constant is None


def test_user_property_lookup_prefers_the_exact_spelling_then_the_first_key() -> None:
    props = {"color": "red", "Color": "green", "COLOR": "blue"}
    assert evaluate("Color = 'green'", props)
    assert evaluate("cOLOR = 'red'", props)
    assert evaluate("cOLOR = 'red'", {"COLOR": "blue", "color": "red"}) is False


@pytest.mark.parametrize(("expression", "line", "column", "fragment"), [
    ("sys.label = 'x' AND", 1, 20, "expected an expression after AND"),
    ("a = (1", 1, 7, 'expected ")" after "1"'),
    ("a = 1)", 1, 6, 'found ")"'),
    ("a b", 1, 3, "expected an operator"),
    ("a in 1", 1, 6, 'expected "(" after IN'),
    ("a is 5", 1, 6, "expected NOT or NULL after IS"),
    ("a = 'abc", 1, 5, "a string that is not closed"),
    ("[a = 1", 1, 1, "not closed with ]"),
    ("a # 1", 1, 3, 'unexpected character "#"'),
    ("a = 1\n  AND b = \n\n", 2, 10, 'expected an expression after "="'),
    ("a = 1 AND\n\n  (b = 2 OR c c)", 3, 15, 'found "c"'),
    ("priority = 1 AND\n  sys.Nope = 2", 2, 7, "unknown system property sys.Nope"),
    ("bar.x = 1", 1, 1, 'unknown scope "bar"'),
    ("x = @missing", 1, 5, "unknown parameter @missing"),
    ("foo(1) = 1", 1, 1, "unknown function foo()"),
    ("1 + 2", 1, 1, "expected a condition"),
    ("x AND 'a'", 1, 7, "expected a condition"),
    ("x LIKE 5", 1, 8, "the LIKE pattern must be a string"),
    ("x LIKE 'a' ESCAPE 'ab'", 1, 19, "the ESCAPE character must be one character"),
    ("x LIKE 'a!' ESCAPE '!'", 1, 8, "ends with its escape character"),
    ("p('sys.Nope') = 1", 1, 3, "unknown system property sys.Nope"),
    ("99999999999999999999 = 1", 1, 1, "does not fit in 64 bits"),
    ("   ", 1, 1, "it is empty"),
    # keywords are whole words: a word that merely starts with one is a name, and a name is out of place here
    ("FROM orders", 1, 6, 'expected an operator or the end of the text after "FROM", found "orders"'),
    ("SELECT * FROM orders", 1, 15, 'found "orders"'),
    ("user.a = 1 ORDERS = 2", 1, 12, 'expected an operator or the end of the text after "1", found "ORDERS"'),
    ("a = 1 ANDrew = 2", 1, 7, 'found "ANDrew"'),
    ("NOTa = 1 ORb = 2", 1, 10, 'found "ORb"'),
    ("x ISNULL", 1, 3, 'found "ISNULL"'),
    ("x IS NOTNULL", 1, 6, 'expected NOT or NULL after IS, found "NOTNULL"'),
    ("x IS nullable", 1, 6, 'expected NOT or NULL after IS, found "nullable"'),
    ("x IS NOT NULLs", 1, 10, 'expected NULL after NOT, found "NULLs"'),
    ("x INx (1)", 1, 3, 'found "INx"'),
    ("x NOT INx (1)", 1, 7, 'expected IN or LIKE after NOT, found "INx"'),
    ("x LIKEly 'a'", 1, 3, 'found "LIKEly"'),
    ("x LIKE 'a' ESCAPEd '!'", 1, 12, 'ESCAPE or the end of the text after "\'a\'", found "ESCAPEd"'),
])
def test_syntax_errors_name_the_line_and_column(expression: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(RuleSyntaxError) as caught:
        SqlFilter(expression)
    error = caught.value
    assert (error.line, error.column, error.expression) == (line, column, expression)
    assert f'the SQL filter "{expression}" at line {line}, column {column}: ' in str(error)
    assert fragment in str(error)
    assert isinstance(error, InvalidArgumentError)


KEYWORD_PREFIXED_NAMES = [
    # (expression, a message it matches, a message it does not match)
    ("user.orders = 1", {"orders": 1}, {"orders": 2}),
    ("orders = 1 OR ornament = 2", {"ornament": 2}, {"orders": 2}),
    ("isbn = 'x'", {"isbn": "x"}, {"isbn": "y"}),
    ("notes IS NULL", {}, {"notes": "n"}),
    ("NOT nothing = 1", {"nothing": 2}, {"nothing": 1}),
    ("index IN (1, 2)", {"index": 2}, {"index": 3}),
    ("inx NOT IN (1)", {"inx": 2}, {"inx": 1}),
    ("likes > 3", {"likes": 4}, {"likes": 3}),
    ("escaped = 1", {"escaped": 1}, {"escaped": 0}),
    ("andrew = 'x' AND android = 'y'", {"andrew": "x", "android": "y"}, {"andrew": "x"}),
    ("order_id = 5", {"order_id": 5}, {"order_id": 6}),
    ("or1 = 1", {"or1": 1}, {"or1": 2}),
    ("existing = TRUE AND EXISTS(exists_flag)", {"existing": True, "exists_flag": 0}, {"existing": True}),
    ("truth = trueish", {"truth": 1, "trueish": 1}, {"truth": 1, "trueish": 2}),
    ("nullable IS NOT NULL AND falsey = 0", {"nullable": 1, "falsey": 0}, {"falsey": 0}),
    ("settings = 1 AND removed = 2", {"settings": 1, "removed": 2}, {"settings": 1, "removed": 1}),
]


@pytest.mark.parametrize(("expression", "matching", "other"), KEYWORD_PREFIXED_NAMES)
def test_names_that_start_with_a_keyword_are_names(expression: str, matching: dict[str, Any],
                                                   other: dict[str, Any]) -> None:
    assert matches(expression, {"application_properties": matching}) is True
    assert matches(expression, {"application_properties": other}) is False


def test_like_escape_reads_its_keywords_next_to_names_that_start_with_them() -> None:
    expression = "sys.Label LIKE 'a!%%' ESCAPE '!' AND likes > 3 AND escaped = 1"
    props = {"likes": 4, "escaped": 1}
    assert matches(expression, {"subject": "a%b", "application_properties": props}) is True
    assert matches(expression, {"subject": "ab", "application_properties": props}) is False
    assert matches(expression, {"subject": "a%b", "application_properties": {**props, "escaped": 2}}) is False


def test_the_syntax_error_message_has_the_documented_form() -> None:
    with pytest.raises(RuleSyntaxError) as caught:
        SqlFilter("sys.label = 'x' AND")
    assert str(caught.value) == (
        "cannot parse the SQL filter \"sys.label = 'x' AND\" at line 1, column 20: expected an expression after AND")


def test_long_and_deeply_nested_texts_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="1026 characters long; the limit is 1024"):
        SqlFilter("a = '" + "x" * 1020 + "'")
    with pytest.raises(RuleSyntaxError, match="nests too deeply"):
        SqlFilter("-" * 1000 + "a = 1")
    with pytest.raises(RuleSyntaxError, match="nests too deeply"):
        SqlRuleAction("SET a = " + "-" * 1000 + "1")
    assert SqlFilter(" OR ".join(["a = 1"] * 100)).sql_expression.count("OR") == 99


@pytest.mark.parametrize(("expression", "fragment"), [
    ("SET sys.SequenceNumber = 1", "sys.SequenceNumber cannot be changed by a rule action"),
    ("REMOVE sys.PartitionKey", "sys.PartitionKey cannot be changed"),
    ("SET sys.Label = 5", "sys.Label takes a string"),
    ("SET sys.TimeToLive = 'long'", "sys.TimeToLive takes a number"),
    ("SET a = 1 b", "expected an operator"),
    ("SET sys.Nope = 1", "unknown system property sys.Nope"),
    ("user.a = 1", "expected REMOVE or SET"),
    ("SET a = 1 ORDERS", 'at line 1, column 11: expected an operator, ";", REMOVE, SET or the end of the text after '
                         '"1", found "ORDERS"'),
    ("SETTINGS = 1", 'at line 1, column 1: expected REMOVE or SET, found "SETTINGS"'),
    ("SET a = 1 SETb = 2", 'at line 1, column 11: expected an operator'),
    ("", "it is empty"),
])
def test_action_syntax_errors(expression: str, fragment: str) -> None:
    with pytest.raises(RuleSyntaxError, match="cannot parse the SQL rule action") as caught:
        SqlRuleAction(expression)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("expression", "fragment"), [
    ("priority / 0 = 1", "division by zero"),
    ("priority % 0 = 1", "division by zero"),
    ("ratio / 0 = 1", "division by zero"),
    ("1 / 0 = 1", "division by zero"),
    ("region * 2 = 1", "cannot compute a string ('eu') * a number (2)"),
    ("region + 1 = 1", "+ takes numbers, or + on two strings"),
    ("-region = 1", "cannot negate"),
    ("flag + 1 = 2", "cannot compute a boolean"),
    ("p(priority) = 1", "takes the property name as a string"),
    ("p('sys.' + region) = 1", "unknown system property sys.eu"),
])
def test_evaluation_errors_raise_filter_evaluation_error(expression: str, fragment: str) -> None:
    condition = compile_condition(expression)
    with pytest.raises(FilterEvaluationError) as caught:
        condition.evaluate(MessageView(WIRE, SYSTEM))
    assert fragment in caught.value.description


def test_short_circuits_skip_the_failing_side() -> None:
    assert evaluate("FALSE AND 1 / 0 = 1") is False
    assert evaluate("TRUE OR 1 / 0 = 1") is True


def test_action_evaluation_errors() -> None:
    for text, fragment in [("SET user.x = region * 2", "cannot compute"),
                           ("SET sys.Label = priority", "sys.Label takes a string"),
                           ("SET sys.TimeToLive = -1", "sys.TimeToLive takes a number of seconds"),
                           ("SET sys.MessageId = ''", "1 to 128 characters"),
                           ("SET user.big = 9223372036854775807 + 1", "user.big cannot hold a number")]:
        with pytest.raises(FilterEvaluationError, match=fragment):
            compile_action(text)(WIRE, SYSTEM)


def test_actions_apply_in_order_to_a_copy() -> None:
    wire = {"subject": "a", "session_id": "s1", "partition_key": "s1",
            "application_properties": {"Tier": "x", "TMP": 1, "n": 1}}
    apply = compile_action("SET user.tier = 'gold'; REMOVE user.tmp; SET user.n = user.n + 1; "
                           "SET sys.Label = sys.Label + 'b'; SET sys.TimeToLive = 30; SET sys.SessionId = 's2' "
                           "SET user.copied = sys.Subject;")
    result = apply(wire, SYSTEM)
    assert result["application_properties"] == {"n": 2, "tier": "gold", "copied": "ab"}
    assert (result["subject"], result["time_to_live"], result["session_id"], result["partition_key"]) == (
        "ab", 30.0, "s2", "s2")
    assert wire == {"subject": "a", "session_id": "s1", "partition_key": "s1",
                    "application_properties": {"Tier": "x", "TMP": 1, "n": 1}}
    removed = compile_action("REMOVE sys.Label; SET sys.To = NULL; SET user.gone = NULL")(
        {"subject": "a", "to": "t"}, SYSTEM)
    assert removed == {"application_properties": {"gone": None}}


def test_parameters_in_actions_and_filters() -> None:
    action = SqlRuleAction("SET user.tier = @tier", {"tier": "gold"})
    assert compile_action(action.sql_expression, action.parameters)({}, SYSTEM)["application_properties"] == {
        "tier": "gold"}
    with pytest.raises(RuleSyntaxError, match="unknown parameter @tier"):
        SqlRuleAction("SET user.tier = @tier")
    with pytest.raises(InvalidArgumentError, match="given twice"):
        SqlFilter("a = @p", {"@p": 1, "P": 2})
    with pytest.raises(InvalidArgumentError, match="parameters take str, bytes"):
        SqlFilter("a = @p", {"@p": [1]})
    with pytest.raises(InvalidArgumentError, match="dict of name to value"):
        SqlFilter("a = @p", [("@p", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [
    lambda: SqlFilter(5),  # type: ignore[arg-type]
    lambda: SqlRuleAction(None),  # type: ignore[arg-type]
    lambda: CorrelationFilter(correlation_id=5),  # type: ignore[arg-type]
    lambda: CorrelationFilter(properties=["a"]),  # type: ignore[arg-type]
    lambda: CorrelationFilter(properties={"a": [1]}),
    lambda: CorrelationFilter(properties={"": 1}),
    lambda: CorrelationFilter(),
    lambda: CorrelationFilter(subject="a", label="b"),
    lambda: RuleProperties("bad name!", TrueFilter()),
    lambda: RuleProperties("r", "1=1"),  # type: ignore[arg-type]
    lambda: RuleProperties("r", TrueFilter(), "SET a = 1"),  # type: ignore[arg-type]
    lambda: filter_from_wire({"type": "regex"}),
    lambda: filter_from_wire({"type": "sql"}),
    lambda: action_from_wire({"type": "js"}),
    lambda: rule_from_wire({"name": "r"}),
])
def test_wrong_arguments_raise_invalid_argument_error(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        bad()


def test_rule_names() -> None:
    assert check_rule_name(DEFAULT_RULE_NAME) == "$Default"
    assert check_rule_name("a.b-c_d$" + "x" * 42) == "a.b-c_d$" + "x" * 42
    for bad in ("", "x" * 51, "a b", "a/b", None):
        with pytest.raises(InvalidArgumentError):
            check_rule_name(bad)


EXAMPLES = [
    SqlFilter("sys.label = @l", {"@l": "x", "when": datetime(2024, 1, 1, tzinfo=timezone.utc), "id": ID}),
    SqlFilter("a = 1"),
    TrueFilter(),
    FalseFilter(),
    CorrelationFilter(correlation_id="c", label="l", properties={"n": 1, "b": b"\x00", "u": ID}),
    CorrelationFilter(correlation_id="c", properties={"wait": timedelta(days=1, hours=2, minutes=3)}),
    SqlRuleAction("SET a = 1; REMOVE b"),
    SqlRuleAction("SET a = @v", {"v": 2.5}),
    RuleProperties("r1", CorrelationFilter(to="t"), SqlRuleAction("SET a = 1"),
                   datetime(2024, 1, 1, tzinfo=timezone.utc)),
    RuleProperties(DEFAULT_RULE_NAME),
]


@pytest.mark.parametrize("value", EXAMPLES, ids=repr)
def test_pickle_round_trips(value: Any) -> None:
    copy = pickle.loads(pickle.dumps(value))
    assert copy == value and type(copy) is type(value) and repr(copy) == repr(value)


@pytest.mark.parametrize("value", EXAMPLES, ids=repr)
def test_wire_round_trips_through_msgpack(value: Any) -> None:
    wire = codec.unpackb(codec.packb(value.to_wire()))
    if isinstance(value, RuleProperties):
        assert rule_from_wire(wire) == value and rule_to_wire(value) == value.to_wire()
    elif isinstance(value, SqlRuleAction):
        assert action_from_wire(wire) == value
    else:
        assert filter_from_wire(wire) == value


def test_equality_and_reprs() -> None:
    assert TrueFilter() == TrueFilter() and TrueFilter() != FalseFilter()
    assert TrueFilter() != SqlFilter("1=1") and isinstance(TrueFilter(), SqlFilter)
    assert (TrueFilter().sql_expression, FalseFilter().sql_expression) == ("1=1", "1=0")
    assert SqlFilter("a = 1") != SqlFilter("a = 2")
    assert action_from_wire(None) is None
    assert repr(SqlFilter("a = 1")) == "SqlFilter('a = 1')"
    assert repr(CorrelationFilter(subject="s")) == "CorrelationFilter(subject='s')"
    assert repr(RuleProperties("r")).startswith("RuleProperties(name='r', filter=TrueFilter()")


def test_rule_syntax_error_pickles_with_its_position() -> None:
    with pytest.raises(RuleSyntaxError) as caught:
        SqlRuleAction("SET a =\n")
    error = caught.value
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is RuleSyntaxError and str(copy) == str(error)
    assert (copy.expression, copy.line, copy.column) == ("SET a =\n", 1, 8)
    evaluation = pickle.loads(pickle.dumps(FilterEvaluationError("division by zero")))
    assert evaluation.description == "division by zero"


def correlation_matches(correlation: CorrelationFilter, wire: dict[str, Any]) -> bool:
    return compile_rules([rule_to_wire(RuleProperties("c", correlation))]).select(wire, SYSTEM).plain


@pytest.mark.parametrize(("field", "key", "value"), [
    ("correlation_id", "correlation_id", "corr"), ("message_id", "message_id", "m-1"), ("to", "to", "dest"),
    ("reply_to", "reply_to", "rt"), ("subject", "subject", "orders"), ("label", "subject", "orders"),
    ("session_id", "session_id", "s-1"), ("reply_to_session_id", "reply_to_session_id", "rs"),
    ("content_type", "content_type", "application/json"),
])
def test_correlation_filter_fields(field: str, key: str, value: str) -> None:
    correlation = CorrelationFilter(**{field: value})
    assert correlation_matches(correlation, WIRE)
    assert not correlation_matches(correlation, {**WIRE, key: value.upper()})
    assert not correlation_matches(correlation, {k: v for k, v in WIRE.items() if k != key})


def test_correlation_filter_properties_and_fields_are_anded() -> None:
    correlation = CorrelationFilter(correlation_id="corr", properties={"region": "eu", "priority": 5})
    assert correlation_matches(correlation, WIRE)
    assert correlation_matches(CorrelationFilter(properties={"REGION": "eu", "ratio": 0.5}), WIRE)
    assert not correlation_matches(CorrelationFilter(properties={"region": "EU"}), WIRE)
    assert not correlation_matches(CorrelationFilter(properties={"absent": None}), WIRE)
    assert correlation_matches(CorrelationFilter(properties={"nothing": None}), WIRE)
    assert not correlation_matches(CorrelationFilter(correlation_id="corr", properties={"priority": "5"}), WIRE)
    assert not correlation_matches(CorrelationFilter(correlation_id="other", properties={"region": "eu"}), WIRE)
    assert not correlation_matches(CorrelationFilter(properties={"flag": 1}), WIRE)


def test_correlation_filter_label_alias() -> None:
    correlation = CorrelationFilter(label="orders")
    assert correlation.subject == correlation.label == "orders"
    assert CorrelationFilter(subject="x", label="x") == CorrelationFilter(subject="x")


def test_a_duration_parameter_is_kept_compares_with_durations_and_no_message_property_holds_one() -> None:
    assert matches("@a < @b", parameters={"@a": timedelta(minutes=1), "@b": timedelta(hours=1)})
    assert not matches("wait = @w", {"application_properties": {"wait": 60}}, {"@w": timedelta(minutes=1)})
    with pytest.raises(TypeError, match="has type timedelta"):
        Message("m", application_properties={"wait": timedelta(minutes=1)})
