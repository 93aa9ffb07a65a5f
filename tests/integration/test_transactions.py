"""Transactions on a real Ray: sends and settlements applied together on one partition or not at
all, the errors each rule raises, and a receive-process-send pipeline that loses and duplicates
nothing while the partition it works on is killed twice."""
from __future__ import annotations

import collections
import threading
import time
from datetime import timedelta

import pytest

import ray_broker as rb
import ray_broker.aio as rba
from ray_broker.routing import partition_for_key

from .helpers import drain, kill_partition, wait_partition_back

BOTH_PATHS = True
"""Every test here runs on the direct path and through the gateway relay."""


def queues(ns: rb.Namespace, queue_name: str, **options: object) -> tuple[str, str]:
    source, target = f"{queue_name}-a", f"{queue_name}-b"
    ns.create_queue(source, enable_partitioning=True, **options)  # type: ignore[arg-type]
    ns.create_queue(target, enable_partitioning=True)
    return source, target


def test_a_commit_moves_a_message_and_an_exception_rolls_back(namespace: rb.Namespace, queue_name: str) -> None:
    source, target = queues(namespace, queue_name)
    with namespace.get_queue_sender(source) as sender:
        sender.send_messages([rb.Message("one", partition_key="k"), rb.Message("two", partition_key="k")])
    receiver = namespace.get_queue_receiver(source, max_wait_time=5)
    one, two = receiver.receive_messages(2, max_wait_time=5)
    out = namespace.get_queue_sender(target)
    with namespace.transaction() as txn:
        receiver.complete_message(one, transaction=txn)
        out.send_messages(rb.Message(b"ONE", partition_key="k"), transaction=txn)
        assert namespace.get_queue_runtime_properties(target).active_message_count == 0, "nothing before the commit"
    assert txn.partition_key == "k"
    with pytest.raises(RuntimeError, match="processing failed"):
        with namespace.transaction() as failed:
            receiver.complete_message(two, transaction=failed)
            out.send_messages(rb.Message(b"TWO", partition_key="k"), transaction=failed)
            raise RuntimeError("processing failed")
    receiver.abandon_message(two)
    receiver.flush()
    (moved,) = drain(namespace.get_queue_receiver(target, max_wait_time=2), expected=1)
    assert moved.body == b"ONE" and rb.partition_of(moved.sequence_number) == partition_for_key("k", 16)
    assert [m.body for m in drain(receiver, expected=1)] == [b"two"]
    receiver.close()
    namespace.delete_queue(source)
    namespace.delete_queue(target)


def test_each_rule_raises_invalid_operation_at_the_operation(namespace: rb.Namespace, queue_name: str) -> None:
    source, target = queues(namespace, queue_name)
    namespace.create_queue(f"{queue_name}-s", enable_partitioning=True, requires_session=True)
    out = namespace.get_queue_sender(target)
    sessions = namespace.get_queue_sender(f"{queue_name}-s")
    key = "k1"
    other = next(k for k in ("k2", "k3", "k4") if partition_for_key(k, 16) != partition_for_key(key, 16))
    with namespace.transaction() as txn:
        out.send_messages(rb.Message("a", partition_key=key), transaction=txn)
        with pytest.raises(rb.errors.InvalidOperationError, match=f"'{key}'.*'{other}'"):
            out.send_messages(rb.Message("b", partition_key=other), transaction=txn)
        with pytest.raises(rb.errors.InvalidOperationError, match="no partition key"):
            out.send_messages(rb.Message("c"), transaction=txn)
    with namespace.transaction() as txn:
        sessions.send_messages(rb.Message("s", session_id="s1"), transaction=txn)
        with pytest.raises(rb.errors.InvalidOperationError, match="one session"):
            sessions.send_messages(rb.Message("t", session_id="s2"), transaction=txn)
    with namespace.transaction() as txn:
        out.send_messages([rb.Message(str(i), partition_key=key) for i in range(100)], transaction=txn)
        with pytest.raises(rb.errors.InvalidOperationError, match="at most 100"):
            out.send_messages(rb.Message("101", partition_key=key), transaction=txn)
    assert namespace.get_queue_runtime_properties(target).active_message_count == 101
    assert namespace.get_queue_runtime_properties(f"{queue_name}-s").active_message_count == 1
    for name in (source, target, f"{queue_name}-s"):
        namespace.delete_queue(name)


