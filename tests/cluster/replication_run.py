"""The replication scenario on a 4-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

A premium namespace of 4 partitions with 3 replicas each (a majority of 2 holds every change)
takes keyed and unkeyed batches, and a receiver locks some messages without settling them. Then
the node running the leader of one partition is removed (at times with a gateway on it: what is
read after the loss is read from the replicas). Keyed sends to that partition go on
(after the failover, within their timeout), the locked messages are completed after the failover
(or found lost and delivered again), and every message sent is received exactly once.
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
from ray_broker.errors import InvalidOperationError, MessageLockLostError
from ray_broker.routing import partition_for_key

PARTITIONS = 4
REPLICAS = 3
BATCHES = 12
PER_BATCH = 10
HELD = 5


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


def scenario(root: Path) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=RAY_NAMESPACE, logging_level="ERROR")
    out: dict[str, Any] = {}
    try:
        try:
            rb.start("toomany", sku="premium", partitions=1, replicas=5, data_dir=str(root / "toomany"))
            out["refused"] = None
        except InvalidOperationError as exc:
            out["refused"] = str(exc)
        ns = rb.start("rep", sku="premium", partitions=PARTITIONS, replicas=REPLICAS, data_dir=str(root / "rep"))
        ns.create_queue("q", lock_duration=__import__("datetime").timedelta(minutes=5))
        gateway = ray.get_actor("rep.gateway.0", namespace=RAY_NAMESPACE)
        table = ray.get(gateway.call.remote("routing_table"), timeout=60)
        leader_nodes = ray.get([h.node.remote() for h in table["handles"]], timeout=60)
        out["leader_nodes"] = leader_nodes
        worker_ids = {w.node_id: w for w in workers}
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
        result = scenario(Path(sys.argv[1]))
    except Exception as exc:  # noqa: BLE001 - reported to the test as JSON
        import traceback
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
