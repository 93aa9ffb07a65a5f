"""Ray Serve asynchronous inference on the broker (`pip install "ray-broker[serve]"`).

    from ray.serve.schema import TaskProcessorConfig
    from ray_broker.serve import BrokerAdapterConfig, BrokerTaskProcessorAdapter
    config = TaskProcessorConfig(queue_name="inference", adapter=BrokerTaskProcessorAdapter,
                                 adapter_config=BrokerAdapterConfig(namespace="shop"),
                                 max_retries=3, failed_task_queue_name="inference-failed")

The configuration, codec, statuses and decisions import without Ray; the adapter and the
autoscaling policy load Ray Serve on first use.
"""
from __future__ import annotations

from typing import Any

from .codec import TaskEncodingError
from .config import BrokerAdapterConfig
from .context import TaskContext, current_task
from .sizing import BacklogSizing
from .status import TaskStatus

_SERVE_NAMES = {"BrokerTaskProcessorAdapter": "adapter", "BacklogAutoscalingPolicy": "autoscaling"}


def __getattr__(name: str) -> Any:
    if name not in _SERVE_NAMES:
        raise AttributeError(f"module 'ray_broker.serve' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_SERVE_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["BrokerAdapterConfig", "BrokerTaskProcessorAdapter", "BacklogAutoscalingPolicy", "BacklogSizing",
           "TaskEncodingError", "TaskStatus", "TaskContext", "current_task"]