def test_a_transaction_spans_entities_on_one_partition_only(namespace: rb.Namespace, queue_name: str) -> None:
    single = f"{queue_name}-single"
    namespace.create_queue(single)
    partitioned = f"{queue_name}-p"
    namespace.create_queue(partitioned, enable_partitioning=True)
    home = partition_for_key(f"entity:{single}".lower(), 16)
    key = next(f"k{i}" for i in range(100) if partition_for_key(f"k{i}", 16) != home)
    same = next(f"k{i}" for i in range(1000) if partition_for_key(f"k{i}", 16) == home)
    with namespace.transaction() as txn:
        namespace.get_queue_sender(single).send_messages(rb.Message("x", partition_key=same), transaction=txn)
        namespace.get_queue_sender(partitioned).send_messages(rb.Message("y", partition_key=same), transaction=txn)
    with namespace.transaction() as txn:
        namespace.get_queue_sender(partitioned).send_messages(rb.Message("z", partition_key=key), transaction=txn)
        with pytest.raises(rb.errors.InvalidOperationError, match=f"partition {home} .*partition "):
            namespace.get_queue_sender(single).send_messages(rb.Message("w", partition_key=key), transaction=txn)
    assert namespace.get_queue_runtime_properties(single).active_message_count == 1
    assert namespace.get_queue_runtime_properties(partitioned).active_message_count == 2
    namespace.delete_queue(single)
    namespace.delete_queue(partitioned)


async def test_the_async_client_commits_with_async_with(namespace: rb.Namespace, queue_name: str) -> None:
    source, target = queues(namespace, queue_name)
    ns = rba.Namespace(namespace.config, relay=namespace.relay)
    async with ns.get_queue_sender(source) as sender:
        await sender.send_messages(rb.Message("in", session_id=None, partition_key="ak"))
    async with ns.get_queue_receiver(source, max_wait_time=5) as receiver:
        (message,) = await receiver.receive_messages(1, max_wait_time=5)
        async with ns.transaction() as txn:
            await receiver.complete_message(message, transaction=txn)
            await ns.get_queue_sender(target).send_messages(rb.Message("out", partition_key="ak"), transaction=txn)
    assert namespace.get_queue_runtime_properties(source).active_message_count == 0
    assert namespace.get_queue_runtime_properties(target).active_message_count == 1
    await ns.close()
    namespace.delete_queue(source)
    namespace.delete_queue(target)


PIPELINE_MESSAGES = 2000
PIPELINE_KEYS = 20


def test_a_transactional_pipeline_loses_and_duplicates_nothing_while_its_partition_is_killed_twice(
        namespace: rb.Namespace, queue_name: str, client_path: str) -> None:
    if client_path == "relay":
        pytest.skip("the pipeline runs once, on the direct path")
    source, target = queues(namespace, queue_name, lock_duration=timedelta(seconds=5))
    keys = [f"key-{i}" for i in range(PIPELINE_KEYS)]
    with namespace.get_queue_sender(source) as sender:
        for start in range(0, PIPELINE_MESSAGES, 200):
            sender.send_messages([rb.Message(f"m{i}", message_id=f"m{i}", partition_key=keys[i % PIPELINE_KEYS])
                                  for i in range(start, start + 200)])
    victim = partition_for_key(keys[0], 16)
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        for _ in range(2):
            if stop.wait(4.0):
                return
            old = kill_partition(namespace, victim)
            wait_partition_back(namespace, victim, old)
            kills.append(old)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    out = namespace.get_queue_sender(target)
    failures = 0
    deadline = time.monotonic() + 240
    with namespace.get_queue_receiver(source, max_wait_time=2) as receiver:
        while time.monotonic() < deadline:
            batch = receiver.receive_messages(100, max_wait_time=2)
            if not batch:
                if namespace.get_queue_runtime_properties(source).total_message_count == 0 and len(kills) == 2:
                    break
                continue
            by_key: dict[str, list[rb.ReceivedMessage]] = collections.defaultdict(list)
            for message in batch:
                by_key[str(message.partition_key)].append(message)
            for key, messages in by_key.items():
                for start in range(0, len(messages), 50):
                    chunk = messages[start:start + 50]
                    try:
                        with namespace.transaction() as txn:
                            for message in chunk:
                                receiver.complete_message(message, transaction=txn)
                            out.send_messages([rb.Message(m.body.upper(), message_id=m.message_id, partition_key=key)
                                               for m in chunk], transaction=txn)
                    except (rb.errors.ServiceBusError, rb.errors.MessageAlreadySettled):
                        failures += 1  # rolled back: the messages come back when their locks expire
    stop.set()
    thread.join(timeout=120)
    assert len(kills) == 2, "the partition was killed twice while the pipeline ran"
    with namespace.get_queue_receiver(target, max_wait_time=2) as receiver:
        moved = drain(receiver, expected=PIPELINE_MESSAGES)
    ids = collections.Counter(m.message_id for m in moved)
    assert len(ids) == PIPELINE_MESSAGES, f"lost {PIPELINE_MESSAGES - len(ids)} (commits that failed: {failures})"
    assert max(ids.values()) == 1, f"duplicated: {[i for i, n in ids.items() if n > 1][:10]}"
    assert namespace.get_queue_runtime_properties(source).total_message_count == 0
    namespace.delete_queue(source)
    namespace.delete_queue(target)
