"""The replication scenario on a 4-node `ray.cluster_utils.Cluster`, run as its own process (a test
process is already attached to the shared Ray); prints one JSON line of what it observed.

Two workers have no store label; the third is labelled `DISK` and keeps its stores in a directory
of its own. A premium namespace of 8 partitions with 3 replicas each (a majority of 2 holds every
change; each node leads two partitions) and 2 gateways takes keyed and unkeyed batches, and a
receiver locks some messages without settling them. Then, one after another:
- the unlabelled worker running the most leaders is removed (at times with a gateway on it, never
  the deciding one, which runs on the head: what is read after the loss is read from the
  replicas) while four senders and four receivers are at work (`replicated_load`: keyed sends
  into a transaction pipeline, unkeyed sends, a session queue, a topic with three
  subscriptions); keyed sends to its partitions go on after the failover (each
  timed), runtime properties say `Available` again, its replicas are made again on the node left
  free, and every message the load had acknowledged is received;
- the leader of another partition is frozen (SIGSTOP) while a keyed send goes to it, and thawed;
- a follower of a third partition is killed (Ray restarts it) between keyed sends;
- the labelled worker is removed, its directory deleted, and a worker with its label added back.
Last, the locked messages are completed, and every message sent must be received exactly once.

Beside it runs a namespace of two replicas that go on with one (`min_in_sync=1`): the same node
loss takes the leader of some of its partitions and the follower of others; a keyed send to each of
its partitions right after must be acknowledged (the follower, in sync, takes the lead; the leader
drops its lost follower from the in-sync set and acknowledges alone), and every message it
acknowledged is received.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

import ray_broker as rb
from ray_broker.cli.namespaces import status_document
from ray_broker.config import NODE_DATA_DIR_ENV, RAY_NAMESPACE, STORE_LABEL
from ray_broker.errors import InvalidOperationError, MessageLockLostError
from ray_broker.replies import ReplicaState, RoutingTable
from ray_broker.routing import partition_for_key

from .replicated_load import OUTPUT, SESSIONS, STAGE, SUBSCRIPTIONS, TOPIC, Load, create_entities
from .scenario import interruptible

PARTITIONS = 8
REPLICAS = 3
BATCHES = 12
PER_BATCH = 10
HELD = 5
DISK = "disk-c"
LOAD_BEFORE_LOSS_S = 4.0
LOAD_AFTER_LOSS_S = 8.0


TWO_PARTITIONS = 4
"""Partitions of the namespace of two replicas (`min_in_sync=1`)."""


def key_for(partition: int, partitions: int = PARTITIONS) -> str:
    return next(f"key-{i}" for i in range(10_000) if partition_for_key(f"key-{i}", partitions) == partition)


def two_replicas_before(two: rb.Namespace) -> list[str]:
    """Keyed messages to every partition of the namespace of two replicas: the bodies sent."""
    two.create_queue("q")
    bodies = []
    with two.get_queue_sender("q") as sender:
        for k in range(TWO_PARTITIONS):
            batch = [f"two-{k}-{i}" for i in range(PER_BATCH)]
            sender.send_messages([rb.Message(b, partition_key=key_for(k, TWO_PARTITIONS)) for b in batch])
            bodies += batch
    return bodies


def two_replicas_roles(victim_node: str) -> dict[str, list[int]]:
    """The partitions of the namespace of two replicas whose leader, and whose follower, runs on `victim_node`."""
    roles: dict[str, list[int]] = {"leader": [], "follower": []}
    for k in range(TWO_PARTITIONS):
        for r in range(2):
            handle = ray.get_actor(f"two.partition.{k}.{r}", namespace=RAY_NAMESPACE)
            if ray.get(handle.node.remote(), timeout=30) == victim_node:
                roles["leader" if ray.get(handle.leads.remote(), timeout=30) is not None else "follower"].append(k)
    return roles


def two_replicas_lead_on(two: rb.Namespace, victim_node: str, sent: list[str], out: dict[str, Any]) -> None:
    """Have `victim_node` lead a partition of the namespace of two replicas and follow another:
    when it holds only one role, freeze (SIGSTOP) the leader of one of its partitions while keyed
    sends go to that partition, so that its follower, in sync, takes the lead; then thaw it and wait
    until it is back in the in-sync set (its new leader's, which the deciding gateway reads every
    check)."""
    roles = two_replicas_roles(victim_node)
    rich = "follower" if not roles["leader"] else "leader" if not roles["follower"] else None
    if rich is not None and len(roles[rich]) > 1:
        k = roles[rich][0]
        leader = next(r for r in range(2) if ray.get(ray.get_actor(f"two.partition.{k}.{r}", namespace=RAY_NAMESPACE)
                                                      .leads.remote(), timeout=30) is not None)
        pid = ray.get(ray.get_actor(f"two.partition.{k}.{leader}", namespace=RAY_NAMESPACE).pid.remote(), timeout=10)
        time.sleep(1.5)  # a follower that caught up is in the deciding gateway's set after its next check
        os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        try:
            with two.get_queue_sender("q") as sender:
                for i in range(PER_BATCH):
                    sender.send_messages(rb.Message(f"two-frozen-{i}", partition_key=key_for(k, TWO_PARTITIONS)),
                                         timeout=30)
                    sent.append(f"two-frozen-{i}")
        finally:
            os.kill(pid, signal.SIGCONT)
        out["two_keyed_while_frozen_s"] = round(time.monotonic() - began, 2)
        new_leader = ray.get_actor(f"two.partition.{k}.{1 - leader}", namespace=RAY_NAMESPACE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            leading, in_sync = ray.get(new_leader.in_sync_state.remote(), timeout=10)
            if leading is not None and in_sync is not None and len(in_sync[2]) == 2:
                break
            time.sleep(0.3)
        out["two_back_in_sync_s"] = round(time.monotonic() - began, 2) if time.monotonic() < deadline else None
        time.sleep(1.5)  # the deciding gateway's next check reads the set
        roles = two_replicas_roles(victim_node)
    out["two_on_victim"] = roles


def two_replicas_after(two: rb.Namespace, sent: list[str], out: dict[str, Any]) -> None:
    """Right after the loss: a keyed send to each partition of the namespace of two replicas (the
    seconds each took to be acknowledged; None: it failed), then every message received."""
    def probe(k: int) -> float | None:
        began = time.monotonic()
        try:
            with two.get_queue_sender("q") as sender:
                sender.send_messages(rb.Message(f"two-after-{k}", partition_key=key_for(k, TWO_PARTITIONS)),
                                     timeout=30)
        except Exception as exc:  # noqa: BLE001 - reported as None
            out["two_send_errors"].append(f"{k}: {type(exc).__name__}: {exc}"[:300])
            return None
        sent.append(f"two-after-{k}")
        return round(time.monotonic() - began, 2)

    out["two_send_errors"] = []
    with ThreadPoolExecutor(TWO_PARTITIONS) as pool:
        out["two_keyed_after_loss_s"] = dict(zip(range(TWO_PARTITIONS), pool.map(probe, range(TWO_PARTITIONS))))
    got: list[str] = []
    with two.get_queue_receiver("q", receive_mode="receive_and_delete") as receiver:
        while batch := receiver.receive_messages(100, max_wait_time=5):
            got += [m.body.decode() for m in batch]
    out["two_missing"] = sorted(set(sent) - set(got))
    out["two_received"], out["two_distinct"], out["two_expected"] = len(got), len(set(got)), len(sent)


def ask_replicas(name: str, partition: int, method: str, timeout: float = 5.0) -> list[Any]:
    """Each replica of `partition` asked `method` (by name, at once): its answer, or the name of
    the error in its place (a replica on a lost node does not answer)."""
    refs: list[Any] = []
    for r in range(REPLICAS):
        try:
            refs.append(getattr(ray.get_actor(f"{name}.partition.{partition}.{r}", namespace=RAY_NAMESPACE),
                                method).remote())
        except Exception as exc:  # noqa: BLE001 - not (yet) made again
            refs.append(exc)
    answers: list[Any] = []
    for ref in refs:
        try:
            answers.append(ref if isinstance(ref, Exception) else ray.get(ref, timeout=timeout))
        except Exception as exc:  # noqa: BLE001 - reported by name
            answers.append(exc)
    return [type(a).__name__ if isinstance(a, Exception) else a for a in answers]


def replica_states(name: str) -> dict[str, Any]:
    """Every replica's `replica_state` (or the name of the error it gave), by "partition.replica"."""
    return {f"{k}.{r}": state for k in range(PARTITIONS)
            for r, state in enumerate(ask_replicas(name, k, "replica_state"))}


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
    while time.monotonic() - began < 180:
        if all(wait_for_repair("rep", k, give_up_s=0.5) is not None for k in range(PARTITIONS)):
            out["disk_back_in_sync_s"] = round(time.monotonic() - began, 2)
            break
        time.sleep(0.3)
    out["stores_equal_after_disk_loss"] = all(digests_agree("rep", k) for k in range(PARTITIONS))
    if out["disk_back_in_sync_s"] is None:
        out["states_not_in_sync"] = replica_states("rep")


