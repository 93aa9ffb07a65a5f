"""Ray Serve asynchronous inference on the broker: a real Serve application whose `@task_consumer`
deployment uses `BrokerTaskProcessorAdapter`, one Serve and one namespace for the module.

Covered: 100 tasks give their results; a failing task runs max_retries + 1 times, ends FAILURE and
lands in the failed queue with its dead-letter reason; unknown and undecodable tasks go to the
unprocessable queue; the backlog metric follows a burst; a cancelled task never runs; a replica
killed while tasks run loses none of them; the async variants. With --long: the backlog
autoscaling policy adds replicas under a backlog and removes them after.
"""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

MAX_RETRIES = 2
REPLICAS = 2
CONCURRENCY = 4
LOCK_S = 5


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    """`check()` once it is truthy; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s (last: {value!r})")
        time.sleep(every)


@pytest.fixture(scope="module")
def app(ray_instance: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A namespace, a Serve application consuming its task queue, and a producer adapter."""
    from ray import serve
    from ray.serve.schema import TaskProcessorConfig
    from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

    import ray_broker as rb
    from ray_broker.serve import BrokerAdapterConfig, BrokerTaskProcessorAdapter, current_task

    name = f"serve-{uuid.uuid4().hex[:6]}"
    ns = rb.start(name, sku="premium", partitions=4, data_dir=str(tmp_path_factory.mktemp("serve")))
    gate = tmp_path_factory.mktemp("gate") / "open"
    queue = "inference"
    config = TaskProcessorConfig(
        queue_name=queue, adapter=BrokerTaskProcessorAdapter,
        adapter_config=BrokerAdapterConfig(namespace=name, lock_duration=LOCK_S),
        max_retries=MAX_RETRIES, failed_task_queue_name=f"{queue}-failed",
        unprocessable_task_queue_name=f"{queue}-unprocessable")

    @serve.deployment(num_replicas=REPLICAS, max_ongoing_requests=CONCURRENCY, ray_actor_options={"num_cpus": 0})
    @task_consumer(task_processor_config=config)
    class Worker:
        @task_handler(name="square")
        def square(self, x: int) -> int:
            return x * x

        @task_handler(name="fail")
        def fail(self, why: str) -> None:
            raise RuntimeError(why)

        @task_handler(name="sleep")
        def sleep(self, x: int, seconds: float) -> int:
            time.sleep(seconds)
            return x

        @task_handler(name="gated")
        def gated(self, path: str) -> str:
            while not Path(path).exists():
                time.sleep(0.05)
            return "opened"

        @task_handler(name="echo")
        async def echo(self, value: Any) -> Any:
            return value

        @task_handler(name="whoami")
        def whoami(self) -> list[Any]:
            task = current_task()
            return [task.id, task.name, task.attempt]

        @task_handler(name="whoami_async")
        async def whoami_async(self) -> list[Any]:
            task = current_task()
            return [task.id, task.name, task.attempt]

    serve.start(proxy_location="Disabled")
    serve.run(Worker.bind(), name="tasks", route_prefix=None)
    producer = instantiate_adapter_from_config(config)
    yield {"ns": ns, "queue": queue, "config": config, "producer": producer, "gate": gate, "name": name}
    serve.delete("tasks")
    serve.shutdown()
    rb.stop(name, delete_data=True)


def statuses(producer: Any, ids: list[str]) -> dict[str, str]:
    return {i: producer.get_task_status_sync(i).status for i in ids}


