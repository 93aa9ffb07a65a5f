"""A namespace's AMQP settings (its port, its shared access keys made once and kept with its stores),
and how broker errors and AMQP outcomes translate."""
from __future__ import annotations

from pathlib import Path

import pytest
from proton import Condition, Delivery, symbol

from ray_broker.amqp.conditions import error_condition, status_code
from ray_broker.amqp.outcomes import dead_letter_reason, settle_action
from ray_broker.config import check_start_options, load_config, plan_config, save_config
from ray_broker.errors import (
    InvalidArgumentError,
    MessageLockLostError,
    MessagingEntityNotFoundError,
    ServiceBusError,
    UnauthorizedError,
)
from ray_broker.keys.sas import MANAGE, ROOT_KEY_NAME

NODES = [("node-a", None)]


def plan(data: Path, **options: object):  # type: ignore[no-untyped-def]
    return plan_config("amqp-demo", sku="standard", partitions=None, data_dir=str(data), gateways=1,
                       durability="normal", nodes=NODES, local_node="node-a", **options)


def test_the_root_key_is_made_once_and_kept_across_restarts(tmp_path: Path) -> None:
    first = plan(tmp_path, amqp_port=5672)
    [root] = first.shared_access_keys()
    assert root.name == ROOT_KEY_NAME and root.grants(MANAGE) and first.amqp_port == 5672
    save_config(first)
    assert load_config(str(tmp_path)) == first
    again = plan(tmp_path)
    assert again.shared_access_keys() == first.shared_access_keys() and again.amqp_port is None


def test_a_namespace_in_memory_gets_a_new_key_each_start() -> None:
    def keys():  # type: ignore[no-untyped-def]
        return plan_config("mem", sku="standard", partitions=None, data_dir=None, gateways=1, durability="memory",
                           nodes=NODES, local_node="node-a").shared_access_keys()
    assert keys() != keys()


@pytest.mark.parametrize("port", [0, 70000, "5672", True])
def test_a_bad_amqp_port_is_refused_before_anything_starts(port: object) -> None:
    with pytest.raises(InvalidArgumentError, match="amqp_port"):
        check_start_options("demo", sku="standard", partitions=None, gateways=1, durability="memory",
                            amqp_port=port)  # type: ignore[arg-type]


@pytest.mark.parametrize("amqp_port, management_port, wrong", [
    (5672, 0, "management_port must be None or a port number"), (5672, "5300", "management_port must be"),
    (None, 5300, "management_port needs amqp_port"), (5672, 5672, "both 5672"),
])
def test_a_bad_management_port_is_refused_before_anything_starts(amqp_port: object, management_port: object,
                                                                  wrong: str) -> None:
    with pytest.raises(InvalidArgumentError, match=wrong):
        check_start_options("demo", sku="standard", partitions=None, gateways=1, durability="memory",
                            amqp_port=amqp_port, management_port=management_port)  # type: ignore[arg-type]


def test_the_management_port_is_kept_in_the_configuration(tmp_path: Path) -> None:
    config = plan(tmp_path, amqp_port=5672, management_port=5300)
    assert (config.amqp_port, config.management_port) == (5672, 5300)
    save_config(config)
    assert load_config(str(tmp_path)) == config
    assert plan(tmp_path, amqp_port=5672).management_port is None, "each start says whether it serves one"


@pytest.mark.parametrize("error, name, code", [
    (MessagingEntityNotFoundError("gone"), "amqp:not-found", 404),
    (UnauthorizedError("no"), "amqp:unauthorized-access", 401),
    (MessageLockLostError("lost"), "com.microsoft:message-lock-lost", 410),
    (InvalidArgumentError("bad"), "amqp:invalid-field", 400),
    (ServiceBusError("odd"), "amqp:internal-error", 500),
    (RuntimeError("odd"), "amqp:internal-error", 500),
])
def test_broker_errors_map_to_the_conditions_the_sdk_knows(error: Exception, name: str, code: int) -> None:
    condition = error_condition(error)
    assert (condition.name, condition.description, status_code(error)) == (name, str(error), code)
    assert symbol("com.microsoft:tracking-id") in condition.info  # the SDK reads an error's info


@pytest.mark.parametrize("outcome, undeliverable, action", [
    (Delivery.ACCEPTED, False, "complete"),
    (Delivery.MODIFIED, False, "abandon"),
    (Delivery.MODIFIED, True, "defer"),
    (Delivery.RELEASED, False, "release"),
    (Delivery.REJECTED, False, "dead_letter"),
])
def test_each_outcome_is_its_settlement(outcome: int, undeliverable: bool, action: str) -> None:
    assert settle_action(outcome, undeliverable) == action


def test_a_rejection_carries_its_dead_letter_reason_and_description() -> None:
    info = {symbol("DeadLetterReason"): "bad", symbol("DeadLetterErrorDescription"): "very"}
    assert dead_letter_reason(Condition("com.microsoft:dead-letter", "desc", info)) == ("bad", "very")
    assert dead_letter_reason(Condition("com.microsoft:dead-letter", "desc")) == (None, "desc")
    assert dead_letter_reason(None) == (None, None)