def digests_agree(name: str, partition: int, give_up_s: float = 20.0) -> bool:
    """Whether every replica of `partition` holds the same rows: their store digests, read once
    they stand at the same position (housekeeping may commit between two reads), are equal."""
    deadline = time.monotonic() + give_up_s
    while True:
        digests = ask_replicas(name, partition, "store_digest", timeout=60)
        positions = {d[0] for d in digests if not isinstance(d, str)}
        if len(positions) == 1 and not any(isinstance(d, str) for d in digests):
            return len({d[1] for d in digests}) == 1
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)


def wait_for_repair(name: str, partition: int, give_up_s: float = 90.0,
                    unrepaired: dict[str, Any] | None = None) -> float | None:
    """Seconds until every replica of `partition` answers and holds every change: none behind its
    leader, or (under load, where a follower the changes do not wait for is shipped to a little
    later) each at or past where the same leader stood at the look before. None: not within
    `give_up_s`; the replicas' last states are then kept in `unrepaired`, by partition."""
    began = time.monotonic()
    before: tuple[int, int, int] | None = None
    """The leader's replica number, epoch and position at the look before."""
    while True:
        answers = ask_replicas(name, partition, "replica_state")
        states = {r: ReplicaState.decode(a) for r, a in enumerate(answers) if isinstance(a, dict)}
        leaders = [(r, s) for r, s in states.items() if s.leading is not None]
        if len(states) == len(answers) and len(leaders) == 1:
            r, leader = leaders[0]
            lags = list((leader.lag or {}).values())
            if all(lag == 0 for lag in lags) or (
                    None not in lags and before is not None and before[:2] == (r, leader.leading)
                    and all(s.position >= before[2] for s in states.values())):
                return round(time.monotonic() - began, 2)
            before = (r, leader.leading, leader.position)
        else:
            before = None
        if time.monotonic() - began >= give_up_s:
            if unrepaired is not None:
                unrepaired[str(partition)] = answers
            return None
        time.sleep(0.3)


