"""The node-loss scenario on a 3-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

The head has no store label, nor has the worker `plain`; the worker `disk-b` is labelled and keeps
its stores in a directory of its own. A premium namespace of 6 partitions spreads them two per
node, and its 3 gateways one per node. Node `disk-b` is removed while messages are on it; for more
than a minute after that, the sync client, the async client and the Spark sink's sender keep
sending unkeyed batches. Then `disk-b` is added back with the same label and directory, and every
message is received. Last, node `plain` is removed: its partitions, placed by node id, move to a
node that is alive, and keyed sends to them resume.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
import ray_broker.aio as rba
from actors.handles import find_actor
from ray_broker.config import NODE_DATA_DIR_ENV, STORE_LABEL
from ray_broker.routing import partition_for_key
from spark_bridge.entity import Entity
from spark_bridge.sending import send_spread
from tests.cluster.scenario import interruptible
from tests.moved_in_doubt import MovedInDoubtLog

PARTITIONS = 6
GATEWAYS = 3
PER_PARTITION = 10
BATCHES_AFTER_LOSS = 100
"""Unkeyed batches the sync client sends after the loss, one every `PACE_S`."""
PER_BATCH = 20
PACE_S = 0.65
ASYNC_EVERY = 5
"""The async client sends a batch after every this many of the sync client's."""
SINK_EVERY = 25
"""The Spark sink's sender sends a batch after every this many of the sync client's."""


def worker(cluster: Cluster, root: Path, label: str | None) -> Any:
    if label is None:
        return cluster.add_node(num_cpus=1)
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


def tagged(body: str, **fields: Any) -> rb.Message:
    """A message whose id is its body (copies are counted by id)."""
    return rb.Message(body, message_id=body, **fields)


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"


def send_after_loss(ns: rb.Namespace, sender: rb.Sender) -> dict[str, Any]:
    """Unkeyed batches from the sync client, the async client and the Spark sink's sender, paced
    over more than a minute; what was sent and every exception met."""
    loop = asyncio.new_event_loop()
    aio_ns = rba.Namespace(ns.config)
    aio_sender = aio_ns.get_queue_sender("q")
    entity = Entity("q", None, "queue", tuple(range(PARTITIONS)))
    sent = {"sync": 0, "async": 0, "sink": 0}
    seconds = {"sync": 0.0, "async": 0.0, "sink": 0.0}
    failures: list[str] = []
    began = time.monotonic()
    for j in range(BATCHES_AFTER_LOSS):
        at = time.monotonic()
        try:
            sender.send_messages([tagged(f"after-{j}-{i}") for i in range(PER_BATCH)], timeout=30)
            sent["sync"] += PER_BATCH
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            failures.append(_failure(exc))
        seconds["sync"] += time.monotonic() - at
        if j % ASYNC_EVERY == 0:
            at = time.monotonic()
            try:
                loop.run_until_complete(aio_sender.send_messages(
                    [tagged(f"async-{j}-{i}") for i in range(PER_BATCH)], timeout=30))
                sent["async"] += PER_BATCH
            except Exception as exc:  # noqa: BLE001
                failures.append(_failure(exc))
            seconds["async"] += time.monotonic() - at
        if j % SINK_EVERY == 0:
            at = time.monotonic()
            try:
                sent["sink"] += send_spread(ns, entity, [tagged(f"sink-{j}-{i}").to_envelope()
                                                         for i in range(PER_BATCH)])
            except Exception as exc:  # noqa: BLE001
                failures.append(_failure(exc))
            seconds["sink"] += time.monotonic() - at
        time.sleep(max(began + (j + 1) * PACE_S - time.monotonic(), 0.0))
    loop.run_until_complete(aio_sender.close())
    loop.run_until_complete(aio_ns.close())
    loop.close()
    return {"sent_after_loss": sent, "failures_after_loss": failures,
            "seconds_per_client": {client: round(t, 1) for client, t in seconds.items()},
            "seconds_sending": round(time.monotonic() - began, 1)}


