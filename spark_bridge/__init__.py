"""Spark DataFrames and Ray Datasets in and out of ray_broker entities, through RayDP.

Names load on first use, so that importing the Spark-free parts (`spark_bridge.rows`) loads
neither Spark nor Ray Data.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_MODULES = {
    "init_spark": "session", "stop_spark": "session", "spark_configs": "session", "JAVA17_OPTIONS": "session",
    "write_dataframe": "dataframes", "read_dataframe": "dataframes",
    "stream_to_entity": "streaming", "stream_from_entity": "streaming",
    "EntityDatasink": "datasink", "EntityDatasource": "datasource",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'spark_bridge' has no attribute {name!r}")
    value = getattr(import_module(f".{_MODULES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


__all__ = ["init_spark", "stop_spark", "spark_configs", "JAVA17_OPTIONS", "write_dataframe", "read_dataframe",
           "stream_to_entity", "stream_from_entity", "EntityDatasink", "EntityDatasource"]
