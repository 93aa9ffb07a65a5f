"""A RayDP Spark session on the shared Ray: Java 17 options work and DataFrames reach Ray Data."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ray_broker.errors import InvalidOperationError
from spark_bridge import JAVA17_OPTIONS, spark_configs
from spark_bridge.session import check_java, java_major_version

pytestmark = pytest.mark.spark


def test_configs_carry_java17_options_everywhere() -> None:
    configs = spark_configs(0.25, {"spark.driver.extraJavaOptions": "-Dx=1", "spark.sql.shuffle.partitions": "4"})
    assert configs["spark.executor.extraJavaOptions"] == JAVA17_OPTIONS
    assert configs["spark.driver.extraJavaOptions"] == JAVA17_OPTIONS + " -Dx=1"
    assert "--add-opens=java.base/java.math=ALL-UNNAMED" in JAVA17_OPTIONS
    assert "--add-opens=java.sql/java.sql=ALL-UNNAMED" in JAVA17_OPTIONS
    assert configs["spark.ray.raydp_spark_executor.actor.resource.cpu"] == "0.25"
    assert configs["spark.sql.shuffle.partitions"] == "4"


def test_a_local_ray_started_for_spark_keeps_idle_workers_for_the_next_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from ray_broker.client import lifecycle
    from spark_bridge import session

    started: dict[str, Any] = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: started.update(kwargs))
    session.start_ray("local")
    config = started["_system_config"]
    assert config["num_workers_soft_limit"] == session.IDLE_WORKERS >= 16
    assert config["idle_worker_killing_time_threshold_ms"] == session.IDLE_WORKER_KEEP_MS >= 60_000
    assert config["max_direct_call_object_size"] == lifecycle.LOCAL_RAY_SYSTEM_CONFIG["max_direct_call_object_size"]
    assert started["num_cpus"] >= session.MIN_LOCAL_CPUS


def test_spark_dataframe_round_trips_through_ray_data(spark: Any) -> None:
    import ray.data

    df = spark.range(0, 100).withColumnRenamed("id", "n")
    dataset = ray.data.from_spark(df)
    assert sorted(row["n"] for row in dataset.take_all()) == list(range(100))


@pytest.mark.parametrize(("text", "major"), [('openjdk version "17.0.15" 2025-04-15', 17),
                                             ('java version "1.8.0_392"', 8), ('openjdk version "21" 2023-09-19', 21),
                                             ("no version here", None)])
def test_java_major_version(text: str, major: int | None) -> None:
    assert java_major_version(text) == major


def test_missing_or_old_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(InvalidOperationError, match="has no bin/java"):
        check_java()
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    with pytest.raises(InvalidOperationError, match="is Java 11; install Java 17"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(InvalidOperationError, match="no `java` is on the PATH"):
        check_java()
