"""The runnable examples in docstrings run, and say what they show."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["ray_broker.partitioning", "ray_broker.engine.partition", "ray_broker.engine.store",
           "ray_broker.filters.model", "ray_broker.filters.compiled_rules", "ray_broker.observability", "ray_broker.wire", "ray_broker.router_requests",
           "ray_broker.engine.group_commit", "ray_broker.engine.changes", "ray_broker.engine.change_log",
           "ray_broker.engine.replication", "ray_broker.engine.shipping", "ray_broker.engine.in_sync",
           "ray_broker.engine.election",
           "ray_broker.management_http.durations", "ray_broker.management_http.sniff",
           "ray_broker.management_http.descriptions", "ray_broker.management_http.routes",
           "ray_broker.amqp.streams", "ray_broker.amqp.websocket", "ray_broker.serve.ids"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    results = doctest.testmod(importlib.import_module(name))
    assert results.attempted > 0 and results.failed == 0
