"""A Config.json applied to a running namespace: created, then updated in place, idempotent; entities
the file does not name left alone; each named subscription's rules made exactly the file's."""
from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest

import ray_broker as rb
from ray_broker.client.lifecycle import start_namespace
from ray_broker.emulator.applying import apply_config
from ray_broker.emulator.config_file import parse_config
from ray_broker.emulator.jsonc import loads
from ray_broker.errors import InvalidOperationError
from ray_broker.filters import SqlFilter, SqlRuleAction, TrueFilter

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "emulator" / "Config.json"


@pytest.fixture(scope="module")
def ns(ray_instance: None) -> Iterator[rb.Namespace]:
    """A one-partition standard namespace in memory, as the emulator makes it."""
    name = f"emuapply-{uuid.uuid4().hex[:6]}"
    config = start_namespace(name, sku="standard", partitions=1, data_dir=None, gateways=1, durability="memory",
                             address=None, any_tier_partitions=True)
    try:
        yield rb.Namespace(config)
    finally:
        rb.stop(name)


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return loads(EXAMPLE.read_text(encoding="utf-8"))


def rules_of(ns: rb.Namespace, topic: str, sub: str) -> dict[str, Any]:
    return {r.name: (r.filter, r.action) for r in ns.list_rules(topic, sub)}


def test_applying_creates_then_changes_nothing_and_leaves_other_entities_alone(
        ns: rb.Namespace, example: dict[str, Any]) -> None:
    ns.create_queue("not-in-the-file", max_delivery_count=9)
    first = apply_config(ns, parse_config(example))
    assert (len(first.created), first.updated) == (9, [])
    orders = ns.get_queue("orders")
    assert (orders.lock_duration, orders.max_delivery_count, orders.forward_dead_lettered_messages_to) == \
        (timedelta(seconds=45), 5, "orders-failed")
    assert orders.default_message_time_to_live == timedelta(days=1) and orders.requires_duplicate_detection
    assert rules_of(ns, "shipments", "audit") == {"$Default": (TrueFilter(), None)}
    assert list(rules_of(ns, "shipments", "express")) == ["heavy-express"]

    again = apply_config(ns, parse_config(example))
    assert (again.created, again.updated, len(again.unchanged)) == ([], [], 10)
    assert ns.get_queue("not-in-the-file").max_delivery_count == 9


def test_a_changed_file_updates_options_and_makes_the_rules_the_files(ns: rb.Namespace,
                                                                       example: dict[str, Any]) -> None:
    apply_config(ns, parse_config(example))
    ns.create_rule("shipments", "express", "added-at-run-time", filter=SqlFilter("1=1"))
    changed = copy.deepcopy(example)
    namespace = changed["UserConfig"]["Namespaces"][0]
    namespace["Queues"][0]["Properties"].update(LockDuration="PT20S", ForwardDeadLetteredMessagesTo="")
    express = namespace["Topics"][0]["Subscriptions"][1]
    express["Rules"][0]["Properties"]["SqlFilter"]["SqlExpression"] = "service = 'express'"
    express["Rules"].append({"Name": "fragile", "Properties": {"FilterType": "Correlation",
                                                              "CorrelationFilter": {"Properties": {"fragile": True}}}})
    audit = namespace["Topics"][0]["Subscriptions"][2]
    audit["Rules"] = [{"Name": "only-tracked", "Properties": {"FilterType": "Sql",
                                                             "SqlFilter": {"SqlExpression": "tracked = 1"}}}]
    applied = apply_config(ns, parse_config(changed))
    assert set(applied.updated) == {"queue orders", "rule shipments/express/heavy-express"}
    assert set(applied.created) == {"rule shipments/express/fragile", "rule shipments/audit/only-tracked"}
    orders = ns.get_queue("orders")
    assert (orders.lock_duration, orders.forward_dead_lettered_messages_to) == (timedelta(seconds=20), None)
    assert rules_of(ns, "shipments", "express")["heavy-express"] == (
        SqlFilter("service = 'express'"), SqlRuleAction("SET handling = 'forklift'; SET sys.To = 'dock-7'"))
    assert set(rules_of(ns, "shipments", "express")) == {"heavy-express", "fragile"}
    assert set(rules_of(ns, "shipments", "audit")) == {"only-tracked"}

    apply_config(ns, parse_config(example))
    assert set(rules_of(ns, "shipments", "audit")) == {"$Default"}
    assert ns.get_queue("orders").forward_dead_lettered_messages_to == "orders-failed"


def test_an_option_that_cannot_change_is_refused_naming_the_file_and_entity(ns: rb.Namespace,
                                                                            example: dict[str, Any]) -> None:
    apply_config(ns, parse_config(example))
    changed = json.loads(json.dumps(example))
    changed["UserConfig"]["Namespaces"][0]["Queues"][2]["Properties"]["RequiresSession"] = False
    with pytest.raises(InvalidOperationError, match=r"^applying Config.json: queue 'payments': requires_session of "
                                                    r"'payments' cannot change"):
        apply_config(ns, parse_config(changed))
