"""Starting Spark on Ray through RayDP, ready for Java 17."""
from __future__ import annotations

import os
import sys
from typing import Any

# Packages the JVM must open to unnamed modules for Spark and RayDP on Java 17 (java.math included:
# without it the first conversion to Ray kills the RayDP master).
_OPENS = [f"java.base/{package}" for package in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.lang.ref", "java.io", "java.net", "java.nio",
    "java.math", "java.text", "java.time", "java.security", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.concurrent.locks", "java.util.regex", "sun.nio.ch", "sun.nio.cs",
    "sun.security.action", "sun.util.calendar", "jdk.internal.misc", "jdk.internal.ref")] + ["java.sql/java.sql"]
JAVA17_OPTIONS = " ".join(["-XX:+IgnoreUnrecognizedVMOptions"] + [f"--add-opens={o}=ALL-UNNAMED" for o in _OPENS])
_JAVA_OPTION_KEYS = ("spark.ray.raydp_app_master.extraJavaOptions", "spark.executor.extraJavaOptions",
                     "spark.driver.extraJavaOptions")


def spark_configs(executor_cpu: float, extra: dict[str, str] | None = None) -> dict[str, str]:
    """RayDP configuration with the Java 17 options on every JVM and fractional executor CPUs."""
    configs = {key: JAVA17_OPTIONS for key in _JAVA_OPTION_KEYS}
    configs["spark.ray.raydp_spark_executor.actor.resource.cpu"] = str(executor_cpu)
    for key, value in (extra or {}).items():
        configs[key] = f"{configs[key]} {value}" if key in _JAVA_OPTION_KEYS else value
    return configs


def init_spark(app_name: str, num_executors: int = 1, executor_cores: int = 1, executor_memory: str = "1g", *,
               executor_cpu: float = 0.5, configs: dict[str, str] | None = None) -> Any:
    """Start a Spark session on Ray (RayDP) that works on Java 17.

    Executors ask Ray for `executor_cpu` logical CPUs each, so that on small machines Ray keeps CPUs
    for the conversions between Spark and Ray. Spark's Python workers use this interpreter.
    """
    import raydp

    from ray_broker.client.lifecycle import ensure_ray

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ensure_ray()
    return raydp.init_spark(app_name, num_executors, executor_cores, executor_memory,
                            configs=spark_configs(executor_cpu, configs))


def stop_spark() -> None:
    """Stop the Spark session started by `init_spark`."""
    import raydp

    raydp.stop_spark()
