"""Starting Spark on Ray through RayDP, ready for Java 17."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

import ray_broker as rb
from ray_broker.errors import InvalidOperationError

MIN_LOCAL_CPUS = 4
"""The fewest logical CPUs of a local Ray that `init_spark` starts: executors hold theirs, and the
conversions between Spark and Ray still need some (on 2 cores, 2 would starve them)."""
IDLE_WORKERS = 16
"""How many idle Python workers a local Ray started here keeps (Ray's default: one per logical CPU)."""
IDLE_WORKER_KEEP_MS = 60_000
"""How long such a Ray keeps an idle worker beyond that number (Ray's default: 1 s).

A pipeline's stages run Ray tasks one after the other: RayDP's fetch of each Spark partition, the
write tasks, the read tasks. A new worker process costs about a CPU-second to start and import
(pyarrow, Ray Data, the broker), so with Ray's defaults each stage paid again for the workers the
previous one had just let go: converting 200,000 rows from Spark took 9.4 s the second time with
them, 5.0 s with the workers kept."""
MIN_JAVA_VERSION = 17
"""The oldest Java runtime Spark on Ray is set up for here."""

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
    """RayDP configuration with the Java 17 options on every JVM, fractional executor CPUs, and Arrow
    for DataFrames made from pandas (the micro-batches of `stream_from_entity`)."""
    configs = {key: JAVA17_OPTIONS for key in _JAVA_OPTION_KEYS}
    configs["spark.ray.raydp_spark_executor.actor.resource.cpu"] = str(executor_cpu)
    configs["spark.sql.execution.arrow.pyspark.enabled"] = "true"
    for key, value in (extra or {}).items():
        configs[key] = f"{configs[key]} {value}" if key in _JAVA_OPTION_KEYS else value
    return configs


def java_executable() -> str | None:
    """The `java` Spark will run: `$JAVA_HOME/bin/java` when JAVA_HOME is set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def java_major_version(version_text: str) -> int | None:
    """The major version in `java -version` output ("1.8.0_392" is 8, "17.0.15" is 17), else None."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> None:
    """Raise `InvalidOperationError` unless a Java runtime of version 17 or later is there."""
    java = java_executable()
    if java is None:
        where = f"JAVA_HOME ({os.environ['JAVA_HOME']}) has no bin/java" if os.environ.get("JAVA_HOME") \
            else "no `java` is on the PATH and JAVA_HOME is not set"
        raise InvalidOperationError(f"Spark needs a Java {MIN_JAVA_VERSION}+ runtime, but {where}; install one "
                                    "(e.g. apt-get install openjdk-17-jre-headless) or point JAVA_HOME at it")
    result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    major = java_major_version(result.stderr + result.stdout)
    if major is None or major < MIN_JAVA_VERSION:
        found = "an unrecognised version" if major is None else f"Java {major}"
        raise InvalidOperationError(f"Spark needs a Java {MIN_JAVA_VERSION}+ runtime, but {java} is {found}; "
                                    f"install Java {MIN_JAVA_VERSION} or later and put it on the PATH or in JAVA_HOME")


def start_ray(address: str | None = None) -> None:
    """Join the Ray cluster ray_broker would join (`address`, else `RAY_ADDRESS`, else this
    machine's `ray start` head); when there is none, or `address` is "local", start a local Ray with
    at least `MIN_LOCAL_CPUS` logical CPUs that keeps idle workers for the next stage
    (`IDLE_WORKERS`, `IDLE_WORKER_KEEP_MS`). Nothing if Ray is up (`rb.init_ray`)."""
    rb.init_ray(address, num_cpus=max(MIN_LOCAL_CPUS, os.cpu_count() or 1),
                system_config={"num_workers_soft_limit": IDLE_WORKERS,
                               "idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEEP_MS})


def init_spark(app_name: str, num_executors: int = 1, executor_cores: int = 1, executor_memory: str = "1g", *,
               executor_cpu: float = 0.5, configs: dict[str, str] | None = None) -> Any:
    """Start a Spark session on Ray (RayDP) that works on Java 17.

    Executors ask Ray for `executor_cpu` logical CPUs each, and a local Ray started here has at
    least `MIN_LOCAL_CPUS`, so that on small machines Ray keeps CPUs for the conversions between
    Spark and Ray. Spark's Python workers use this interpreter. Raises
    `InvalidOperationError` when no Java 17+ runtime is there, before anything starts.
    """
    import raydp

    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    start_ray()
    return raydp.init_spark(app_name, num_executors, executor_cores, executor_memory,
                            configs=spark_configs(executor_cpu, configs))


def stop_spark() -> None:
    """Stop the Spark session started by `init_spark`."""
    import raydp

    raydp.stop_spark()
