"""The emulator's Config.json, read without Ray: comments, every property applied or refused with
one line naming the entity and the property, SQL compiled, and the checks made before anything
starts (ports, data directory, partitions)."""
from __future__ import annotations

import doctest
import importlib
import json
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ray_broker.config import plan_config, save_config
from ray_broker.emulator.config_file import DEFAULT_NAMESPACE, loads_config, parse_config, read_config
from ray_broker.emulator.credentials import WELL_KNOWN_KEY, client_host, connection_string
from ray_broker.emulator.durations import duration_seconds
from ray_broker.emulator.preflight import EmulatorOptions, plan_emulator
from ray_broker.errors import EmulatorConfigError, InvalidArgumentError, InvalidOperationError, PortUnavailableError
from ray_broker.filters import CorrelationFilter, SqlFilter, SqlRuleAction
from ray_broker.keys.keyring import save_keys
from ray_broker.keys.sas import new_key

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "emulator" / "Config.json"


def document(queues: Any = (), topics: Any = (), **namespace: Any) -> dict[str, Any]:
    """A Config.json document with one namespace."""
    return {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": list(queues), "Topics": list(topics),
                                           **namespace}], "Logging": {"Type": "File"}}}


def refusal(doc: Any) -> str:
    """The message of the EmulatorConfigError `doc` raises (one line)."""
    with pytest.raises(EmulatorConfigError) as caught:
        parse_config(doc, "Config.json")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("Config.json")
    return message


def topic_with_rule(properties: Any) -> dict[str, Any]:
    return document(topics=[{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
        {"Name": "r", "Properties": properties}]}]}])


# ------------------------------------------------------------------ the example file

def test_the_example_file_with_comments_gives_every_entity_property_and_rule() -> None:
    config = read_config(str(EXAMPLE))
    assert config.namespace == "sbemulatorns" and config.logging == ("File",)
    assert [q.name for q in config.queues] == ["orders", "orders-failed", "payments"]
    orders = config.queues[0].options
    assert orders["default_message_time_to_live"] == timedelta(days=1)
    assert orders["duplicate_detection_history_time_window"] == timedelta(minutes=2)
    assert orders["lock_duration"] == timedelta(seconds=45) and orders["max_delivery_count"] == 5
    assert orders["forward_dead_lettered_messages_to"] == "orders-failed" and orders["forward_to"] is None
    assert orders["requires_duplicate_detection"] and orders["dead_lettering_on_message_expiration"]
    assert config.queues[2].options["requires_session"] and not config.partitioned
    (topic,) = config.topics
    assert topic.options["default_message_time_to_live"] == timedelta(hours=12)
    berlin, express, audit = topic.subscriptions
    assert berlin.options["lock_duration"] == timedelta(minutes=2) and berlin.options["max_delivery_count"] == 4
    assert berlin.rules[0].filter == CorrelationFilter(content_type="application/json", subject="parcel",
                                                       properties={"warehouse": "BER"})
    assert express.rules[0].filter == SqlFilter("service = 'express' AND weightKg > 20")
    assert express.rules[0].action == SqlRuleAction("SET handling = 'forklift'; SET sys.To = 'dock-7'")
    assert audit.rules == ()
    assert config.summary() == "3 queues, 1 topic (3 subscriptions, 2 rules)"


def test_left_out_properties_take_the_emulators_defaults() -> None:
    config = read_config(str(EXAMPLE))
    failed = config.queues[1].options
    assert failed == {"dead_lettering_on_message_expiration": False,
                      "default_message_time_to_live": timedelta(hours=1),
                      "duplicate_detection_history_time_window": timedelta(seconds=20),
                      "enable_partitioning": False, "forward_dead_lettered_messages_to": None, "forward_to": None,
                      "lock_duration": timedelta(minutes=1), "max_delivery_count": 3,
                      "requires_duplicate_detection": False, "requires_session": False}
    assert config.topics[0].subscriptions[2].options["default_message_time_to_live"] == timedelta(hours=1)


def test_a_queue_may_forward_to_itself_and_a_session_entity_may_forward() -> None:
    config = parse_config(document(queues=[{"Name": "q", "Properties": {"ForwardTo": "Q",
                                                                         "ForwardDeadLetteredMessagesTo": "q"}},
                                           {"Name": "s", "Properties": {"ForwardTo": "q", "RequiresSession": True}}]))
    assert [(q.options["forward_to"], q.options["forward_dead_lettered_messages_to"]) for q in config.queues] == [
        ("Q", "q"), ("q", None)]


def test_a_file_without_logging_queues_or_topics_is_an_empty_namespace() -> None:
    config = parse_config({"UserConfig": {"Namespaces": [{"Name": "dev"}]}})
    assert (config.namespace, config.queues, config.topics, config.logging) == ("dev", (), (), ("File",))