def keyed_sends_after(ns: rb.Namespace, partitions: list[int]) -> dict[int, float | None]:
    """Send one keyed message to each of `partitions` at once, right after their leaders' node is
    lost: the seconds each took to be acknowledged (None: it failed)."""
    def probe(k: int) -> float | None:
        began = time.monotonic()
        try:
            with ns.get_queue_sender("q") as sender:
                sender.send_messages(rb.Message(f"after-{k}", partition_key=key_for(k)))
        except Exception:  # noqa: BLE001 - reported as None
            return None
        return round(time.monotonic() - began, 2)

    with ThreadPoolExecutor(len(partitions)) as pool:
        return dict(zip(partitions, pool.map(probe, partitions)))


def elected_after(name: str, before: dict[int, int], since: float, give_up_s: float = 30.0) -> dict[int, float | None]:
    """Seconds from `since` until a replica of each partition of `before` leads a newer epoch than
    the one there (asked of the replicas every 0.1 s; None: not within `give_up_s`)."""
    partitions = list(before)
    took: dict[int, float | None] = {k: None for k in partitions}
    while time.monotonic() - since < give_up_s and None in took.values():
        for k in partitions:
            if took[k] is None and any(isinstance(e, int) and e > before[k]
                                       for e in ask_replicas(name, k, "leads", timeout=0.5)):
                took[k] = round(time.monotonic() - since, 2)
        time.sleep(0.1)
    return took


def available_again(ns: rb.Namespace, since: float, give_up_s: float = 60.0) -> float | None:
    """Seconds from `since` until the runtime properties of every entity of the load say
    `Available` (None: not within `give_up_s`)."""
    watcher = rb.connect(ns.name)  # a handle of its own: `ns` would first flush its receivers' settlements
    while time.monotonic() - since < give_up_s:
        try:
            states = [watcher.get_queue_runtime_properties(q).availability for q in (STAGE, OUTPUT, SESSIONS)]
            states += [watcher.get_subscription_runtime_properties(TOPIC, s).availability for s in SUBSCRIPTIONS]
        except Exception:  # noqa: BLE001 - asked again
            states = []
        if states and all(state == "Available" for state in states):
            return round(time.monotonic() - since, 2)
        time.sleep(0.3)
    return None


