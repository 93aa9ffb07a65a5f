"""The broker's metrics on Ray's Prometheus endpoint: a known workload, then a scrape that finds it.

Ray exports what actors record every few seconds, so each check polls the endpoint until the
series show the expected values (at most `SCRAPE_WAIT_S`).
"""
from __future__ import annotations

import time
import urllib.request
from collections import defaultdict
from datetime import timedelta
from typing import Callable

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

import ray_broker as rb
from ray_broker.protocol import MAIN
from ray_broker.routing import home_partition
from ray_broker.wire import Settle, Settlement, encode

from .helpers import partition_handle

SCRAPE_WAIT_S = 60.0
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Sample values by (sample name, labels)."""


def metrics_url() -> str:
    """This node's Prometheus endpoint (Ray starts it with the metrics agent of `ray[default]`)."""
    node = next(n for n in ray.nodes() if n["Alive"])
    port = node.get("MetricsExportPort")
    if not port:
        pytest.fail("the Ray node reports no metrics export port: install ray[default] (the metrics agent)")
    return f"http://{node['NodeManagerAddress']}:{port}/metrics"


def scrape(url: str) -> Series:
    """Every sample on the endpoint, with Ray's per-process labels dropped and values summed over
    them (a partition's series are per worker process)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    series: Series = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items()
                               if k in ("namespace", "partition", "entity", "le"))
            series[(sample.name, labels)] += sample.value
    return series


def total(series: Series, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(value for (sample, tags), value in series.items() if sample == name and wanted <= tags)


def scrape_until(url: str, done: Callable[[Series], bool]) -> Series:
    """Scrape until `done` holds for what the endpoint shows; the last scrape either way."""
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while True:
        series = scrape(url)
        if done(series) or time.monotonic() > deadline:
            return series
        time.sleep(1.0)


def test_a_known_workload_shows_on_rays_metrics_endpoint(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}") for i in range(30)])
    with namespace.get_queue_receiver(queue_name) as receiver:
        received: list[rb.ReceivedMessage] = []
        while len(received) < 20:
            received += receiver.receive_messages(20 - len(received), max_wait_time=5)
        for message in received[:15]:
            receiver.complete_message(message)
        for message in received[15:]:
            receiver.dead_letter_message(message, reason="test", error_description="dead-lettered by the test")
        receiver.flush()
    expiring = f"{queue_name}-ttl"
    namespace.create_queue(expiring)
    with namespace.get_queue_sender(expiring) as sender:
        sender.send_messages([rb.Message("kept")] + [rb.Message(f"e{i}", time_to_live=timedelta(seconds=1))
                                                     for i in range(2)])
    with namespace.get_queue_receiver(expiring) as receiver:
        (kept,) = receiver.receive_messages(1, max_wait_time=5)
        # A settlement whose lock is not held (a client checks its own locks first, so call the partition).
        home = partition_handle(namespace, home_partition(expiring, namespace.partition_count))
        settle = Settle(expiring, MAIN, [Settlement("complete", kept.sequence_number, bytes(16))])
        (lost,) = ray.get(home.run.remote(*encode(settle)))
        assert isinstance(lost, rb.MessageLockLostError)

    ours = {"namespace": namespace.name, "entity": queue_name}
    expected = {"ray_broker_messages_sent_total": 30, "ray_broker_messages_received_total": 20,
                "ray_broker_messages_completed_total": 15, "ray_broker_messages_dead_lettered_total": 5,
                "ray_broker_messages_expired_total": 0, "ray_broker_lock_lost_total": 0,
                "ray_broker_active_messages": 10, "ray_broker_dead_letter_messages": 5,
                "ray_broker_scheduled_messages": 0, "ray_broker_send_latency_seconds_count": 1}
    theirs = {"namespace": namespace.name, "entity": expiring}
    expected_expiring = {"ray_broker_messages_sent_total": 3, "ray_broker_messages_received_total": 1,
                         "ray_broker_messages_expired_total": 2, "ray_broker_lock_lost_total": 1,
                         "ray_broker_active_messages": 1}

    def shown(series: Series, tags: dict[str, str], names: dict[str, int]) -> dict[str, float]:
        return {name: total(series, name, **tags) for name in names}

    series = scrape_until(metrics_url(), lambda s: shown(s, ours, expected) == expected
                          and shown(s, theirs, expected_expiring) == expected_expiring
                          and total(s, "ray_broker_partition_up", namespace=namespace.name) == 16)
    assert shown(series, ours, expected) == expected
    assert shown(series, theirs, expected_expiring) == expected_expiring
    assert total(series, "ray_broker_receive_latency_seconds_count", **ours) >= 1
    assert total(series, "ray_broker_send_latency_seconds_bucket", le="+Inf", **ours) == 1
    up = {dict(tags)["partition"] for (name, tags), value in series.items()
          if name == "ray_broker_partition_up" and ("namespace", namespace.name) in tags and value == 1}
    assert up == {str(k) for k in range(16)}
    assert {value for (name, tags), value in series.items()
            if name == "ray_broker_partitions" and ("namespace", namespace.name) in tags} == {16.0}
    namespace.delete_queue(queue_name)
    namespace.delete_queue(expiring)
