"""The node-loss scenario on a 3-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

The head has no store label, nor has the worker `plain`, which keeps its stores in a directory of
its own (a node-local disk); the worker `disk-b` is labelled and keeps its stores in a directory of
its own too. A premium namespace of 6 partitions spreads them two per node, and its 3 gateways one
per node. Node `disk-b` is removed while messages are on it; for more than a minute after that,
the sync client, the async client and the Spark sink's sender keep sending unkeyed batches. Then
`disk-b` is added back with the same label and directory, and every message is received. Last,
node `plain` is removed while its partitions hold messages: its partitions, placed by node id,
stay down (keyed sends to them fail, at once and after 50 unkeyed batches, and no store of theirs
appears on another node) until `plain` comes back with its directory under a new node id, where
they resume with every message they held.
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
from ray_broker.routing.health import AWAY_BACKOFF
from spark_bridge.entity import Entity
from spark_bridge.batch_sending import send_spread
from tests.cluster.scenario import interruptible
from tests.moved_in_doubt import MovedInDoubtLog

PARTITIONS = 6
GATEWAYS = 3
PER_PARTITION = 10
PLAIN_UNKEYED_BATCHES = 50
"""Unkeyed batches sent while node `plain` is down, between two keyed sends to its partitions."""
BATCHES_AFTER_LOSS = 100
"""Unkeyed batches the sync client sends after the loss, one every `PACE_S`."""
PER_BATCH = 20
PACE_S = 0.65
ASYNC_EVERY = 5
"""The async client sends a batch after every this many of the sync client's."""
SINK_EVERY = 25
"""The Spark sink's sender sends a batch after every this many of the sync client's."""


def worker(cluster: Cluster, root: Path, name: str, label: str | None = None) -> Any:
    """A node of one CPU that keeps its stores in `root/name` (a disk of its own), labelled `label`."""
    env = {NODE_DATA_DIR_ENV: str(root / name)}
    if label is None:
        return cluster.add_node(num_cpus=1, env_vars=env)
    return cluster.add_node(num_cpus=1, labels={STORE_LABEL: label}, env_vars=env)


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


def _keyed_send(sender: rb.Sender, key: str, body: str) -> str:
    """Send one message keyed `key` (10 s timeout): "stored", or the error and how long it took."""
    began = time.monotonic()
    try:
        sender.send_messages(tagged(body, partition_key=key), timeout=10)
        return "stored"
    except Exception as exc:  # noqa: BLE001 - which error, and when, is the finding
        return f"{type(exc).__name__} after {time.monotonic() - began:.1f}s"


def _stores_of(root: Path, indexes: list[int]) -> dict[str, list[str]]:
    """The data directories under `root` that hold a store of one of these partitions."""
    names = {f"partition-{k:03d}.sqlite3" for k in indexes}
    return {d.name: sorted(p.name for p in d.glob("nodeloss/partition-*.sqlite3") if p.name in names)
            for d in sorted(root.iterdir()) if d.is_dir()}


def lose_plain(cluster: Cluster, root: Path, ns: rb.Namespace, plain: Any, keys: dict[int, str]) -> dict[str, Any]:
    """Remove node `plain` while its partitions hold messages; keyed sends to them at once and after
    unkeyed batches, the stores while it is down, its return under a new id, and every message."""
    on_plain = [k for k, home in enumerate(ns.config.placement or ()) if home == f"node:{plain.node_id}"]
    sender = ns.get_queue_sender("q")
    held = [f"held-{k}-{j}" for k in on_plain for j in range(PER_PARTITION)]
    for k in on_plain:
        sender.send_messages([tagged(f"held-{k}-{j}", partition_key=keys[k]) for j in range(PER_PARTITION)])
    cluster.remove_node(plain, allow_graceful=False)
    deadline = time.monotonic() + 90  # until Ray saw the node die and its partitions' processes ended
    while any(n["NodeID"] == plain.node_id and n["Alive"] for n in ray.nodes()) or \
            any(v == plain.node_id for v in _nodes_now(ns, on_plain).values()):
        if time.monotonic() > deadline:
            raise TimeoutError("the removed node's partitions kept answering")
        time.sleep(0.5)
    result: dict[str, Any] = {"on_plain": on_plain, "plain_node": plain.node_id}
    result["plain_keyed_at_once"] = _keyed_send(sender, keys[on_plain[0]], "keyed-at-once")
    unkeyed: list[str] = []
    failures: list[str] = []
    for j in range(PLAIN_UNKEYED_BATCHES):
        batch = [f"plain-unkeyed-{j}-{i}" for i in range(PER_BATCH)]
        try:
            sender.send_messages([tagged(body) for body in batch], timeout=30)
            unkeyed.extend(batch)
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            failures.append(_failure(exc))
    result["plain_unkeyed_failures"] = failures
    result["plain_keyed_after_unkeyed"] = _keyed_send(sender, keys[on_plain[0]], "keyed-after-unkeyed")
    result["plain_stores_while_down"] = _stores_of(root, on_plain)

    returned = worker(cluster, root, "plain")
    back = time.monotonic()
    resumed: dict[int, float] = {}
    deadline = back + 120
    while len(resumed) < len(on_plain) and time.monotonic() < deadline:
        for k in on_plain:
            if k not in resumed and _keyed_send(sender, keys[k], f"keyed-back-{k}") == "stored":
                resumed[k] = round(time.monotonic() - back, 1)
    sender.close()
    result["plain_resumed_after"] = resumed
    result["plain_nodes_after_return"] = _nodes_now(ns, on_plain)
    result["plain_returned_node"] = returned.node_id
    result["plain_stores_after_return"] = _stores_of(root, on_plain)
    expected = set(held) | set(unkeyed) | {f"keyed-back-{k}" for k in resumed}
    received: list[str] = []
    deadline = time.monotonic() + AWAY_BACKOFF.maximum + 30
    with ns.get_queue_receiver("q", max_wait_time=5) as receiver:
        while not expected <= set(received) and time.monotonic() < deadline:
            batch = receiver.receive_messages(100, max_wait_time=5)
            for message in batch:
                receiver.complete_message(message)
            received.extend(str(m.message_id) for m in batch)
    result["plain_missing"] = sorted(expected - set(received))
    result["plain_unexpected"] = sorted(set(received) - expected)
    result["plain_twice"] = sorted(i for i, n in Counter(received).items() if n > 1)
    return result


def main(root: Path) -> dict[str, object]:
    """Run the scenario; what it observed."""
    with MovedInDoubtLog() as doubts:
        return observe(root, doubts)


def observe(root: Path, doubts: MovedInDoubtLog) -> dict[str, object]:
    """The scenario, the batches the clients moved on in doubt collected by `doubts`."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    nodes = {"plain": worker(cluster, root, "plain"), "disk-b": worker(cluster, root, "disk-b", "disk-b")}
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

        nodes["disk-b"] = worker(cluster, root, "disk-b", "disk-b")
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
        # a client passes over a partition that stayed away for a while, up to the longest hold
        deadline = time.monotonic() + AWAY_BACKOFF.maximum + 30
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
        result.update(lose_plain(cluster, root, ns, nodes["plain"], keys))
        result["plain_moved_in_doubt"] = sorted(set(doubts.message_ids) - set(result["moved_in_doubt"]))
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
