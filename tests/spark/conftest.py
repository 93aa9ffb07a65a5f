"""One RayDP Spark session for every Spark test, on the shared Ray, and helpers to fill queues."""
from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

import ray_broker as rb


@pytest.fixture(scope="session")
def spark(ray_instance: None) -> Iterator[Any]:
    """The RayDP Spark session of the test session (one executor, half a logical CPU)."""
    from spark_bridge import init_spark, stop_spark

    session = init_spark("ray-broker-tests", 1, 1, "1g", configs={"spark.sql.shuffle.partitions": "4"})
    yield session
    stop_spark()


@pytest.fixture
def partitioned_queue(namespace: rb.Namespace) -> Iterator[str]:
    """A fresh partitioned queue, deleted after the test."""
    name = f"sq-{uuid.uuid4().hex[:10]}"
    namespace.create_queue(name, enable_partitioning=True)
    yield name
    namespace.delete_queue(name)
