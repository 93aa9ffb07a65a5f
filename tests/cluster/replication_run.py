"""The replication scenario on a 4-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

Two workers have no store label; the third is labelled `DISK` and keeps its stores in a directory
of its own. A premium namespace of 4 partitions with 3 replicas each (a majority of 2 holds every
change) and 2 gateways takes keyed and unkeyed batches, and a receiver locks some messages without
settling them. Then, one after another:
- the unlabelled worker running the leader of one partition is removed (at times with a gateway
  on it: what is read after the loss is read from the replicas); keyed sends to that partition go
  on after the failover, and its replicas there are made again on the node left free;
- the leader of another partition is frozen (SIGSTOP) while a keyed send goes to it, and thawed;
- a follower of a third partition is killed (Ray restarts it) between keyed sends;
- the labelled worker is removed, its directory deleted, and a worker with its label added back.
Last, the locked messages are completed, and every message sent must be received exactly once.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from ray_broker.cli.namespaces import status_document
from ray_broker.config import NODE_DATA_DIR_ENV, RAY_NAMESPACE, STORE_LABEL
from ray_broker.errors import InvalidOperationError, MessageLockLostError
from ray_broker.routing import partition_for_key

PARTITIONS = 4
REPLICAS = 3
BATCHES = 12
PER_BATCH = 10
HELD = 5
DISK = "disk-c"


def key_for(partition: int) -> str:
    return next(f"key-{i}" for i in range(10_000) if partition_for_key(f"key-{i}", PARTITIONS) == partition)


def replica_states(name: str) -> dict[str, Any]:
    states = {}
    for k in range(PARTITIONS):
        for r in range(REPLICAS):
            try:
                handle = ray.get_actor(f"{name}.partition.{k}.{r}", namespace=RAY_NAMESPACE)
                states[f"{k}.{r}"] = ray.get(handle.replica_state.remote(), timeout=5)
            except Exception as exc:  # noqa: BLE001 - a replica on the lost node does not answer
                states[f"{k}.{r}"] = type(exc).__name__
    return states


def add_labelled(cluster: Cluster, root: Path) -> Any:
    """A worker labelled `DISK` keeping its stores in a directory of its own."""
    return cluster.add_node(num_cpus=1, labels={STORE_LABEL: DISK}, env_vars={NODE_DATA_DIR_ENV: str(root / DISK)})


def lose_a_disk(cluster: Cluster, node: Any, ns: rb.Namespace, root: Path, out: dict[str, Any]) -> None:
    """Remove the labelled worker, delete its data dir, and add a worker with that label back: its
    replicas rejoin as followers and are copied whole; then every replica of every partition holds
    the same rows."""
    cluster.remove_node(node)
    shutil.rmtree(root / DISK)
    time.sleep(2.0)
    add_labelled(cluster, root)
    cluster.wait_for_nodes()
    began = time.monotonic()
    out["disk_back_in_sync_s"] = None
    while time.monotonic() - began < 90:
        if all(wait_for_repair("rep", k, give_up_s=0.5) is not None for k in range(PARTITIONS)):
            out["disk_back_in_sync_s"] = round(time.monotonic() - began, 2)
            break
        time.sleep(0.3)
    out["stores_equal_after_disk_loss"] = all(digests_agree("rep", k) for k in range(PARTITIONS))
    if out["disk_back_in_sync_s"] is None:
        out["states_not_in_sync"] = replica_states("rep")


def digests_agree(name: str, partition: int) -> bool:
    """Whether every replica of `partition` holds the same rows (their store digests, at the same
    position, are equal)."""
    try:
        handles = [ray.get_actor(f"{name}.partition.{partition}.{r}", namespace=RAY_NAMESPACE)
                   for r in range(REPLICAS)]
        return len(set(ray.get([h.store_digest.remote() for h in handles], timeout=60))) == 1
    except Exception:  # noqa: BLE001 - a replica not there (yet) holds nothing of the partition
        return False


def wait_for_repair(name: str, partition: int, give_up_s: float = 90.0) -> float | None:
    """Seconds until every replica of `partition` answers and is in sync again (None: never)."""
    began = time.monotonic()
    while time.monotonic() - began < give_up_s:
        states = [replica_states(name)[f"{partition}.{r}"] for r in range(REPLICAS)]
        leaders = [s for s in states if isinstance(s, dict) and s["leading"] is not None]
        if all(isinstance(s, dict) for s in states) and leaders and \
                all(lag == 0 for lag in leaders[0]["lag"].values()):
            return round(time.monotonic() - began, 2)
        time.sleep(0.3)
    return None


def leader_of(name: str, partition: int) -> tuple[int, Any]:
    """The replica leading `partition`, and its actor (asked of the replicas themselves)."""
    for r in range(REPLICAS):
        try:
            handle = ray.get_actor(f"{name}.partition.{partition}.{r}", namespace=RAY_NAMESPACE)
            if ray.get(handle.leads.remote(), timeout=2) is not None:
                return r, handle
        except Exception:  # noqa: BLE001 - a replica on a lost node does not answer
            continue
    raise AssertionError(f"partition {partition} has no leader")


def fence_a_frozen_leader(ns: rb.Namespace, avoid: int, out: dict[str, Any]) -> list[str]:
    """Freeze (SIGSTOP) the leader of another partition while a keyed send goes to it: the control
    plane elects another; thawed (SIGCONT), the old leader leads no more. The bodies sent."""
    partition = next(k for k in range(PARTITIONS) if k != avoid)
    replica, old = leader_of("rep", partition)
    pid = ray.get(old.pid.remote(), timeout=10)
    os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        with ns.get_queue_sender("q") as sender:
            sender.send_messages([rb.Message(f"frozen-{i}", partition_key=key_for(partition)) for i in range(PER_BATCH)])
        out["keyed_send_while_frozen_s"] = round(time.monotonic() - began, 2)
        out["leader_while_frozen"] = leader_of("rep", partition)[0] != replica
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 20
    while (leads := ray.get(old.leads.remote(), timeout=10)) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    out["thawed_leader_leads"] = leads
    return [f"frozen-{i}" for i in range(PER_BATCH)]


def restart_a_follower(ns: rb.Namespace, avoid: int, out: dict[str, Any]) -> list[str]:
    """Kill a follower of another partition (Ray restarts it) between keyed sends to that
    partition: it catches up, and its store then holds what the leader's holds. The bodies sent."""
    partition = next(k for k in reversed(range(PARTITIONS)) if k != avoid)
    leader, handle = leader_of("rep", partition)
    follower = next(r for r in range(REPLICAS) if r != leader)
    bodies = [f"restart-{b}-{i}" for b in range(BATCHES) for i in range(PER_BATCH)]
    with ns.get_queue_sender("q") as sender:
        for b in range(BATCHES):
            if b == BATCHES // 2:
                ray.kill(ray.get_actor(f"rep.partition.{partition}.{follower}", namespace=RAY_NAMESPACE),
                         no_restart=False)
            sender.send_messages([rb.Message(body, partition_key=key_for(partition))
                                  for body in bodies[b * PER_BATCH:(b + 1) * PER_BATCH]])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lag = ray.get(handle.replica_state.remote(), timeout=10)["lag"]
        if lag.get(follower) == 0 or lag.get(str(follower)) == 0:
            break
        nudge = f"nudge-{len(bodies)}"
        with ns.get_queue_sender("q") as sender:
            sender.send_messages(rb.Message(nudge, partition_key=key_for(partition)))
        bodies.append(nudge)
        time.sleep(0.3)
    out["restarted_follower_in_sync_s"] = round(30 - (deadline - time.monotonic()), 2)
    out["stores_equal_after_restart"] = digests_agree("rep", partition)
    return bodies


