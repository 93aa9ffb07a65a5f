"""Ray Serve asynchronous inference: `BrokerTaskProcessorAdapter` against Serve's own Celery
adapter on a local redis-server, same handlers, replicas and concurrency, same run.

For each adapter and handler (a no-op, and a 50 ms sleep), a `@task_consumer` application of
`--replicas` replicas (`max_ongoing_requests=--concurrency`) is deployed and `--warmup` tasks run
through it untimed; one producer enqueues `--tasks` tasks one call at a time (each call timed: enqueue p50/p99) and then reads each task's
status back until it is SUCCESS. Tasks per second = tasks / (first enqueue to last SUCCESS read).
Targets: the broker >= 1.0x Celery-on-Redis for the no-op, and >= 1.0x for the 50 ms handler.

Celery needs `redis-server` on PATH (`apt-get install -y redis-server`) and `celery[redis]`
(`pip install "ray-broker[bench]"`); without them its runs are skipped with a note.

    python -m benchmarks.serve_tasks [--tasks 400 --replicas 2 --concurrency 8 --warmup 20 --no-celery]
"""
from __future__ import annotations

import argparse
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from .baselines import redis_server
from .common import broker_namespace, format_table, machine_info, parser, ratio, run_and_emit, summarize_ms, target

HANDLERS = {"noop": 0.0, "sleep50": 0.05}
STATUS_POLL_S = 0.02


@dataclass
class ServeTasksConfig:
    """What the benchmark runs."""

    tasks: int = 400
    replicas: int = 2
    concurrency: int = 8
    celery: bool = True
    warmup: int = 20
    """Tasks run through each application, untimed, before its timed tasks."""


def consumer_app(config: Any, replicas: int, concurrency: int, seconds: float) -> Any:
    """A `@task_consumer` application whose one handler sleeps `seconds` (none for 0)."""
    from ray import serve
    from ray.serve.task_consumer import task_consumer, task_handler

    @serve.deployment(num_replicas=replicas, max_ongoing_requests=concurrency, ray_actor_options={"num_cpus": 0})
    @task_consumer(task_processor_config=config)
    class Consumer:
        @task_handler(name="work")
        def work(self, n: int) -> int:
            if seconds:
                time.sleep(seconds)
            return n

    return Consumer.bind()


def measure(config: Any, cfg: ServeTasksConfig, seconds: float) -> dict[str, Any]:
    """Deploy a consumer for `config`, push the tasks through it, and take the figures."""
    from ray import serve
    from ray.serve.task_consumer import instantiate_adapter_from_config

    app = f"bench-{uuid.uuid4().hex[:6]}"
    serve.run(consumer_app(config, cfg.replicas, cfg.concurrency, seconds), name=app, route_prefix=None)
    try:
        producer = instantiate_adapter_from_config(config)
        for task_id in [producer.enqueue_task_sync("work", args=[n]).id for n in range(cfg.warmup)]:
            while producer.get_task_status_sync(task_id).status != "SUCCESS":   # untimed: connections made
                time.sleep(STATUS_POLL_S)
        enqueue_s: list[float] = []
        ids: list[str] = []
        began = time.perf_counter()
        for n in range(cfg.tasks):
            t0 = time.perf_counter()
            ids.append(producer.enqueue_task_sync("work", args=[n]).id)
            enqueue_s.append(time.perf_counter() - t0)
        enqueued = time.perf_counter()
        wrong = 0
        for n, task_id in enumerate(ids):
            while (status := producer.get_task_status_sync(task_id)).status != "SUCCESS":
                if status.status == "FAILURE":
                    raise RuntimeError(f"task {n} failed: {status.result}")
                time.sleep(STATUS_POLL_S)
            wrong += status.result != n
        elapsed = time.perf_counter() - began
        return {"tasks": cfg.tasks, "seconds": round(elapsed, 3), "tasks_per_s": round(cfg.tasks / elapsed, 1),
                "enqueue_s": round(enqueued - began, 3), "enqueue_ms": summarize_ms(enqueue_s), "wrong_results": wrong}
    finally:
        serve.delete(app)


def run(cfg: ServeTasksConfig) -> dict[str, Any]:
    """Every adapter with every handler; the document."""
    from ray import serve
    from ray.serve.schema import CeleryAdapterConfig, TaskProcessorConfig

    from ray_broker.serve import BrokerAdapterConfig, BrokerTaskProcessorAdapter

    serve.start(proxy_location="Disabled")
    results: dict[str, Any] = {}
    notes: list[str] = []
    try:
        with broker_namespace("serve-bench") as ns:
            for handler, seconds in HANDLERS.items():
                queue = f"bench-{handler}-{uuid.uuid4().hex[:6]}"
                config = TaskProcessorConfig(queue_name=queue, adapter=BrokerTaskProcessorAdapter,
                                             adapter_config=BrokerAdapterConfig(namespace=ns.name), max_retries=0)
                results[f"broker_{handler}"] = measure(config, cfg, seconds)
        with redis_server(cfg.celery) as (client, why):
            try:
                import celery  # noqa: F401 - only to know whether it is there
            except ImportError:
                client, why = None, "celery is missing (pip install \"ray-broker[bench]\"); Celery runs skipped"
            if client is None:
                notes.append(why or "Celery runs skipped")
            else:
                kw = client.connection_pool.connection_kwargs
                url = f"redis://{kw['host']}:{kw['port']}"
                for handler, seconds in HANDLERS.items():
                    config = TaskProcessorConfig(
                        queue_name=f"bench-{handler}-{uuid.uuid4().hex[:6]}",
                        adapter="ray.serve.task_processor.CeleryTaskProcessorAdapter",
                        adapter_config=CeleryAdapterConfig(broker_url=f"{url}/0", backend_url=f"{url}/1"),
                        max_retries=0)
                    results[f"celery_{handler}"] = measure(config, cfg, seconds)
    finally:
        serve.shutdown()
    ratios = {f"{h}_broker_vs_celery": ratio(results[f"broker_{h}"]["tasks_per_s"],
                                             results.get(f"celery_{h}", {}).get("tasks_per_s")) for h in HANDLERS}
    return {"benchmark": "serve_tasks", "machine": machine_info(), "config": asdict(cfg), "results": results,
            "ratios": ratios, "notes": notes,
            "targets": [target(f"{h}: broker tasks/s vs Celery on Redis", ratios[f"{h}_broker_vs_celery"], 1.0)
                        for h in HANDLERS]}


def table(doc: dict[str, Any]) -> str:
    """The document as a table."""
    rows = [[name, r["tasks_per_s"], r["enqueue_ms"]["median_ms"], r["enqueue_ms"]["p99_ms"], r["wrong_results"]]
            for name, r in doc["results"].items()]
    return format_table("Serve task consumers: end to end (enqueue to SUCCESS read back)",
                        ["run", "tasks/s", "enqueue p50 ms", "enqueue p99 ms", "wrong"], rows)


def main(argv: list[str] | None = None) -> int:
    p: argparse.ArgumentParser = parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=400)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--warmup", type=int, default=20, help="untimed tasks before each timed run")
    p.add_argument("--no-celery", action="store_true", help="skip the Celery-on-Redis runs")
    args = p.parse_args(argv)
    cfg = ServeTasksConfig(tasks=args.tasks, replicas=args.replicas, concurrency=args.concurrency,
                           celery=not args.no_celery, warmup=args.warmup)
    return run_and_emit(run, table, cfg, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