@pytest.mark.parametrize(("kind", "targets"), [("Console", ("Console",)), ("File,Console", ("File", "Console")),
                                               ("Console,File", ("Console", "File"))])
def test_logging_types(kind: str, targets: tuple[str, ...]) -> None:
    doc = document()
    doc["UserConfig"]["Logging"]["Type"] = kind
    assert parse_config(doc).logging == targets


def test_enable_partitioning_marks_the_file_partitioned() -> None:
    config = parse_config(document(topics=[{"Name": "t", "Properties": {"EnablePartitioning": True}}]))
    assert config.partitioned and config.topics[0].options["enable_partitioning"] is True


# ------------------------------------------------------------------ comments and JSON errors

def test_comments_outside_strings_are_dropped_and_those_inside_are_kept() -> None:
    text = """
    // a line comment with "quotes" and /* a block opener
    {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", /* a
    block comment over lines */ "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [
      {"Name": "r", "Properties": {"FilterType": "Sql",
        "SqlFilter": {"SqlExpression": "url = 'http://x/*y*/' AND note = '//z'"}}}]}]}]}]}} // end
    """
    rule = loads_config(text).topics[0].subscriptions[0].rules[0]
    assert rule.filter == SqlFilter("url = 'http://x/*y*/' AND note = '//z'")


def test_a_file_that_is_not_json_names_the_line_and_column_as_written() -> None:
    text = '// first line\n/* second\nthird */ {"UserConfig":\n  {"Namespaces": [}\n}'
    with pytest.raises(EmulatorConfigError, match=r"^Config.json is not JSON: Expecting value at line 4, "
                                                  r"column 19; fix the file"):
        loads_config(text)


def test_an_unclosed_block_comment_is_refused_with_its_position() -> None:
    with pytest.raises(EmulatorConfigError, match=r"comment that opens at line 2, column 3 is never closed"):
        loads_config('{\n  /* open\n"UserConfig": {}}')


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EmulatorConfigError, match=r"cannot read the configuration file .*nope.json: No such file"):
        read_config(str(tmp_path / "nope.json"))


# ------------------------------------------------------------------ refusals

@pytest.mark.parametrize(("doc", "words"), [
    ({"UserConfig": {"Namespaces": []}}, "'UserConfig.Namespaces': must hold exactly one namespace"),
    ({"UserConfig": {"Namespaces": [{"Name": "a"}, {"Name": "b"}]}}, "it holds 2"),
    ({"Config": {}}, "the document: unknown property 'Config'"),
    ({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queue": []}]}},
     "the namespace: unknown property 'Queue'"),
    ({"UserConfig": {"Namespaces": [{"Name": "9lives"}]}}, "namespace name '9lives' is invalid"),
    (document(queues=[{"Name": "q", "Properties": {"MaxSizeInMegabytes": 1024}}]),
     "queue 'q', 'Properties': unknown property 'MaxSizeInMegabytes'"),
    (document(queues=[{"Name": "q", "Properties": {"lockDuration": "PT1M"}}]),
     "unknown property 'lockDuration' (did you mean 'LockDuration'?)"),
    (document(topics=[{"Name": "t", "Properties": {"RequiresSession": True}}]),
     "topic 't', 'Properties': unknown property 'RequiresSession'"),
    (document(topics=[{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"ForwardTo": 3}}]}]),
     "subscription 's' of topic 't': ForwardTo must be the name of a queue or topic"),
    (document(topics=[{"Name": "t", "Subscriptions": [{"Name": "s", "Properties": {"EnablePartitioning": True}}]}]),
     "subscription 's' of topic 't', 'Properties': unknown property 'EnablePartitioning'"),
    (document(queues=[{"Name": "q", "Properties": {"LockDuration": "1 minute"}}]),
     "queue 'q': LockDuration must be an ISO 8601 duration such as PT30S"),
    (document(queues=[{"Name": "q", "Properties": {"DefaultMessageTimeToLive": 3600}}]),
     "queue 'q': DefaultMessageTimeToLive must be an ISO 8601 duration"),
    (document(queues=[{"Name": "q", "Properties": {"LockDuration": "PT10M"}}]),
     "queue 'q': LockDuration 'PT10M' is refused: it must be from 0:00:01 to 0:05:00"),
    (document(queues=[{"Name": "q", "Properties": {"DuplicateDetectionHistoryTimeWindow": "PT5S"}}]),
     "DuplicateDetectionHistoryTimeWindow 'PT5S' is refused: it must be from 0:00:20"),
    (document(queues=[{"Name": "q", "Properties": {"MaxDeliveryCount": 0}}]),
     "queue 'q': MaxDeliveryCount 0 is refused"),
    (document(queues=[{"Name": "q", "Properties": {"MaxDeliveryCount": "3"}}]),
     "queue 'q': MaxDeliveryCount must be a whole number, got '3'"),
    (document(queues=[{"Name": "q", "Properties": {"RequiresSession": "yes"}}]),
     "queue 'q': RequiresSession must be true or false"),
    (document(queues=[{"Name": "bad name"}]), "queue #1: queue name 'bad name' is invalid"),
    (document(queues=[{"Properties": {}}]), "queue #1: 'Name' is missing"),
    (document(queues=[{"Name": "Orders"}], topics=[{"Name": "orders"}]),
     "two queues or topics are named 'orders'"),
    (document(topics=[{"Name": "t", "Subscriptions": [{"Name": "s"}, {"Name": "S"}]}]),
     "topic 't': two subscriptions are named 'S'"),
    (document(queues=[{"Name": "q", "Properties": {"ForwardTo": "elsewhere"}}]),
     "queue 'q': ForwardTo names 'elsewhere', which is no queue or topic of the file"),
    (document(topics=[{"Name": "t", "Subscriptions": [{"Name": "s",
                                                       "Properties": {"ForwardTo": "t/subscriptions/s"}}]}]),
     "subscription 's' of topic 't': ForwardTo names 't/subscriptions/s', which is no queue or topic of the file"),
    ({"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": {"Name": "q"}}]}},
     "'Queues': must be a JSON array, got an object"),
])
def test_each_bad_property_is_one_line_naming_the_entity_and_the_property(doc: Any, words: str) -> None:
    assert words in refusal(doc)