def lose_plain(cluster: Cluster, ns: rb.Namespace, plain: Any, keys: dict[int, str]) -> dict[str, Any]:
    """Remove node `plain`; how long until a keyed send reaches each of its partitions, and where they run."""
    on_plain = [k for k, home in enumerate(ns.config.placement or ()) if home == f"node:{plain.node_id}"]
    cluster.remove_node(plain, allow_graceful=False)
    deadline = time.monotonic() + 90  # until Ray saw the node die and its partitions' processes ended
    while any(n["NodeID"] == plain.node_id and n["Alive"] for n in ray.nodes()) or \
            any(v == plain.node_id for v in _nodes_now(ns, on_plain).values()):
        if time.monotonic() > deadline:
            raise TimeoutError("the removed node's partitions kept answering")
        time.sleep(0.5)
    lost = time.monotonic()
    sender = ns.get_queue_sender("q")
    resumed: dict[int, float] = {}
    failures: list[str] = []
    deadline = lost + 150
    while len(resumed) < len(on_plain) and time.monotonic() < deadline:
        for k in on_plain:
            if k in resumed:
                continue
            try:
                sender.send_messages(rb.Message(f"keyed-after-plain-{k}", partition_key=keys[k]), timeout=10)
                resumed[k] = round(time.monotonic() - lost, 1)
            except rb.errors.PartitionUnavailableError:
                pass
            except Exception as exc:  # noqa: BLE001 - any other error is the finding
                failures.append(_failure(exc))
    sender.close()
    return {"on_plain": on_plain, "plain_node": plain.node_id, "resumed_after": resumed,
            "plain_failures": failures, "nodes_after_plain": _nodes_now(ns, on_plain),
            "alive_after_plain": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])}


def main(root: Path) -> dict[str, object]:
    """Run the scenario; what it observed."""
    with MovedInDoubtLog() as doubts:
        return observe(root, doubts)


def observe(root: Path, doubts: MovedInDoubtLog) -> dict[str, object]:
    """The scenario, the batches the clients moved on in doubt collected by `doubts`."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    nodes = {"plain": worker(cluster, root, None), "disk-b": worker(cluster, root, "disk-b")}
    ray.init(address=cluster.address, namespace="ray_broker", log_to_driver=False, configure_logging=False)
    result: dict[str, object] = {}
    try:
        ns = rb.start("nodeloss", sku="premium", partitions=PARTITIONS, data_dir=str(root / "head"),
                      durability="normal", gateways=GATEWAYS)
        result["alive_nodes"] = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        result["gateway_nodes"] = [ray.get(find_actor(ns.config.gateway_name(i)).node.remote(), timeout=60)
                                   for i in range(GATEWAYS)]
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
            sender.send_messages([tagged(f"{key}-{j}", partition_key=key) for j in range(PER_PARTITION)])
        sender.send_messages([tagged(f"unkeyed-{j}") for j in range(30)])
        result["stores_on_b"] = sorted(p.name for p in (root / "disk-b" / "nodeloss").glob("partition-*.sqlite3"))

        result["nodes_before"] = partition_nodes(ns, list(range(PARTITIONS)))
        result["node_ids"] = node_ids
        cluster.remove_node(nodes["disk-b"], allow_graceful=False)
        gone = node_ids["disk-b"]
        started = time.monotonic()
        result.update(send_after_loss(ns, sender))
        deadline = time.monotonic() + 60  # until Ray saw the node die and its partitions' processes ended
        while any(n["NodeID"] == gone and n["Alive"] for n in ray.nodes()) or \
                any(v == gone for v in _nodes_now(ns, on_b).values()):
            if time.monotonic() > deadline:
                raise TimeoutError("the removed node's partitions kept answering")
            time.sleep(0.5)
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
        sent_after_loss: dict[str, int] = result["sent_after_loss"]  # type: ignore[assignment]
        expected = PARTITIONS * PER_PARTITION + 30 + sum(sent_after_loss.values())
        received: list[str] = []
        deadline = time.monotonic() + 90  # a client passes over partitions that stayed away for a while
        with ns.get_queue_receiver("q", max_wait_time=5) as receiver:
            while len(received) < expected and time.monotonic() < deadline:
                batch = receiver.receive_messages(100, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                received.extend(str(m.message_id) for m in batch)
        result["received"] = len(received)
        result["distinct"] = len(set(received))
        result["expected"] = expected
        result["twice"] = sorted(i for i, n in Counter(received).items() if n > 1)
        result["moved_in_doubt"] = sorted(doubts.message_ids)
        result.update(lose_plain(cluster, ns, nodes["plain"], keys))
        rb.stop("nodeloss", delete_data=True)
    except Exception as exc:  # noqa: BLE001 - reported with what was observed so far
        result["error"] = _failure(exc)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return result


if __name__ == "__main__":
    interruptible()
    print(json.dumps(main(Path(sys.argv[1]))))
