"""Spark on Ray (RayDP) beside ray_broker: sessions ready for Java 17.

The DataFrame readers and writers for entities build on this session.
"""
from .session import JAVA17_OPTIONS, init_spark, spark_configs, stop_spark

__all__ = ["init_spark", "stop_spark", "spark_configs", "JAVA17_OPTIONS"]
