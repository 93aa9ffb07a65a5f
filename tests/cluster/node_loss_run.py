"""The node-loss scenario on a 3-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

The head has no store label; the two workers are labelled `disk-a` and `disk-b` and each keeps
its stores in a directory of its own. A premium namespace of 6 partitions spreads them two per
node. Node `disk-b` is removed while messages are on it, then added back with the same label and
directory.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from actors.handles import find_actor
from ray_broker.config import NODE_DATA_DIR_ENV, STORE_LABEL
from ray_broker.routing import partition_for_key

PARTITIONS = 6
PER_PARTITION = 10
UNKEYED_WHILE_DOWN = 20


def worker(cluster: Cluster, root: Path, label: str) -> object:
    return cluster.add_node(num_cpus=1, labels={STORE_LABEL: label}, env_vars={NODE_DATA_DIR_ENV: str(root / label)})


def partition_nodes(ns: rb.Namespace, indexes: list[int]) -> dict[int, str]:
    return {k: ray.get(find_actor(ns.config.partition_name(k)).node.remote(), timeout=60) for k in indexes}


def _nodes_now(ns: rb.Namespace, indexes: list[int]) -> dict[int, str]:
    """Where partitions run now, or why that cannot be told (a partition that is down does not answer)."""
    found = {}
    for k in indexes:
        try:
            found[k] = ray.get(find_actor(ns.config.partition_name(k)).node.remote(), timeout=3)
        except Exception as exc:  # noqa: BLE001 - recorded: a partition that is down does not answer
            found[k] = type(exc).__name__
    return found


def main(root: Path) -> dict[str, object]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    nodes = {"disk-a": worker(cluster, root, "disk-a"), "disk-b": worker(cluster, root, "disk-b")}
    ray.init(address=cluster.address, namespace="ray_broker", log_to_driver=False, configure_logging=False)
    result: dict[str, object] = {}
    try:
        ns = rb.start("nodeloss", sku="premium", partitions=PARTITIONS, data_dir=str(root / "head"),
                      durability="normal")
        result["placement"] = list(ns.config.placement or ())
        result["labels"] = [n["Labels"].get(STORE_LABEL) for n in ray.nodes() if n["Alive"]]
        on_b = [k for k, home in enumerate(ns.config.placement or ()) if home == "label:disk-b"]
        node_ids = {label: node.node_id for label, node in nodes.items()}
        result["placed_on_b"] = sorted(k for k, n in partition_nodes(ns, on_b).items() if n == node_ids["disk-b"])
        ns.create_queue("q", enable_partitioning=True)
        keys = {k: next(f"key-{i}" for i in range(10_000) if partition_for_key(f"key-{i}", PARTITIONS) == k)
                for k in range(PARTITIONS)}
        sender = ns.get_queue_sender("q")
        for k, key in keys.items():
            sender.send_messages([rb.Message(f"{key}-{j}", partition_key=key) for j in range(PER_PARTITION)])
        sender.send_messages([rb.Message(f"unkeyed-{j}") for j in range(30)])
        result["stores_on_b"] = sorted(p.name for p in (root / "disk-b" / "nodeloss").glob("partition-*.sqlite3"))

        result["nodes_before"] = partition_nodes(ns, list(range(PARTITIONS)))
        result["node_ids"] = {label: node.node_id for label, node in nodes.items()}
        cluster.remove_node(nodes["disk-b"], allow_graceful=False)
        gone = node_ids["disk-b"]
        deadline = time.monotonic() + 60  # until Ray saw the node die and its partitions' processes ended
        while any(n["NodeID"] == gone and n["Alive"] for n in ray.nodes()) or \
                any(v == gone for v in _nodes_now(ns, on_b).values()):
            if time.monotonic() > deadline:
                raise TimeoutError("the removed node's partitions kept answering")
            time.sleep(0.5)
        started = time.monotonic()
        unkeyed_errors = 0
        for j in range(UNKEYED_WHILE_DOWN):
            try:
                sender.send_messages(rb.Message(f"during-{j}"), timeout=30)
            except rb.errors.ServiceBusError:
                unkeyed_errors += 1
        result["unkeyed_errors_while_down"] = unkeyed_errors
        key_on_b = keys[on_b[0]]
        began = time.monotonic()
        try:
            sender.send_messages(rb.Message("keyed-while-down", partition_key=key_on_b), timeout=5)
            result["keyed_while_down"] = "stored"
        except rb.errors.PartitionUnavailableError as exc:
            result["keyed_while_down"] = f"PartitionUnavailableError after {time.monotonic() - began:.1f}s"
            result["keyed_error_partition"] = exc.partition
        result["nodes_while_down"] = _nodes_now(ns, on_b)
        runtime = ns.get_queue_runtime_properties("q")
        result["availability_while_down"] = runtime.availability
        result["down_partitions"] = sorted(p.index for p in runtime.partitions if not p.available)
        result["seconds_down"] = round(time.monotonic() - started, 1)

        nodes["disk-b"] = worker(cluster, root, "disk-b")
        deadline = time.monotonic() + 120
        while ns.get_queue_runtime_properties("q").availability != "Available":
            if time.monotonic() > deadline:
                raise TimeoutError("the partitions of disk-b did not come back")
            time.sleep(1)
        result["back_on_new_node"] = sorted(
            k for k, n in partition_nodes(ns, on_b).items() if n == nodes["disk-b"].node_id)
        expected = PARTITIONS * PER_PARTITION + 30 + UNKEYED_WHILE_DOWN - unkeyed_errors
        received: list[str] = []
        deadline = time.monotonic() + 90  # a client passes over partitions that stayed away for a while
        with ns.get_queue_receiver("q", max_wait_time=5) as receiver:
            while len(received) < expected and time.monotonic() < deadline:
                batch = receiver.receive_messages(100, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                received.extend(m.body.decode() for m in batch)
        result["received"] = len(received)
        result["distinct"] = len(set(received))
        result["expected"] = expected
        rb.stop("nodeloss", delete_data=True)
    except Exception as exc:  # noqa: BLE001 - reported with what was observed so far
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        ray.shutdown()
        cluster.shutdown()
    return result


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
