"""Serve task consumers through a node's loss, on a 3-node `ray.cluster_utils.Cluster`, run as its
own process (a test process is already attached to the shared Ray); prints one JSON line of what
it observed.

A premium namespace of 4 partitions with 3 replicas each (one per node) holds the task queue; a
`@task_consumer` deployment of 3 Serve replicas (one per node, by a custom resource) runs tasks
that sleep 0.5 s. While they run, a worker node (with a Serve replica and partition replicas on
it) is removed without warning; every task must still end SUCCESS with its own result.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from ray_broker.config import RAY_NAMESPACE

from .scenario import interruptible

TASKS = 150
TASK_S = 0.5
REPLICAS = 3


def status_of(producer: Any, task_id: str) -> str:
    """The task's status, or the error's name while a partition fails over."""
    try:
        return str(producer.get_task_status_sync(task_id).status)
    except Exception as exc:  # noqa: BLE001 - reported by name, asked again
        return type(exc).__name__


def scenario(root: Path) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"consumer": 1},
                                                            "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1, resources={"consumer": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=RAY_NAMESPACE, log_to_driver=False, configure_logging=False)
    out: dict[str, Any] = {}
    try:
        from ray import serve
        from ray.serve.schema import TaskProcessorConfig
        from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

        from ray_broker.serve import BrokerAdapterConfig, BrokerTaskProcessorAdapter

        rb.start("servenodes", sku="premium", partitions=4, replicas=3, data_dir=str(root / "data"))
        config = TaskProcessorConfig(queue_name="work", adapter=BrokerTaskProcessorAdapter,
                                     adapter_config=BrokerAdapterConfig(namespace="servenodes", lock_duration=5),
                                     max_retries=3, failed_task_queue_name="work-failed")

        @serve.deployment(num_replicas=REPLICAS, max_ongoing_requests=4,
                          ray_actor_options={"num_cpus": 0, "resources": {"consumer": 1}})
        @task_consumer(task_processor_config=config)
        class Worker:
            @task_handler(name="sleep")
            def sleep(self, x: int) -> int:
                time.sleep(TASK_S)
                return x

        serve.start(proxy_location="Disabled")
        serve.run(Worker.bind(), name="work", route_prefix=None)
        producer = instantiate_adapter_from_config(config)
        ids = [producer.enqueue_task_sync("sleep", args=[i]).id for i in range(TASKS)]
        began = time.monotonic()
        while sum(status_of(producer, i) == "SUCCESS" for i in ids[:40]) < 10:
            time.sleep(0.2)
        running = [i for i in ids if status_of(producer, i) == "STARTED"]
        out["running_at_loss"] = len(running)
        cluster.remove_node(workers[0], allow_graceful=False)
        out["lost_at_s"] = round(time.monotonic() - began, 2)
        pending = set(ids)
        deadline = time.monotonic() + 240
        while pending and time.monotonic() < deadline:
            pending = {i for i in pending if status_of(producer, i) not in ("SUCCESS", "FAILURE")}
            time.sleep(0.5)
        out["done_s"] = round(time.monotonic() - began, 2)
        results = [producer.get_task_status_sync(i) for i in ids]
        out["tasks"] = TASKS
        out["succeeded"] = sum(r.status == "SUCCESS" for r in results)
        out["wrong"] = [(n, r.status, r.result) for n, r in enumerate(results) if (r.status, r.result) != ("SUCCESS", n)]
        out["failed_queue"] = producer.get_metrics_sync()["failed_queue_length"]
        serve.shutdown()
        rb.stop("servenodes")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


if __name__ == "__main__":
    interruptible()
    try:
        result = scenario(Path(sys.argv[1]))
    except Exception as exc:  # noqa: BLE001 - reported to the test as JSON
        import traceback
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