@pytest.mark.parametrize(("properties", "words"), [
    ({"FilterType": "SqlFilter", "SqlFilter": {"SqlExpression": "1=1"}},
     "rule 'r' of subscription 's' of topic 't': FilterType must be \"Correlation\" or \"Sql\", got 'SqlFilter'"),
    ({"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a = = 1"}},
     "rule 'r' of subscription 's' of topic 't': SqlFilter is refused: cannot parse the SQL filter \"a = = 1\" "
     "at line 1, column 5"),
    ({"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": "SET"}},
     "rule 'r' of subscription 's' of topic 't': Action is refused: cannot parse the SQL rule action"),
    ({"FilterType": "Sql"}, "FilterType is \"Sql\" but the rule has no SqlFilter"),
    ({"FilterType": "Correlation", "CorrelationFilter": {}}, "CorrelationFilter is refused: a CorrelationFilter "
                                                             "needs at least one field"),
    ({"FilterType": "Correlation", "CorrelationFilter": {"Subject": "x"}},
     "'CorrelationFilter': unknown property 'Subject'"),
    ({"FilterType": "Correlation", "CorrelationFilter": {"Label": 7}}, "CorrelationFilter.Label must be a string"),
    ({"FilterType": "Correlation", "CorrelationFilter": {"Label": "x"}, "SqlFilter": {"SqlExpression": "1=1"}},
     "FilterType is 'Correlation' but the rule also has a SqlFilter; remove one of them"),
    ({"FilterType": "Sql", "SqlFilter": {"Expression": "1=1"}}, "'SqlFilter': unknown property 'Expression'"),
    ({"Filter": "Sql"}, "'Properties': unknown property 'Filter'"),
])
def test_each_bad_rule_is_one_line_naming_the_rule(properties: Any, words: str) -> None:
    assert words in refusal(topic_with_rule(properties))


def test_filter_types_are_read_regardless_of_case_as_the_emulator_reads_them() -> None:
    config = parse_config(topic_with_rule({"FilterType": "sql", "SqlFilter": {"SqlExpression": "1=1"}}))
    assert config.topics[0].subscriptions[0].rules[0].filter == SqlFilter("1=1")


def test_a_bad_logging_type_is_refused() -> None:
    doc = document()
    doc["UserConfig"]["Logging"] = {"Type": "Syslog"}
    assert "'UserConfig.Logging': Type must be \"File\", \"Console\" or \"File,Console\", got 'Syslog'" in refusal(doc)


def test_the_error_is_an_invalid_argument_error_as_every_bad_input() -> None:
    assert issubclass(EmulatorConfigError, InvalidArgumentError)


# ------------------------------------------------------------------ durations and credentials

@pytest.mark.parametrize(("text", "seconds"), [
    ("PT1M", 60), ("PT1H", 3600), ("P1D", 86400), ("PT20S", 20), ("PT1.5S", 1.5), ("P1DT2H3M4S", 93784),
    ("P1W", 604800), ("P1M", 30 * 86400), ("P1Y", 365 * 86400), ("PT0S", 0),
])
def test_iso_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "P1H", "PT1D", "-PT1M", "pt1m", "PT1M ", "PT1,5S", "P1DT"])
def test_texts_that_are_no_iso_duration(text: str) -> None:
    assert duration_seconds(text) is None