def leader_of(name: str, partition: int) -> tuple[int, Any]:
    """The replica leading `partition`, and its actor (asked of the replicas themselves)."""
    for r, epoch in enumerate(ask_replicas(name, partition, "leads", timeout=2)):
        if isinstance(epoch, int):
            return r, ray.get_actor(f"{name}.partition.{partition}.{r}", namespace=RAY_NAMESPACE)
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
        lag = ReplicaState.decode(ray.get(handle.replica_state.remote(), timeout=10)).lag or {}
        if lag.get(follower) == 0:
            break
        nudge = f"nudge-{len(bodies)}"
        with ns.get_queue_sender("q") as sender:
            sender.send_messages(rb.Message(nudge, partition_key=key_for(partition)))
        bodies.append(nudge)
        time.sleep(0.3)
    out["restarted_follower_in_sync_s"] = round(30 - (deadline - time.monotonic()), 2)
    out["stores_equal_after_restart"] = digests_agree("rep", partition)
    return bodies


def scenario(root: Path) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
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
        create_entities(ns)
        two = rb.start("two", sku="premium", partitions=TWO_PARTITIONS, replicas=2, min_in_sync=1,
                       data_dir=str(root / "two"))
        two_sent = two_replicas_before(two)
        out["two_decider_node"] = ray.get(ray.get_actor("two.gateway.0", namespace=RAY_NAMESPACE).node.remote(),
                                          timeout=60)
        gateway = ray.get_actor("rep.gateway.0", namespace=RAY_NAMESPACE)
        table = RoutingTable.decode(ray.get(gateway.call.remote("routing_table"), timeout=60))
        leader_nodes = ray.get([h.node.remote() for h in table.handles], timeout=60)
        out["leader_nodes"] = leader_nodes
        # the victim: the unlabelled worker leading the most partitions (its replicas are made again elsewhere)
        victim = max(workers, key=lambda w: leader_nodes.count(w.node_id))
        led = [k for k, node in enumerate(leader_nodes) if node == victim.node_id]
        out["victim_leads"] = led
        gateway_nodes = ray.get([ray.get_actor(f"rep.gateway.{g}", namespace=RAY_NAMESPACE).node.remote()
                                 for g in range(2)], timeout=60)
        out["gateways_lost"] = [g for g, node in enumerate(gateway_nodes) if node == victim.node_id]
        out["decider_on_head"] = gateway_nodes[0] == cluster.head_node.node_id
        victim_partition = led[0]
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
        two_replicas_lead_on(two, victim.node_id, two_sent, out)
        out["held"] = len(held)
        out["held_partitions"] = sorted({m.partition_index for m in held})
        load = Load(ns, [key_for(k) for k in range(PARTITIONS)])
        load.start()
        time.sleep(LOAD_BEFORE_LOSS_S)
        cluster.remove_node(victim)
        lost_at = time.monotonic()
        availability = ThreadPoolExecutor(1).submit(available_again, ns, lost_at)
        elections = ThreadPoolExecutor(1).submit(elected_after, "rep", {k: table.epochs[k] for k in led}, lost_at)
        out["keyed_send_after_loss_s"] = keyed_sends_after(ns, led)
        sent += [f"after-{k}" for k in led]
        two_replicas_after(two, two_sent, out)
        rb.stop("two")
        time.sleep(max(0.0, LOAD_AFTER_LOSS_S - (time.monotonic() - lost_at)))
        load.stop_sending()
        out["load_stopped_s"] = round(time.monotonic() - lost_at, 2)
        out["elected_after_s"] = elections.result()
        repairing = time.monotonic()
        out["unrepaired"] = {}
        repaired = [wait_for_repair("rep", k, unrepaired=out["unrepaired"]) for k in range(PARTITIONS)]
        out["repaired_s"] = None if None in repaired else round(time.monotonic() - repairing, 2)
        out["available_again_s"] = availability.result()
        out["load_drained_s"] = load.drain(give_up_s=90)
        out["load"] = load.tally.report()
        sent += fence_a_frozen_leader(ns, victim_partition, out)
        sent += restart_a_follower(ns, victim_partition, out)
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
        # the last completions may still be on their way to the follower outside the majority
        out["in_sync_at_end"] = all(wait_for_repair("rep", k, give_up_s=30) is not None for k in range(PARTITIONS))
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
    interruptible()
    try:
        result = scenario(Path(sys.argv[1]))
    except Exception as exc:  # noqa: BLE001 - reported to the test as JSON
        import traceback
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
