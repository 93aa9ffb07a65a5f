"""A RayDP Spark session on the shared Ray: Java 17 options work and DataFrames reach Ray Data."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from spark_bridge import JAVA17_OPTIONS, spark_configs

pytestmark = pytest.mark.spark


def test_configs_carry_java17_options_everywhere() -> None:
    configs = spark_configs(0.25, {"spark.driver.extraJavaOptions": "-Dx=1", "spark.sql.shuffle.partitions": "4"})
    assert configs["spark.executor.extraJavaOptions"] == JAVA17_OPTIONS
    assert configs["spark.driver.extraJavaOptions"] == JAVA17_OPTIONS + " -Dx=1"
    assert "--add-opens=java.base/java.math=ALL-UNNAMED" in JAVA17_OPTIONS
    assert "--add-opens=java.sql/java.sql=ALL-UNNAMED" in JAVA17_OPTIONS
    assert configs["spark.ray.raydp_spark_executor.actor.resource.cpu"] == "0.25"
    assert configs["spark.sql.shuffle.partitions"] == "4"


@pytest.fixture(scope="session")
def spark(ray_instance: None) -> Iterator[Any]:
    from spark_bridge import init_spark, stop_spark

    session = init_spark("ray-broker-tests", 1, 1, "500M")
    yield session
    stop_spark()


def test_spark_dataframe_round_trips_through_ray_data(spark: Any) -> None:
    import ray.data

    df = spark.range(0, 100).withColumnRenamed("id", "n")
    dataset = ray.data.from_spark(df)
    assert sorted(row["n"] for row in dataset.take_all()) == list(range(100))