def test_the_published_connection_strings() -> None:
    assert WELL_KNOWN_KEY.name == "RootManageSharedAccessKey" and WELL_KNOWN_KEY.key == "SAS_KEY_VALUE"
    assert connection_string(client_host("127.0.0.1"), 5672) == (
        "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"
        "UseDevelopmentEmulator=true;")
    assert connection_string(client_host("0.0.0.0"), 5300).startswith("Endpoint=sb://localhost:5300;")
    assert connection_string(client_host("10.0.0.5"), 6000).startswith("Endpoint=sb://10.0.0.5:6000;")


def test_no_other_namespace_gets_the_published_key(tmp_path: Path) -> None:
    config = plan_config("plain", sku="standard", partitions=None, data_dir=str(tmp_path), gateways=1,
                         durability="normal", nodes=[("n", None)], local_node="n")
    assert all(key.key != WELL_KNOWN_KEY.key for key in config.shared_access_keys())


@pytest.mark.parametrize("name", ["ray_broker.emulator.jsonc", "ray_broker.emulator.durations",
                                  "ray_broker.emulator.credentials"])
def test_docstring_examples_run(name: str) -> None:
    results = doctest.testmod(importlib.import_module(name))
    assert results.attempted > 0 and results.failed == 0


# ------------------------------------------------------------------ checks before anything starts

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def options(**given: Any) -> EmulatorOptions:
    return EmulatorOptions(**{"amqp_port": free_port(), "management_port": free_port(), **given})


def write_config(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def stored_namespace(directory: Path, name: str = DEFAULT_NAMESPACE, **given: Any) -> None:
    """A namespace's configuration in `directory`, as a start writes it."""
    arguments = {"sku": "standard", "partitions": 2, "any_tier_partitions": True,
                 "shared_access_keys": (WELL_KNOWN_KEY,), **given}
    save_config(plan_config(name, data_dir=str(directory), gateways=1, durability="normal",
                            nodes=[("n", None)], local_node="n", **arguments))


def test_partitions_are_one_unless_the_file_partitions_an_entity(tmp_path: Path) -> None:
    assert plan_emulator(options()).partitions == 1
    partitioned = write_config(tmp_path, document(queues=[{"Name": "q", "Properties": {"EnablePartitioning": True}}]))
    assert plan_emulator(options(config_path=partitioned)).partitions == 4
    assert plan_emulator(options(config_path=partitioned, partitions=8)).partitions == 8


def test_a_port_in_use_is_refused_before_anything_starts() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortUnavailableError, match=rf"port {port} \(the management port\) cannot be listened on"):
            plan_emulator(options(management_port=port))


def test_the_same_port_twice_and_a_bad_host_are_refused() -> None:
    port = free_port()
    with pytest.raises(InvalidArgumentError, match="--amqp-port and --management-port are both"):
        plan_emulator(options(amqp_port=port, management_port=port))
    with pytest.raises(InvalidArgumentError, match="--host 'no.such.host.invalid' is no IPv4 address"):
        plan_emulator(options(host="no.such.host.invalid"))


def test_a_data_dir_keeps_its_partition_count(tmp_path: Path) -> None:
    stored_namespace(tmp_path)
    assert plan_emulator(options(data_dir=str(tmp_path))).partitions == 2
    with pytest.raises(InvalidOperationError, match="holds namespace 'sbemulatorns' with 2 partitions"):
        plan_emulator(options(data_dir=str(tmp_path), partitions=3))


def test_a_data_dir_of_another_namespace_name_is_refused(tmp_path: Path) -> None:
    stored_namespace(tmp_path, name="other")
    with pytest.raises(InvalidOperationError, match="holds namespace 'other', and the configuration names "
                                                    "'sbemulatorns'"):
        plan_emulator(options(data_dir=str(tmp_path)))


def test_a_data_dir_with_keys_of_its_own_is_never_opened_with_the_published_one(tmp_path: Path) -> None:
    stored_namespace(tmp_path / "random", shared_access_keys=None)
    with pytest.raises(InvalidOperationError, match="keys of its own"):
        plan_emulator(options(data_dir=str(tmp_path / "random")))
    stored_namespace(tmp_path / "changed")
    save_keys(str(tmp_path / "changed"), [new_key("RootManageSharedAccessKey", ("Manage",))])
    with pytest.raises(InvalidOperationError, match="keys of its own"):
        plan_emulator(options(data_dir=str(tmp_path / "changed")))


def test_a_data_dir_of_a_premium_namespace_is_refused(tmp_path: Path) -> None:
    stored_namespace(tmp_path, sku="premium", any_tier_partitions=False)
    with pytest.raises(InvalidOperationError, match="holds a premium namespace"):
        plan_emulator(options(data_dir=str(tmp_path)))