def scenario(root: Path, with_disk_loss: bool) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    labelled = add_labelled(cluster, root)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=RAY_NAMESPACE, logging_level="ERROR")
    out: dict[str, Any] = {}
    try:
        try:
            rb.start("toomany", sku="premium", partitions=1, replicas=5, data_dir=str(root / "toomany"))
            out["refused"] = None
        except InvalidOperationError as exc:
            out["refused"] = str(exc)
        ns = rb.start("rep", sku="premium", partitions=PARTITIONS, replicas=REPLICAS, data_dir=str(root / "rep"),
                      gateways=2)
        ns.create_queue("q", lock_duration=__import__("datetime").timedelta(minutes=5))
        gateway = ray.get_actor("rep.gateway.0", namespace=RAY_NAMESPACE)
        table = ray.get(gateway.call.remote("routing_table"), timeout=60)
        leader_nodes = ray.get([h.node.remote() for h in table["handles"]], timeout=60)
        out["leader_nodes"] = leader_nodes
        worker_ids = {w.node_id: w for w in workers}  # unlabelled: their replicas are made again elsewhere
        victim_partition = next(k for k, node in enumerate(leader_nodes) if node in worker_ids)
        victim = worker_ids[leader_nodes[victim_partition]]
        key = key_for(victim_partition)
        sent: list[str] = []
        with ns.get_queue_sender("q") as sender:
            for b in range(BATCHES):
                bodies = [f"b{b}-{i}" for i in range(PER_BATCH)]
                keyed = b % 2 == 0
                sender.send_messages([rb.Message(body, partition_key=key if keyed else None) for body in bodies])
                sent += bodies
        out["states_before"] = replica_states("rep")
        receiver = ns.get_queue_receiver("q", partitions=[victim_partition])
        held = receiver.receive_messages(HELD, max_wait_time=10)
        out["held"] = len(held)
        out["held_partitions"] = sorted({m.partition_index for m in held})
        cluster.remove_node(victim)
        began = time.monotonic()
        with ns.get_queue_sender("q") as sender:
            sender.send_messages([rb.Message(f"after-{i}", partition_key=key) for i in range(PER_BATCH)])
        out["keyed_send_after_loss_s"] = round(time.monotonic() - began, 2)
        sent += [f"after-{i}" for i in range(PER_BATCH)]
        repairing = time.monotonic()
        repaired = [wait_for_repair("rep", k) for k in range(PARTITIONS)]
        out["repaired_s"] = None if None in repaired else round(time.monotonic() - repairing, 2)
        sent += fence_a_frozen_leader(ns, victim_partition, out)
        sent += restart_a_follower(ns, victim_partition, out)
        if with_disk_loss:
            lose_a_disk(cluster, labelled, ns, root, out)
        settled = {"completed": 0, "lock_lost": 0}
        for message in held:
            try:
                receiver.complete_message(message)
                settled["completed"] += 1
            except MessageLockLostError:
                settled["lock_lost"] += 1
        receiver.close()
        out["held_settled"] = settled
        completed = [m.body.decode() for m in held] if settled["completed"] == len(held) else []
        got: list[str] = []
        with ns.get_queue_receiver("q") as rest:
            while True:
                batch = rest.receive_messages(100, max_wait_time=5)
                if not batch:
                    break
                for message in batch:
                    rest.complete_message(message)
                got += [m.body.decode() for m in batch]
        received = completed + got
        out["expected"] = len(sent)
        out["received"] = len(received)
        out["distinct"] = len(set(received))
        out["missing"] = sorted(set(sent) - set(received))[:10]
        out["victim_partition"] = victim_partition
        out["victim_node"] = victim.node_id
        out["states_after"] = states = replica_states("rep")
        out["status"] = status_document(ns)
        leaders = [s for r in range(REPLICAS) if isinstance(s := states[f"{victim_partition}.{r}"], dict)
                   and s["leading"] is not None]
        out["new_leader_node"] = leaders[0]["node"] if leaders else None
        out["new_epoch"] = leaders[0]["leading"] if leaders else None
        rb.stop("rep")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


if __name__ == "__main__":
    try:
        result = scenario(Path(sys.argv[1]), with_disk_loss="disk" in sys.argv[2:])
    except Exception as exc:  # noqa: BLE001 - reported to the test as JSON
        import traceback
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