def all_done(producer: Any, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(s in ("SUCCESS", "FAILURE", "REVOKED") for s in statuses(producer, ids).values())


def history(app: dict[str, Any], task_id: str) -> list[str]:
    """The statuses recorded for a task, in order (peeked from the results queue)."""
    from ray_broker.serve.status import TaskRecord

    return [TaskRecord.decode(bytes(m.body)).status.value
            for m in app["ns"].peek_messages(f"{app['queue']}.results", 100, session_id=task_id)]


def test_a_hundred_tasks_give_their_results(app: dict[str, Any]) -> None:
    producer = app["producer"]
    tasks = [producer.enqueue_task_sync("square", args=[i]) for i in range(100)]
    assert all(t.status == "PENDING" for t in tasks) and len({t.id for t in tasks}) == 100
    ids = [t.id for t in tasks]
    wait_for("100 results", all_done(producer, ids))
    results = [producer.get_task_status_sync(i) for i in ids]
    assert [r.status for r in results] == ["SUCCESS"] * 100
    assert [r.result for r in results] == [i * i for i in range(100)]


def test_a_failing_task_runs_max_retries_plus_one_times_then_lands_in_the_failed_queue(app: dict[str, Any]) -> None:
    producer = app["producer"]
    task = producer.enqueue_task_sync("fail", args=["no model"])
    wait_for("FAILURE", lambda: producer.get_task_status_sync(task.id).status == "FAILURE")
    result = producer.get_task_status_sync(task.id)
    assert "RuntimeError: no model" in result.result
    assert history(app, task.id).count("STARTED") == MAX_RETRIES + 1
    with app["ns"].get_queue_receiver(f"{app['queue']}-failed", max_wait_time=10) as receiver:
        [parked] = receiver.receive_messages(max_wait_time=10)
        receiver.complete_message(parked)
    assert parked.message_id == task.id
    assert parked.dead_letter_reason == "MaxRetriesExceeded"
    assert "RuntimeError: no model" in parked.dead_letter_error_description


def test_unknown_and_undecodable_tasks_go_to_the_unprocessable_queue(app: dict[str, Any]) -> None:
    import ray_broker as rb

    producer = app["producer"]
    unknown = producer.enqueue_task_sync("no_such_task", args=[1])
    with app["ns"].get_queue_sender(app["queue"]) as sender:
        sender.send_messages(rb.Message(b"\xc1 not msgpack", message_id="garbage-1"))
    with app["ns"].get_queue_receiver(f"{app['queue']}-unprocessable", max_wait_time=15) as receiver:
        parked = {}
        while len(parked) < 2:
            for m in receiver.receive_messages(max_message_count=2, max_wait_time=15) or pytest.fail("not parked"):
                parked[m.message_id] = m.application_properties
                receiver.complete_message(m)
    assert parked[unknown.id]["DeadLetterReason"] == "UnknownTask"
    assert parked["garbage-1"]["DeadLetterReason"] == "UndecodableTask"
    assert producer.get_task_status_sync(unknown.id).status == "FAILURE"


def test_the_backlog_metric_follows_a_burst_and_a_cancelled_task_never_runs(app: dict[str, Any]) -> None:
    producer, gate = app["producer"], app["gate"]
    holders = [producer.enqueue_task_sync("gated", args=[str(gate)]) for _ in range(REPLICAS * CONCURRENCY)]
    wait_for("every slot held", lambda: list(statuses(producer, [h.id for h in holders]).values())
             == ["STARTED"] * len(holders))
    idle = producer.get_metrics_sync()["queue_length"]
    burst = [producer.enqueue_task_sync("square", args=[i]) for i in range(30)]
    assert producer.get_metrics_sync()["queue_length"] == idle + 30
    cancelled = producer.cancel_task_sync(burst[0].id)
    assert cancelled.status == "REVOKED"
    gate.touch()
    wait_for("the backlog drained", lambda: producer.get_metrics_sync()["queue_length"] == 0)
    wait_for("the burst done", all_done(producer, [t.id for t in burst]))
    assert producer.get_task_status_sync(burst[0].id).status == "REVOKED"
    assert history(app, burst[0].id) in (["REVOKED"], ["REVOKED", "STARTED"]), \
        "a revoked task never runs (a delivery's STARTED stored after REVOKED does not count, and it stops there)"
    assert {producer.get_task_status_sync(t.id).status for t in burst[1:]} == {"SUCCESS"}
    assert producer.cancel_task_sync(burst[1].id).status == "SUCCESS", "too late to cancel a finished task"


def test_a_replica_killed_while_tasks_run_loses_none(app: dict[str, Any]) -> None:
    import ray

    producer = app["producer"]
    tasks = [producer.enqueue_task_sync("sleep", args=[i, 0.5]) for i in range(24)]
    ids = [t.id for t in tasks]
    wait_for("tasks running", lambda: "STARTED" in statuses(producer, ids).values(), every=0.05)
    [replica, *_] = [a for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("SERVE_REPLICA::tasks#")]
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    wait_for("every task done", all_done(producer, ids), timeout=90)
    results = [producer.get_task_status_sync(i) for i in ids]
    assert [(r.status, r.result) for r in results] == [("SUCCESS", i) for i in range(24)]
    assert any(history(app, i).count("STARTED") > 1 for i in ids), "the killed replica was running tasks"


async def test_async_variants(app: dict[str, Any]) -> None:
    import asyncio

    producer = app["producer"]
    task = await producer.enqueue_task_async("echo", args=[{"k": [1, 2.5, "x", b"\x00"]}])
    for _ in range(300):
        result = await producer.get_task_status_async(task.id)
        if result.status == "SUCCESS":
            break
        await asyncio.sleep(0.1)
    assert result.result == {"k": [1, 2.5, "x", b"\x00"]}
    metrics = await producer.get_metrics_async()
    assert metrics["queue_length"] >= 0 and metrics["failed_queue_length"] >= 0
    health = await producer.health_check_async()
    assert [h["partition"] for h in health] == [0, 1, 2, 3] and all(h["healthy"] for h in health)


def test_enqueue_refuses_what_msgpack_cannot_carry_before_sending(app: dict[str, Any]) -> None:
    from ray_broker.serve import TaskEncodingError

    producer = app["producer"]
    before = producer.get_metrics_sync()["queue_length"]
    with pytest.raises(TaskEncodingError, match=r"task 'square'\[.args.\]\[0\] \(a builtins.set\)"):
        producer.enqueue_task_sync("square", args=[{1, 2}])
    assert producer.get_metrics_sync()["queue_length"] == before


def test_handlers_know_their_task(app: dict[str, Any]) -> None:
    from ray_broker.serve.status import TaskRecord

    producer = app["producer"]
    for name in ("whoami", "whoami_async"):
        producer.enqueue_task_sync(name, task_id=f"who-{name}")
        wait_for(name, lambda: producer.get_task_status_sync(f"who-{name}").status == "SUCCESS")
        records = [TaskRecord.decode(bytes(m.body)) for m in
                   app["ns"].peek_messages(f"{app['queue']}.results", 100, session_id=f"who-{name}")]
        run = [r.attempt for r in records if r.status.value == "STARTED"][-1]   # 1 unless a lock lapsed under load
        assert producer.get_task_status_sync(f"who-{name}").result == [f"who-{name}", name, run]
        assert run >= 1


def test_an_enqueue_repeated_with_one_task_id_is_stored_once(app: dict[str, Any]) -> None:
    producer = app["producer"]
    first = producer.enqueue_task_sync("square", args=[7], task_id="order-42")
    again = producer.enqueue_task_sync("square", args=[7], task_id="order-42")
    assert first.id == again.id == "order-42"
    wait_for("done", lambda: producer.get_task_status_sync("order-42").status == "SUCCESS")
    time.sleep(1)
    assert history(app, "order-42").count("STARTED") == 1


def test_the_backlog_policy_adds_replicas_under_a_backlog_and_removes_them_after(app: dict[str, Any],
                                                                                  long_run: bool) -> None:
    if not long_run:
        pytest.skip("a second application that scales up and down: run with --long")
    from ray import serve
    from ray.serve.config import AutoscalingConfig, AutoscalingPolicy
    from ray.serve.schema import TaskProcessorConfig
    from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

    from ray_broker.serve import BacklogAutoscalingPolicy, BrokerAdapterConfig, BrokerTaskProcessorAdapter

    config = TaskProcessorConfig(queue_name="scaled", adapter=BrokerTaskProcessorAdapter,
                                 adapter_config=BrokerAdapterConfig(namespace=app["name"], lock_duration=LOCK_S),
                                 max_retries=0)
    autoscaling = AutoscalingConfig(
        min_replicas=1, max_replicas=3, upscale_delay_s=0.5, downscale_delay_s=2,
        policy=AutoscalingPolicy(policy_function=BacklogAutoscalingPolicy,
                                 policy_kwargs={"namespace": app["name"], "queue_name": "scaled", "target_drain_s": 2,
                                                "tasks_per_replica_s": 2, "poll_interval_s": 0.5}))

    @serve.deployment(max_ongoing_requests=2, autoscaling_config=autoscaling, ray_actor_options={"num_cpus": 0})
    @task_consumer(task_processor_config=config)
    class Scaled:
        @task_handler(name="sleep")
        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    def running() -> int:
        states = serve.status().applications["scaled"].deployments["Scaled"].replica_states
        return int(states.get("RUNNING", 0))

    serve.run(Scaled.bind(), name="scaled", route_prefix=None)
    try:
        producer = instantiate_adapter_from_config(config)
        assert running() == 1
        ids = [producer.enqueue_task_sync("sleep", args=[0.5]).id for _ in range(80)]
        wait_for("scaled up to max_replicas", lambda: running() == 3, timeout=60)
        wait_for("every task done", all_done(producer, ids), timeout=90)
        wait_for("scaled back down to min_replicas", lambda: running() == 1, timeout=60)
    finally:
        serve.delete("scaled")


def test_a_stopping_consumer_hands_its_running_tasks_back_at_once(app: dict[str, Any]) -> None:
    import threading

    from ray.serve.schema import TaskProcessorConfig

    from ray_broker.serve import BrokerAdapterConfig, BrokerTaskProcessorAdapter

    config = TaskProcessorConfig(queue_name="handback", adapter=BrokerTaskProcessorAdapter,
                                 adapter_config=BrokerAdapterConfig(namespace=app["name"], lock_duration=60),
                                 max_retries=3)
    release = threading.Event()
    stopping, taking_over = BrokerTaskProcessorAdapter(config), BrokerTaskProcessorAdapter(config)
    stopping.register_task_handle(lambda n: release.wait(30) and n, "work")
    taking_over.register_task_handle(lambda n: n * 10, "work")
    stopping.initialize(2)
    taking_over.initialize(2)
    ids = [stopping.enqueue_task_sync("work", args=[n]).id for n in (1, 2)]
    try:
        stopping.start_consumer()
        wait_for("both running", lambda: list(statuses(stopping, ids).values()) == ["STARTED", "STARTED"])
        stopping.stop_consumer(timeout=0.2)
        taking_over.start_consumer()
        wait_for("taken over long before the 60 s lock would lapse", all_done(taking_over, ids), timeout=20)
        assert [taking_over.get_task_status_sync(i).result for i in ids] == [10, 20]
    finally:
        release.set()
        taking_over.stop_consumer()
