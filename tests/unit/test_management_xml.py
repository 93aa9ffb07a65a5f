"""The management API's XML: durations, entity descriptions and rules both ways, each read back by
the azure-servicebus SDK's own models, and every property the broker cannot honour refused."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus.management import QueueProperties as SdkQueueProperties
from azure.servicebus.management import QueueRuntimeProperties as SdkQueueRuntimeProperties
from azure.servicebus.management import RuleProperties as SdkRuleProperties
from azure.servicebus.management import SubscriptionProperties as SdkSubscriptionProperties
from azure.servicebus.management import TopicProperties as SdkTopicProperties
from azure.servicebus.management import TopicRuntimeProperties as SdkTopicRuntimeProperties
from azure.servicebus.management._generated.models import (
    QueueDescriptionEntry,
    RuleDescriptionEntry,
    SubscriptionDescriptionEntry,
    TopicDescriptionEntry,
)
from azure.servicebus.management._utils import deserialize_rule_key_values

from ray_broker.access_rules import AuthorizationRule
from ray_broker.entities import (
    QUEUE_DEFAULTS,
    SUBSCRIPTION_DEFAULTS,
    TOPIC_DEFAULTS,
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
    TopicRuntimeProperties,
    normalize_topic_options,
)
from ray_broker.errors import InvalidArgumentError
from ray_broker.filters import CorrelationFilter, FalseFilter, RuleProperties, SqlFilter, SqlRuleAction, TrueFilter
from ray_broker.management_http import atom
from ray_broker.management_http.descriptions import (
    QUEUE,
    SUBSCRIPTION,
    TOPIC,
    message_size_fixed,
    read_options,
    replacement,
    write_description,
)
from ray_broker.management_http.durations import NEVER, format_duration, parse_duration
from ray_broker.management_http.rule_xml import read_rule, write_rule

HOST = "localhost:5671"
BASE = f"https://{HOST}"
KB = message_size_fixed(256)
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def as_entry(name: str, description: ET.Element) -> ET.Element:
    """The entry the server sends, parsed back as a client would."""
    return ET.fromstring(atom.to_bytes(atom.entry(BASE, name, name, description, CREATED)))


def request_body(description: ET.Element) -> bytes:
    entry = ET.Element(atom.atom("entry"))
    ET.SubElement(entry, atom.atom("content"), type="application/xml").append(description)
    return atom.to_bytes(entry)


@pytest.mark.parametrize("seconds,text", [(30, "PT30S"), (600, "PT10M"), (86_400, "P1D"), (3_661, "PT1H1M1S"),
                                          (0.5, "PT0.5S"), (0, "PT0S"), (None, NEVER)])
def test_durations_both_ways(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text, "x") == seconds


@pytest.mark.parametrize("text", ["", "P", "PT", "P1Y", "P1M", "1 day", "PT-5S", "P1DT"])
def test_bad_durations_are_refused_naming_the_property(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="lock_duration"):
        parse_duration(text, "lock_duration")


def test_a_queue_description_reads_in_the_sdk_with_runtime_counts() -> None:
    queue = QueueProperties("orders", enable_partitioning=True, lock_duration=timedelta(seconds=30),
                            max_delivery_count=7, forward_to="archive", user_metadata="m", created_at_utc=CREATED)
    runtime = QueueRuntimeProperties("orders", active_message_count=3, dead_letter_message_count=1,
                                     scheduled_message_count=2, total_message_count=6, size_in_bytes=99)
    entry = QueueDescriptionEntry.deserialize(as_entry("orders", write_description(QUEUE, queue, HOST, (KB,), runtime)))
    sdk = SdkQueueProperties._from_internal_entity("orders", entry.content.queue_description)
    assert (sdk.enable_partitioning, sdk.lock_duration, sdk.max_delivery_count) == (True, timedelta(seconds=30), 7)
    assert sdk.forward_to == f"sb://{HOST}/archive" and sdk.user_metadata == "m"
    assert sdk.max_message_size_in_kilobytes == 256 and sdk.enable_batched_operations is True
    assert sdk.auto_delete_on_idle == sdk.default_message_time_to_live == timedelta(days=10_675_199, seconds=10_085,
                                                                                    microseconds=477_581)
    counts = SdkQueueRuntimeProperties._from_internal_entity("orders", entry.content.queue_description)
    assert (counts.active_message_count, counts.dead_letter_message_count, counts.scheduled_message_count,
            counts.total_message_count, counts.size_in_bytes) == (3, 1, 2, 6, 99)
    assert counts.created_at_utc == CREATED


def test_what_the_server_writes_reads_back_as_the_same_options() -> None:
    queue = QueueProperties("orders", requires_session=True, default_message_time_to_live=timedelta(hours=2),
                            duplicate_detection_history_time_window=timedelta(minutes=3),
                            forward_dead_lettered_messages_to="dlq-target", status="SendDisabled")
    description = atom.entry_content(request_body(write_description(QUEUE, queue, HOST, (KB,))),
                                     ["QueueDescription"])
    written = {option: value for option, value in queue.changes().items()
               if value is not None and option != "auto_delete_on_idle"}
    read = read_options(QUEUE, description, (KB,))
    assert read.pop("auto_delete_on_idle") is None and queue.auto_delete_on_idle == timedelta.max  # never, both ways
    assert read == {**written, "default_message_time_to_live": timedelta(hours=2)}
    assert written["forward_dead_lettered_messages_to"] == "dlq-target" and "forward_to" not in written


def test_topic_and_subscription_descriptions_read_in_the_sdk() -> None:
    topic = TopicProperties("news", max_size_in_megabytes=2048, created_at_utc=CREATED)
    runtime = TopicRuntimeProperties("news", scheduled_message_count=4, subscription_count=2, sql_filter_count=3,
                                     correlation_filter_count=1)
    entry = TopicDescriptionEntry.deserialize(as_entry("news", write_description(TOPIC, topic, HOST, (KB,), runtime)))
    counts = SdkTopicRuntimeProperties._from_internal_entity("news", entry.content.topic_description)
    assert (counts.subscription_count, counts.scheduled_message_count) == (2, 4)
    assert (counts.sql_filter_count, counts.correlation_filter_count) == (3, 1)
    assert entry.content.topic_description.max_size_in_megabytes == 2048
    subscription = SubscriptionProperties("s", topic_name="news", max_delivery_count=4,
                                          dead_lettering_on_filter_evaluation_exceptions=False)
    entry = SubscriptionDescriptionEntry.deserialize(as_entry("news/subscriptions/s",
                                                              write_description(SUBSCRIPTION, subscription, HOST)))
    sdk = SdkSubscriptionProperties._from_internal_entity("s", entry.content.subscription_description)
    assert (sdk.max_delivery_count, sdk.dead_lettering_on_filter_evaluation_exceptions) == (4, False)


def description(kind: str, **children: str) -> ET.Element:
    element = ET.Element(atom.sb(kind))
    for name, text in children.items():
        ET.SubElement(element, atom.sb(name)).text = text
    return element


def test_read_only_properties_are_passed_over_and_settings_read() -> None:
    options = read_options(QUEUE, description("QueueDescription", LockDuration="PT45S", MaxDeliveryCount="4",
                                              EnablePartitioning="true", MessageCount="12", SizeInBytes="7",
                                              CreatedAt="2026-01-01T00:00:00Z", EnableBatchedOperations="true",
                                              AutoDeleteOnIdle=NEVER, ForwardTo="sb://host/target"), (KB,))
    assert options == {"lock_duration": timedelta(seconds=45), "max_delivery_count": 4, "enable_partitioning": True,
                       "forward_to": "target", "auto_delete_on_idle": None, "enable_batched_operations": True}


def test_a_topic_keeps_support_ordering_as_sent() -> None:
    assert read_options(TOPIC, description("TopicDescription", SupportOrdering="false"), (KB,)) == \
        {"support_ordering": False}


def test_auto_delete_on_idle_and_express_are_read_and_shown_in_the_sdk() -> None:
    options = read_options(QUEUE, description("QueueDescription", AutoDeleteOnIdle="PT10M1S", EnableExpress="true",
                                              EnableBatchedOperations="false"), (KB,))
    assert options == {"auto_delete_on_idle": timedelta(minutes=10, seconds=1), "enable_express": True,
                       "enable_batched_operations": False}
    queue = QueueProperties("orders", auto_delete_on_idle=timedelta(minutes=10), enable_express=True)
    entry = QueueDescriptionEntry.deserialize(as_entry("orders", write_description(QUEUE, queue, HOST, (KB,))))
    sdk = SdkQueueProperties._from_internal_entity("orders", entry.content.queue_description)
    assert (sdk.auto_delete_on_idle, sdk.enable_express) == (timedelta(minutes=10), True)


@pytest.mark.parametrize("element,text,message", [
    ("IsAnonymousAccessible", "true", "IsAnonymousAccessible 'true' is not supported"),
    ("MaxMessageSizeInKilobytes", "1024", "the message size limit is the tier's, 256 KB"),
    ("Colour", "blue", "Colour is not a property of a QueueDescription"),
    ("MaxDeliveryCount", "many", "MaxDeliveryCount must be a whole number"),
    ("RequiresSession", "yes", "RequiresSession must be true or false"),
])
def test_what_the_broker_cannot_honour_is_refused_saying_what(element: str, text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        read_options(QUEUE, description("QueueDescription", **{element: text}), (KB,))


def test_authorization_rules_of_a_topic_read_in_the_sdk_and_back() -> None:
    rules = (AuthorizationRule("reader", ("Listen",), "pk1", "sk1"),
             AuthorizationRule("admin", ("Manage", "Send", "Listen"), "pk2", "sk2"))
    topic = TopicProperties("news", authorization_rules=rules, created_at_utc=CREATED)
    entry = TopicDescriptionEntry.deserialize(as_entry("news", write_description(TOPIC, topic, HOST, (KB,))))
    sdk = SdkTopicProperties._from_internal_entity("news", entry.content.topic_description)
    assert [(r.key_name, r.rights, r.primary_key, r.secondary_key, r.claim_type) for r in sdk.authorization_rules] == \
        [("reader", ["Listen"], "pk1", "sk1", "SharedAccessKey"),
         ("admin", ["Manage", "Send", "Listen"], "pk2", "sk2", "SharedAccessKey")]
    description_ = atom.entry_content(request_body(write_description(TOPIC, topic, HOST, (KB,))), ["TopicDescription"])
    assert read_options(TOPIC, description_, (KB,))["authorization_rules"] == rules
    assert normalize_topic_options({"authorization_rules": rules})["authorization_rules"] == \
        [["reader", "pk1", "sk1", ["Listen"]], ["admin", "pk2", "sk2", ["Manage", "Send", "Listen"]]]


def test_authorization_rules_on_a_subscription_or_of_another_claim_type_are_refused() -> None:
    element = description("SubscriptionDescription")
    rules = ET.SubElement(element, atom.sb("AuthorizationRules"))
    assert read_options(SUBSCRIPTION, element) == {}
    ET.SubElement(rules, atom.sb("AuthorizationRule"))
    with pytest.raises(InvalidArgumentError, match="put them on its queue or topic"):
        read_options(SUBSCRIPTION, element)
    element = description("QueueDescription")
    rule = ET.SubElement(ET.SubElement(element, atom.sb("AuthorizationRules")), atom.sb("AuthorizationRule"))
    ET.SubElement(rule, atom.sb("ClaimType")).text = "Windows"
    with pytest.raises(InvalidArgumentError, match="only SharedAccessKey rules"):
        read_options(QUEUE, element, (KB,))


def test_a_body_that_is_no_entry_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="not well-formed XML"):
        atom.entry_content(b"<entry", ["QueueDescription"])
    with pytest.raises(InvalidArgumentError, match="QueueDescription"):
        atom.entry_content(request_body(description("TopicDescription")), ["QueueDescription"])


RULES = [
    RuleProperties("sql", SqlFilter("priority > @low AND region = @r", {"@low": 3, "@r": "eu"}),
                   SqlRuleAction("SET lane = @lane", {"@lane": "fast"})),
    RuleProperties("corr", CorrelationFilter(correlation_id="c", subject="urgent", session_id="s",
                                             properties={"n": 5, "f": 1.5, "b": True, "s": "x"})),
    RuleProperties("yes", TrueFilter()),
    RuleProperties("no", FalseFilter(), SqlRuleAction("REMOVE tmp")),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rules_round_trip_and_read_in_the_sdk(rule: RuleProperties) -> None:
    entry_element = as_entry(rule.name, write_rule(rule))
    assert read_rule(entry_element.find(f"{atom.atom('content')}/{atom.sb('RuleDescription')}"), rule.name) == rule
    entry = RuleDescriptionEntry.deserialize(entry_element)
    sdk = SdkRuleProperties._from_internal_entity(rule.name, entry.content.rule_description)
    deserialize_rule_key_values(entry_element, sdk)
    if isinstance(rule.filter, CorrelationFilter):
        assert (sdk.filter.correlation_id, sdk.filter.label, sdk.filter.properties) == \
            ("c", "urgent", {"n": 5, "f": 1.5, "b": True, "s": "x"})
    else:
        assert sdk.filter.sql_expression == rule.filter.sql_expression
        assert type(sdk.filter).__name__.replace("RuleFilter", "") == type(rule.filter).__name__.replace("Filter", "")
    assert (sdk.action is None) == (rule.action is None)


def test_an_unknown_filter_type_or_value_type_is_refused() -> None:
    element = ET.Element(atom.sb("RuleDescription"))
    ET.SubElement(element, atom.sb("Filter"), {atom.XSI_TYPE: "RegexFilter"})
    with pytest.raises(InvalidArgumentError, match="filter type 'RegexFilter' is not supported"):
        read_rule(element, "r")
    rule = write_rule(RuleProperties("r", SqlFilter("a = @p", {"@p": 1})))
    rule.find(f".//{atom.sb('Value')}").set(atom.XSI_TYPE, "d6p1:base64Binary")
    with pytest.raises(InvalidArgumentError, match="base64Binary"):
        read_rule(rule, "r")


def test_an_update_unsets_what_its_description_leaves_out_that_can_be_unset() -> None:
    options = read_options(SUBSCRIPTION, description("SubscriptionDescription", MaxDeliveryCount="3"))
    assert replacement(SUBSCRIPTION, options) == {"max_delivery_count": 3, "default_message_time_to_live": None,
                                                  "forward_to": None, "forward_dead_lettered_messages_to": None,
                                                  "user_metadata": None, "auto_delete_on_idle": None}
    assert replacement(TOPIC, {"user_metadata": "m"}) == {"default_message_time_to_live": None, "user_metadata": "m",
                                                          "auto_delete_on_idle": None}


@pytest.mark.parametrize("kind,defaults", [(QUEUE, QUEUE_DEFAULTS), (TOPIC, TOPIC_DEFAULTS),
                                           (SUBSCRIPTION, SUBSCRIPTION_DEFAULTS)], ids=lambda k: getattr(k, "element", ""))
def test_every_broker_option_has_its_setting(kind: object, defaults: dict[str, object]) -> None:
    own_element = ["authorization_rules"] if "authorization_rules" in defaults else []  # AuthorizationRules
    assert sorted([*(s.option for s in kind.settings), *own_element]) == sorted(defaults)  # type: ignore[attr-defined]


def test_duration_and_zoneless_datetime_values_read_back_in_the_sdk_as_they_were_sent() -> None:
    sent = {"key_duration": timedelta(days=1, hours=2, minutes=3), "key_datetime": datetime(2020, 7, 5, 11, 12, 13),
            "key_aware": datetime(2020, 7, 5, 11, 12, 13, tzinfo=timezone.utc), "never": timedelta.max}
    rule = RuleProperties("typed", CorrelationFilter(correlation_id="c", properties=sent),
                          SqlRuleAction("SET Priority = @param", {"@param": timedelta(minutes=5)}))
    entry_element = as_entry(rule.name, write_rule(rule))
    assert read_rule(entry_element.find(f"{atom.atom('content')}/{atom.sb('RuleDescription')}"), rule.name) == rule
    sdk = SdkRuleProperties._from_internal_entity(
        rule.name, RuleDescriptionEntry.deserialize(entry_element).content.rule_description)
    deserialize_rule_key_values(entry_element, sdk)
    assert {k: v for k, v in sdk.filter.properties.items() if k != "never"} == \
        {k: v for k, v in sent.items() if k != "never"}
    assert sdk.action.parameters == {"@param": timedelta(minutes=5)}
