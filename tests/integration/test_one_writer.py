"""One writer per store, on a real Ray: a second Ray cluster cannot open a running namespace's stores.

Driver A is this test session (its shared Ray); driver B is a separate process with a local Ray of
its own, aimed at the same data_dir. B is refused with `StoreLockedError` before it creates
anything (and may not delete the stores either), A keeps serving, and every message A acknowledged
is received exactly once.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray

import ray_broker as rb
from ray_broker.engine.store_lock import holder_of

from .helpers import drain, isolated_env, kill_partition, short_tmpdir, wait_partition_back

SECOND_DRIVER = textwrap.dedent("""
    import os, sys
    import ray
    import ray_broker as rb
    data_dir = sys.argv[1]
    config = os.path.join(data_dir, "namespace.msgpack")
    before = os.path.getmtime(config)
    try:
        rb.start("hold", data_dir=data_dir, address="local")
        print("STARTED")
    except rb.StoreLockedError as exc:
        print("REFUSED", exc)
    print("ACTORS", len(ray.util.list_named_actors(all_namespaces=True)))
    print("CONFIG_UNTOUCHED", os.path.getmtime(config) == before)
    ray.shutdown()
    try:
        rb.connect("hold")
    except rb.NamespaceNotRunningError as exc:
        print("CONNECT", exc)
    try:
        rb.stop("hold", delete_data=True)
        print("DELETED")
    except rb.StoreLockedError as exc:
        print("KEPT", exc)
""")


@pytest.fixture
def held_namespace(ray_instance: None, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Namespace "hold" on the session's Ray, durable in a temp data_dir."""
    data_dir = str(tmp_path / "hold")
    ns = rb.start("hold", data_dir=data_dir, durability="normal")
    yield ns, data_dir
    rb.stop("hold", delete_data=True)


def test_a_second_cluster_is_refused_and_the_first_loses_nothing(held_namespace: tuple[rb.Namespace, str],
                                                                  tmp_path: Path) -> None:
    ns, data_dir = held_namespace
    ns.create_queue("orders", enable_partitioning=True)
    sent = [f"m{i}" for i in range(300)]
    with ns.get_queue_sender("orders") as sender:
        sender.send_messages([rb.Message(body, message_id=body) for body in sent[:200]])

    ray_tmp = short_tmpdir("rbB")
    try:
        result = subprocess.run([sys.executable, "-c", SECOND_DRIVER, data_dir], capture_output=True, text=True,
                                timeout=240, env=isolated_env(ray_tmp, str(Path(data_dir).parent)))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    lines = {line.split(" ", 1)[0]: line for line in result.stdout.splitlines()}
    assert "REFUSED" in lines, result.stdout + result.stderr[-3000:]
    refused = lines["REFUSED"]
    assert data_dir in refused and "partition 0" in refused and "actor hold.partition.0" in refused
    assert "pid " in refused and " on host " in refused
    assert lines["ACTORS"] == "ACTORS 0", "the refused start created no actor"
    assert lines["CONFIG_UNTOUCHED"] == "CONFIG_UNTOUCHED True"
    assert "ray_broker.start('hold')" in lines["CONNECT"] and "its stores are held by" in lines["CONNECT"]
    assert "KEPT" in lines and "DELETED" not in lines, "a driver that does not run it must not delete live stores"
    assert os.path.exists(os.path.join(data_dir, "partition-000.sqlite3"))

    with ns.get_queue_sender("orders") as sender:
        sender.send_messages([rb.Message(body, message_id=body) for body in sent[200:]])
    with ns.get_queue_receiver("orders", max_wait_time=5) as receiver:
        got = drain(receiver, expected=len(sent))
    assert sorted(m.message_id for m in got) == sorted(sent)
    assert ns.get_queue_runtime_properties("orders").total_message_count == 0


def test_a_killed_partition_takes_its_store_lock_back(held_namespace: tuple[rb.Namespace, str]) -> None:
    ns, _ = held_namespace
    ns.create_queue("keyed", enable_partitioning=True)
    with ns.get_queue_sender("keyed") as sender:
        sender.send_messages([rb.Message(f"k{i}", partition_key="pk") for i in range(20)])
    index = rb.partition_of(ns.get_queue_receiver("keyed").peek_messages(1)[0].sequence_number)
    store = ns.config.store_path(index)
    assert store is not None
    old_pid = kill_partition(ns, index)
    wait_partition_back(ns, index, old_pid)
    holder = holder_of(store)
    new_pid = ray.get(ray.get_actor(f"hold.partition.{index}", namespace="ray_broker").pid.remote())
    assert holder is not None and holder.pid == new_pid != old_pid
    with ns.get_queue_receiver("keyed", max_wait_time=5) as receiver:
        assert [m.body for m in drain(receiver, expected=20)] == [f"k{i}".encode() for i in range(20)]


def test_a_stopped_namespace_starts_again_at_once_with_what_it_held(ray_instance: None, tmp_path: Path) -> None:
    """`stop` returns once the stopped partitions let their stores go, so `start` right after it
    takes them back (no `StoreLockedError`) with every message."""
    data_dir = str(tmp_path / "again")
    ns = rb.start("again", sku="premium", partitions=2, data_dir=data_dir, durability="normal")
    try:
        ns.create_queue("q", enable_partitioning=True)
        with ns.get_queue_sender("q") as sender:
            sender.send_messages([rb.Message(f"m{i}") for i in range(6)])
        rb.stop("again")
        ns = rb.start("again", sku="premium", partitions=2, data_dir=data_dir, durability="normal")
        assert ns.get_queue_runtime_properties("q").active_message_count == 6
    finally:
        rb.stop("again", delete_data=True)
