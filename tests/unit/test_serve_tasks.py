"""Ray Serve asynchronous inference, the Ray-free core: task encoding, enqueue messages, status
folding, the consumer's decisions, the adapter's configuration and the backlog sizing."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from ray_broker.errors import InvalidArgumentError
from ray_broker.serve import BrokerAdapterConfig, TaskEncodingError
from ray_broker.serve.codec import TaskCall, TaskDecodingError, decode_task, encode_task
from ray_broker.serve.decisions import (MAX_DELIVERY_COUNT_EXCEEDED, MAX_RETRIES_EXCEEDED, UNDECODABLE_TASK,
                                        UNKNOWN_TASK, Fail, Retry, Unprocessable, after_failure,
                                        describe_error, on_delivery, result_not_encodable, revoke)
from ray_broker.serve.enqueue import task_message
from ray_broker.serve.ids import StickyTaskIds
from ray_broker.protocol import partition_for_key
from ray_broker.serve.sizing import BacklogSizing, desired_replicas, drain_rate
from ray_broker.serve.status import TaskRecord, TaskStatus, claimed, fold

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def record(status: TaskStatus, attempt: int = 1, **kw: object) -> TaskRecord:
    return TaskRecord(status, 1.0, attempt, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------ codec and enqueue

def test_a_task_round_trips_through_msgpack() -> None:
    body = encode_task("embed", ("text", 3, None), {"scale": 0.5, "raw": b"\x00\x01", "nested": {"a": [1, True]}})
    assert decode_task(body) == TaskCall("embed", ["text", 3, None],
                                         {"scale": 0.5, "raw": b"\x00\x01", "nested": {"a": [1, True]}})


@pytest.mark.parametrize("args, kwargs, where", [
    ([object()], None, r"task 'f'\['args'\]\[0\] \(a builtins.object\)"),
    ([1, {"x": {1, 2}}], None, r"task 'f'\['args'\]\[1\]\['x'\] \(a builtins.set\)"),
    (None, {"when": NOW}, r"task 'f'\['kwargs'\]\['when'\] \(a datetime.datetime\)"),
    ([2 ** 70], None, r"\['args'\]\[0\] \(an int outside 64 bits\)"),
    ([{(1, 2): "tuple key"}], None, r"\['args'\]\[0\] \(a key of type tuple\)"),
])
def test_unencodable_arguments_are_named_with_where_they_are(args: object, kwargs: object, where: str) -> None:
    with pytest.raises(TaskEncodingError, match=where) as caught:
        encode_task("f", args, kwargs)  # type: ignore[arg-type]
    assert "no pickle crosses the broker" in str(caught.value)
    assert isinstance(caught.value, InvalidArgumentError)


@pytest.mark.parametrize("name, args, kwargs, message", [
    ("", None, None, "task_name must be a non-empty string"),
    ("f", "abc", None, "args of task 'f' must be a list or tuple"),
    ("f", None, {1: 2}, "kwargs of task 'f' must be a dict with str keys"),
])
def test_bad_task_shapes_are_refused(name: str, args: object, kwargs: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        encode_task(name, args, kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("body", [b"\xc1", b"\x01", encode_task("f", [], {})[:-3],
                                  b"\x83\xa1v\x01\xa4name\x01\xa4args\x90"])
def test_bodies_that_are_no_task_are_undecodable(body: bytes) -> None:
    with pytest.raises(TaskDecodingError):
        decode_task(body)


def test_the_enqueue_message_carries_the_task_id_and_name() -> None:
    message = task_message("embed", [1], None, {}, new_id=lambda: "id-1")
    assert (message.message_id, message.subject, message.application_properties) == ("id-1", "embed",
                                                                                      {"task_name": "embed"})
    assert decode_task(bytes(message.body)) == TaskCall("embed", [1], {})
    assert message.scheduled_enqueue_time_utc is None
    assert task_message("embed", [1], None, {"task_id": "mine"}).message_id == "mine"


def test_countdown_and_eta_schedule_the_task() -> None:
    assert task_message("f", None, None, {"countdown": 30}, now=lambda: NOW).scheduled_enqueue_time_utc \
        == NOW + timedelta(seconds=30)
    eta = NOW + timedelta(hours=1)
    assert task_message("f", None, None, {"eta": eta}).scheduled_enqueue_time_utc == eta


@pytest.mark.parametrize("options, message", [
    ({"priority": 3}, r"enqueue options \['priority'\] are not supported"),
    ({"task_id": "x" * 129}, "task_id must be a string of at most 128"),
    ({"task_id": 5}, "task_id must be a string"),
    ({"countdown": -1}, "countdown must be a number of seconds >= 0"),
    ({"eta": datetime(2026, 1, 1)}, "eta must be a timezone-aware datetime"),
    ({"eta": NOW, "countdown": 1}, "give countdown or eta, not both"),
])
def test_bad_enqueue_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        task_message("f", None, None, options)


# ------------------------------------------------------------------ statuses

def test_a_record_round_trips() -> None:
    original = TaskRecord(TaskStatus.SUCCESS, 12.5, 2, result={"v": [1, 2]}, error=None)
    assert TaskRecord.decode(original.encode()) == original


def test_a_result_msgpack_cannot_carry_raises_before_writing() -> None:
    with pytest.raises(TaskEncodingError, match="the task's result"):
        TaskRecord(TaskStatus.SUCCESS, 1.0, 1, result=object()).encode()


def test_fold_takes_the_latest_but_never_leaves_a_terminal_status() -> None:
    assert fold([]) is None
    assert fold([record(TaskStatus.STARTED), record(TaskStatus.RETRY), record(TaskStatus.STARTED, 2)]) \
        == record(TaskStatus.STARTED, 2)
    done = record(TaskStatus.SUCCESS, result=4)
    assert fold([record(TaskStatus.STARTED), done, record(TaskStatus.STARTED, 2)]) == done
    assert TaskStatus.SUCCESS == "SUCCESS" and TaskStatus.REVOKED.terminal and not TaskStatus.RETRY.terminal


# ------------------------------------------------------------------ decisions

HANDLERS = {"square", "embed"}


def test_a_known_task_within_its_attempts_runs() -> None:
    assert on_delivery(encode_task("square", [3], None), HANDLERS, 1, 3) == TaskCall("square", [3], {})
    assert on_delivery(encode_task("square", [3], None), HANDLERS, 4, 3) == TaskCall("square", [3], {})


def test_an_unknown_name_or_a_bad_body_is_unprocessable() -> None:
    unknown = on_delivery(encode_task("nope", [], None), HANDLERS, 1, 3)
    assert isinstance(unknown, Unprocessable) and unknown.reason == UNKNOWN_TASK and "'nope'" in unknown.description
    bad = on_delivery(b"\xc1", HANDLERS, 1, 3)
    assert isinstance(bad, Unprocessable) and bad.reason == UNDECODABLE_TASK


def test_a_task_delivered_more_often_than_it_may_run_has_failed() -> None:
    outcome = on_delivery(encode_task("square", [3], None), HANDLERS, 5, 3)
    assert isinstance(outcome, Fail) and outcome.reason == MAX_DELIVERY_COUNT_EXCEEDED
    assert isinstance(on_delivery(encode_task("square", [3], None), HANDLERS, 2, None), Fail), "None: no retries"


@pytest.mark.parametrize("max_retries, attempt, retried", [(3, 1, True), (3, 3, True), (3, 4, False), (0, 1, False),
                                                           (None, 1, False)])
def test_a_failure_retries_until_max_retries_then_fails(max_retries: int | None, attempt: int, retried: bool) -> None:
    outcome = after_failure("embed", attempt, max_retries, ValueError("bad input"))
    if retried:
        assert outcome == Retry("ValueError: bad input")
    else:
        assert isinstance(outcome, Fail) and outcome.reason == MAX_RETRIES_EXCEEDED
        assert "ValueError: bad input" in outcome.description and f"failed {attempt} of" in outcome.description


def test_error_texts_are_cut_to_a_bound() -> None:
    assert len(describe_error(RuntimeError("x" * 5000))) == 1024
    assert result_not_encodable("f", TypeError("set")).description.endswith("TypeError: set")


@pytest.mark.parametrize("before, runs", [([], True), ([TaskStatus.STARTED, TaskStatus.RETRY], True),
                                          ([TaskStatus.STARTED], True), ([TaskStatus.REVOKED], False),
                                          ([TaskStatus.SUCCESS], False), ([TaskStatus.FAILURE], False),
                                          ([TaskStatus.STARTED, TaskStatus.REVOKED], True)])
def test_a_started_record_runs_the_task_unless_it_was_revoked_or_finished_before(
        before: list[TaskStatus], runs: bool) -> None:
    records = [record(status) for status in before] + [record(TaskStatus.STARTED, 2)]
    assert claimed(records, len(before)) == runs
    assert (fold(records) == records[-1]) == runs


@pytest.mark.parametrize("before, revokes", [([], True), ([TaskStatus.RETRY], True), ([TaskStatus.STARTED], False),
                                             ([TaskStatus.SUCCESS], False), ([TaskStatus.REVOKED], False)])
def test_a_revoked_record_counts_only_before_the_task_started(before: list[TaskStatus], revokes: bool) -> None:
    records = [record(status) for status in before] + [record(TaskStatus.REVOKED)]
    assert claimed(records, len(before)) == revokes
    assert (fold(records).status is TaskStatus.REVOKED) == (revokes or before == [TaskStatus.REVOKED])


def test_a_start_and_a_cancel_that_race_are_decided_by_the_order_they_were_stored_in() -> None:
    started, revoked = record(TaskStatus.STARTED, 1), record(TaskStatus.REVOKED)
    assert claimed([started, revoked], 0) and not claimed([started, revoked], 1)
    assert fold([started, revoked, record(TaskStatus.SUCCESS, result=1)]).status is TaskStatus.SUCCESS
    assert claimed([revoked, started], 0) and not claimed([revoked, started], 1)
    assert fold([revoked, started]).status is TaskStatus.REVOKED


@pytest.mark.parametrize("current, revoked", [(None, True), (TaskStatus.PENDING, True), (TaskStatus.RETRY, True),
                                              (TaskStatus.STARTED, False), (TaskStatus.SUCCESS, False),
                                              (TaskStatus.FAILURE, False), (TaskStatus.REVOKED, False)])
def test_revoke_only_a_task_that_is_not_running_or_finished(current: TaskStatus | None, revoked: bool) -> None:
    written = revoke(None if current is None else record(current), 5.0)
    assert (written is not None and written.status is TaskStatus.REVOKED) == revoked


# ------------------------------------------------------------------ configuration

def test_the_config_has_defaults_and_names_the_results_queue() -> None:
    config = BrokerAdapterConfig(namespace="shop")
    assert config.results_queue("inference") == "inference.results"
    assert BrokerAdapterConfig(namespace="shop", results_queue_name="r").results_queue("inference") == "r"


@pytest.mark.parametrize("kwargs, message", [
    ({"namespace": ""}, "namespace must name the broker namespace"),
    ({"namespace": "s", "lock_duration": 1}, "lock_duration must be between 5 s and 300 s"),
    ({"namespace": "s", "lock_duration": timedelta(minutes=6)}, "lock_duration must be between"),
    ({"namespace": "s", "result_retention": 0}, "result_retention must be positive"),
    ({"namespace": "s", "max_task_duration": "1h"}, "max_task_duration must be a timedelta or a number"),
    ({"namespace": "s", "duplicate_detection_window": 5}, "duplicate_detection_window must be between 20 s"),
])
def test_bad_configs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        BrokerAdapterConfig(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ backlog sizing

SIZING = BacklogSizing(target_drain_s=10, tasks_per_replica_s=2, smoothing=0.5)


@pytest.mark.parametrize("backlog, rate, expected", [
    (0, 2.0, 1),        # nothing queued: min_replicas
    (1, 2.0, 1),        # a little: one replica
    (100, 2.0, 5),      # 100 / (2 * 10)
    (101, 2.0, 6),
    (1000, 2.0, 8),     # capped at max_replicas
    (100, 0.5, 8),      # slow replicas need more
])
def test_desired_replicas_drain_the_backlog_in_the_target_time(backlog: int, rate: float, expected: int) -> None:
    assert desired_replicas(backlog, rate, SIZING, min_replicas=1, max_replicas=8) == expected


def test_scale_to_zero_when_allowed() -> None:
    assert desired_replicas(0, 2.0, SIZING, min_replicas=0, max_replicas=8) == 0
    assert desired_replicas(3, 2.0, SIZING, min_replicas=0, max_replicas=8) == 1


def test_the_drain_rate_is_measured_only_when_the_backlog_falls() -> None:
    assert drain_rate(2.0, 100, 60, 10.0, 2, SIZING) == 0.5 * 2.0 + 0.5 * 2.0   # 40 in 10 s by 2 replicas
    assert drain_rate(2.0, 100, 20, 10.0, 2, SIZING) == 0.5 * 2.0 + 0.5 * 4.0
    assert drain_rate(2.0, 100, 120, 10.0, 2, SIZING) == 2.0, "a growing backlog says nothing of the drain"
    assert drain_rate(2.0, 100, 50, 10.0, 0, SIZING) == 2.0
    assert drain_rate(2.0, 100, 50, 0.0, 2, SIZING) == 2.0


def test_a_burst_scales_up_then_an_empty_queue_scales_down() -> None:
    rate, backlog, replicas, seen = SIZING.tasks_per_replica_s, 0, 1, []
    for incoming in (400, 0, 0, 0, 0, 0, 0, 0):
        previous, backlog = backlog, backlog + incoming
        drained = min(backlog, int(replicas * 3 * 5))   # each replica really does 3 tasks/s; samples 5 s apart
        backlog -= drained
        rate = drain_rate(rate, previous + incoming, backlog, 5.0, replicas, SIZING)
        replicas = desired_replicas(backlog, rate, SIZING, min_replicas=1, max_replicas=10)
        seen.append(replicas)
    assert max(seen) > 1 and seen[-1] == 1 and seen.index(max(seen)) < len(seen) - 1


@pytest.mark.parametrize("kwargs", [{"target_drain_s": 0}, {"tasks_per_replica_s": -1}, {"smoothing": 0},
                                    {"smoothing": 1.5}])
def test_bad_sizing_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgumentError):
        BacklogSizing(**kwargs)


def test_the_core_imports_without_ray() -> None:
    code = ("import sys; sys.modules['ray'] = None\n"
            "import ray_broker.serve, ray_broker.serve.decisions, ray_broker.serve.enqueue, ray_broker.serve.sizing\n"
            "try:\n    ray_broker.serve.BrokerTaskProcessorAdapter\nexcept ImportError:\n    print('ADAPTER NEEDS RAY')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "ADAPTER NEEDS RAY" in result.stdout


def test_generated_task_ids_land_in_runs_on_one_partition_then_the_next() -> None:
    ids = StickyTaskIds(16, run=3, start=15)
    placed = [partition_for_key(ids(), 16) for _ in range(7)]
    assert placed == [15, 15, 15, 0, 0, 0, 1]
    assert len({ids() for _ in range(100)}) == 100, "every id is new"
    assert partition_for_key(StickyTaskIds(1)(), 1) == 0


def test_an_enqueue_asks_for_an_id_only_once_its_arguments_are_good() -> None:
    asked: list[str] = []

    def new_id() -> str:
        asked.append("id")
        return "t-1"

    with pytest.raises(TaskEncodingError):
        task_message("work", [object()], None, {}, new_id=new_id)
    with pytest.raises(InvalidArgumentError, match="countdown"):
        task_message("work", [1], None, {"countdown": -1}, new_id=new_id)
    assert asked == []
    assert task_message("work", [1], None, {}, new_id=new_id).message_id == "t-1"
    assert task_message("work", [1], None, {"task_id": "mine"}, new_id=new_id).message_id == "mine"
    assert asked == ["id"]
