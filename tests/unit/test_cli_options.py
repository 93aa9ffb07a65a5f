"""The command line's typed `--property` values and option defaults, without Ray."""
from __future__ import annotations

import inspect

import pytest
import typer

import ray_broker as rb
from ray_broker import entities
from ray_broker.cli import entities as cli_entities
from ray_broker.cli.properties import parse_properties, parse_property


@pytest.mark.parametrize(("text", "pair"), [
    ("tier=gold", ("tier", "gold")),
    ("amount:int=250", ("amount", 250)),
    ("price:float=2.5", ("price", 2.5)),
    ("vip:bool=TRUE", ("vip", True)),
    ("vip:bool=false", ("vip", False)),
    ("code:str=250", ("code", "250")),
    ("a:b:str=x=y", ("a:b", "x=y")),
    ("empty=", ("empty", "")),
])
def test_a_property_has_the_type_it_is_given(text: str, pair: tuple[str, object]) -> None:
    key, value = parse_property(text)
    assert (key, value) == pair and type(value) is type(pair[1])


@pytest.mark.parametrize(("text", "words"), [
    ("novalue", "'novalue' is not KEY=VALUE"),
    ("=x", "is not KEY=VALUE"),
    ("amount:int=2.5", "'2.5' is not an int"),
    ("vip:bool=yes", "'yes' is not true or false"),
    ("amount:integer=4", "has no known type: write KEY:TYPE=VALUE with TYPE one of int, float, bool, str"),
    (":int=4", "has no known type"),
])
def test_a_bad_property_is_a_usage_error_naming_the_option(text: str, words: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        parse_property(text)
    assert words in caught.value.format_message() and caught.value.param_hint == "'--property'"


def test_a_repeated_key_keeps_its_last_value() -> None:
    assert parse_properties(["n:int=1", "n:int=2", "t=x"]) == {"n": 2, "t": "x"}


def _default(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]


def test_option_defaults_come_from_one_place() -> None:
    lock, window = entities.DEFAULT_LOCK_DURATION, entities.DEFAULT_DUPLICATE_WINDOW
    for create in (rb.Namespace.create_queue, rb.Namespace.create_subscription):
        assert _default(create, "lock_duration") is lock
        assert _default(create, "max_delivery_count") is entities.DEFAULT_MAX_DELIVERY_COUNT
    for create in (rb.Namespace.create_queue, rb.Namespace.create_topic):
        assert _default(create, "duplicate_detection_history_time_window") is window
        assert _default(create, "max_size_in_megabytes") is entities.DEFAULT_MAX_SIZE_IN_MEGABYTES
    queue = rb.QueueProperties(name="q")
    assert queue.lock_duration is lock and queue.duplicate_detection_history_time_window is window
    assert entities.QUEUE_DEFAULTS["lock_duration"] == entities.SUBSCRIPTION_DEFAULTS["lock_duration"] == 60.0
    assert entities.QUEUE_DEFAULTS["duplicate_detection_history_time_window"] == window.total_seconds() == 600.0
    assert _default(cli_entities.queue_create, "lock_duration") == lock.total_seconds()
    assert _default(cli_entities.queue_create, "duplicate_window") == window.total_seconds()
    assert _default(cli_entities.subscription_create, "max_delivery_count") is entities.DEFAULT_MAX_DELIVERY_COUNT
