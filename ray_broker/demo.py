"""`ray-broker demo`: a partitioned queue under load, a partition killed mid-way, nothing lost.

The demo starts a namespace on an embedded local Ray with durable stores in a fresh temporary
directory, sends messages (keyed, unkeyed and session messages) with a progress bar, shows how
they spread over the 16 partitions, SIGKILLs one partition's process while unkeyed sends carry on
and a keyed send waits for its partition, then receives and completes everything and checks that
every message came back, keyed messages in order from their own partition and sessions in order.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from tqdm import tqdm

import ray_broker as rb

from .cli.quiet import quiet_ray
from .config import RAY_NAMESPACE, partition_actor_name
from .errors import InvalidArgumentError
from .routing import partition_for_key
from .tables import format_table

ORDERS = "orders"
CHATS = "chats"
CUSTOMERS = 400
SESSIONS = 12
SEND_BATCH = 200
RESTART_BATCH = 50
RECEIVE_BATCH = 100
VICTIM_CUSTOMER = "customer-7"
MIN_MESSAGES = 1000
"""Fewer messages leave too few on the killed partition for the demo's checks to mean anything."""


@dataclass
class DemoReport:
    """What the demo measured and checked; `ok` is True when every check passed."""

    sent: int = 0
    received: int = 0
    victim: int = -1
    victim_before_kill: int = 0
    victim_kept: int = 0
    sent_during_restart: int = 0
    keyed_wait_s: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return bool(self.checks) and all(self.checks.values())


@dataclass
class _Plan:
    """The messages to send, split into the demo's phases."""

    before_kill: list[rb.Message]
    restart_pool: list[rb.Message]
    after_restart: list[rb.Message]
    waiting_keyed: rb.Message
    sessions: list[rb.Message]

    def orders(self) -> list[rb.Message]:
        """Every message for the orders queue, in the order keyed ones are sent."""
        return self.before_kill + [self.waiting_keyed] + self.restart_pool + self.after_restart

    def in_send_order(self) -> list[rb.Message]:
        """Every message: sessions first, then the orders."""
        return self.sessions + self.orders()

    @property
    def total(self) -> int:
        """How many messages the plan sends."""
        return len(self.sessions) + len(self.orders())


def _order(i: int, keyed: bool) -> rb.Message:
    customer = f"customer-{(i // 2) % CUSTOMERS}" if keyed else None
    return rb.Message(f"order {i}", message_id=f"order-{i:06d}", partition_key=customer)


def _interleave(keyed: list[rb.Message], unkeyed: list[rb.Message]) -> list[rb.Message]:
    mixed: list[rb.Message] = []
    for i in range(max(len(keyed), len(unkeyed))):
        mixed.extend(m[i] for m in (keyed, unkeyed) if i < len(m))
    return mixed


def build_plan(messages: int) -> _Plan:
    """Split `messages` into session messages (1.5 %) and orders: half keyed by customer, half unkeyed.

    Every message carries its position in send order as the application property "index".
    """
    session_count = max(SESSIONS, messages * 3 // 200)
    orders = messages - session_count - 1
    keyed = [_order(i, True) for i in range(0, orders, 2)]
    unkeyed = [_order(i, False) for i in range(1, orders, 2)]
    half_k, half_u = len(keyed) // 2, len(unkeyed) // 2
    pool = len(unkeyed) // 4
    sessions = [rb.Message(f"chat line {i // SESSIONS}", message_id=f"chat-{i:06d}", session_id=f"chat-{i % SESSIONS}")
                for i in range(session_count)]
    waiting = rb.Message("order for the killed partition", message_id="order-waiting", partition_key=VICTIM_CUSTOMER)
    plan = _Plan(before_kill=_interleave(keyed[:half_k], unkeyed[:half_u]),
                 restart_pool=unkeyed[half_u:half_u + pool],
                 after_restart=_interleave(keyed[half_k:], unkeyed[half_u + pool:]),
                 waiting_keyed=waiting, sessions=sessions)
    for index, message in enumerate(plan.in_send_order()):
        message.application_properties["index"] = index
    return plan


def _send_all(ns: rb.Namespace, queue: str, messages: list[rb.Message], desc: str) -> None:
    with ns.get_queue_sender(queue) as sender, tqdm(total=len(messages), desc=desc, unit="msg",
                                                    mininterval=0.5, leave=True) as bar:
        for start in range(0, len(messages), SEND_BATCH):
            batch = messages[start:start + SEND_BATCH]
            sender.send_messages(batch)
            bar.update(len(batch))


def _spread_table(ns: rb.Namespace, highlight: int | None = None) -> dict[int, int]:
    """Print each partition's share of both queues; returns the orders queue's count per partition."""
    orders = {p.index: p for p in ns.get_queue_runtime_properties(ORDERS).partitions}
    chats = {p.index: p for p in ns.get_queue_runtime_properties(CHATS).partitions}
    peak = max([p.active_message_count for p in orders.values()] + [1])
    rows = []
    for k in range(ns.partition_count):
        count = orders[k].active_message_count
        state = "up" if orders[k].available else "DOWN"
        bar = "#" * round(30 * count / peak) + ("  <- will be killed" if k == highlight else "")
        rows.append([k, state, count, chats[k].active_message_count, bar])
    print(format_table(["partition", "state", ORDERS, CHATS, ""], rows))
    return {k: p.active_message_count for k, p in orders.items()}


def _partition_pid(ns: rb.Namespace, index: int) -> int:
    import ray

    handle = ray.get_actor(partition_actor_name(ns.name, index), namespace=RAY_NAMESPACE)
    return int(ray.get(handle.pid.remote(), timeout=60))


def _send_until(ns: rb.Namespace, pool: list[rb.Message], stop: threading.Event, sent: list[int],
                errors: list[BaseException]) -> None:
    """Send unkeyed batches from `pool` until `stop` is set (counting them in `sent`)."""
    try:
        with ns.get_queue_sender(ORDERS) as sender:
            for start in range(0, len(pool), RESTART_BATCH):
                if stop.is_set():
                    return
                batch = pool[start:start + RESTART_BATCH]
                sender.send_messages(batch, timeout=30)
                sent[0] += len(batch)
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        errors.append(exc)


def _kill_and_recover(ns: rb.Namespace, plan: _Plan, victim: int, report: DemoReport) -> list[rb.Message]:
    """SIGKILL the victim partition; send unkeyed batches and one keyed message while it restarts.

    Returns the pool messages that were not sent during the restart (they are sent afterwards).
    """
    pid = _partition_pid(ns, victim)
    print(f"\nkill -9 {pid}  (partition {victim}, holding {report.victim_before_kill} orders)")
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    stop, sent, errors = threading.Event(), [0], []
    worker = threading.Thread(target=_send_until, args=(ns, plan.restart_pool, stop, sent, errors), daemon=True)
    worker.start()
    with ns.get_queue_sender(ORDERS) as sender:
        sender.send_messages(plan.waiting_keyed, timeout=60)
    report.keyed_wait_s = time.monotonic() - killed_at
    stop.set()
    worker.join()
    if errors:
        raise errors[0]
    report.sent_during_restart = sent[0]
    new_pid = _partition_pid(ns, victim)
    print(f"  while partition {victim} restarted, {sent[0]} unkeyed messages were sent "
          f"({-(-sent[0] // RESTART_BATCH)} batches) and none failed: the gateway placed them on other partitions")
    print(f"  a message keyed {VICTIM_CUSTOMER!r} (partition {victim}) waited {report.keyed_wait_s:.1f} s "
          f"for its partition and was stored there: keyed messages never move")
    after = ns.get_queue_runtime_properties(ORDERS).partitions[victim].active_message_count
    placed_after = after - report.victim_before_kill - 1
    print(f"  partition {victim} is back (pid {pid} -> {new_pid}) with {after} orders: {report.victim_before_kill} "
          f"from before the kill + 1 keyed + {placed_after} unkeyed placed there once it was back")
    return plan.restart_pool[sent[0]:]


@dataclass
class _Received:
    ids: set[str] = field(default_factory=set)
    by_key: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    partitions: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0

    def add(self, message: rb.ReceivedMessage, key: str | None) -> None:
        if message.message_id in self.ids:
            self.duplicates += 1
        self.ids.add(message.message_id)
        self.partitions[message.message_id] = message.partition_index
        if key is not None:
            self.by_key[key].append((message.sequence_number, int(message.application_properties["index"])))


def _receive_orders(ns: rb.Namespace, expected: int, received: _Received, bar: tqdm) -> None:
    with ns.get_queue_receiver(ORDERS, max_wait_time=10) as receiver:
        while len(received.ids) < expected:
            batch = receiver.receive_messages(RECEIVE_BATCH, max_wait_time=10)
            if not batch:
                return
            for message in batch:
                receiver.complete_message(message)
                received.add(message, message.partition_key)
            bar.update(len(batch))


def _receive_sessions(ns: rb.Namespace, per_session: Counter[str], received: _Received, bar: tqdm) -> None:
    for _ in per_session:
        with ns.get_queue_receiver(CHATS, session_id=rb.NEXT_AVAILABLE_SESSION, max_wait_time=10) as receiver:
            assert receiver.session is not None
            session = receiver.session.session_id
            while len(received.by_key[session]) < per_session[session]:
                batch = receiver.receive_messages(RECEIVE_BATCH, max_wait_time=10)
                if not batch:
                    break
                for message in batch:
                    receiver.complete_message(message)
                    received.add(message, session)
                bar.update(len(batch))


def _in_order(entries: list[tuple[int, int]]) -> bool:
    """Whether sequence order and send order agree."""
    indexes = [index for _, index in sorted(entries)]
    return indexes == sorted(indexes)


def _check(report: DemoReport, name: str, passed: bool, detail: str) -> None:
    report.checks[name] = passed
    print(f"  [{'ok' if passed else 'FAILED'}] {detail}")


def _verify(plan: _Plan, received: _Received, victim: int, partitions: int, report: DemoReport) -> None:
    orders = plan.orders()
    sent_ids = {m.message_id for m in plan.in_send_order()}
    keyed = [m for m in orders if m.partition_key is not None]
    kept = sum(1 for m in plan.before_kill if received.partitions.get(m.message_id) == victim)
    report.victim_kept = kept
    print("\nchecks")
    _check(report, "all received", received.ids == sent_ids and received.duplicates == 0,
           f"every sent message id was received exactly once: {len(received.ids)} of {len(sent_ids)} "
           f"({received.duplicates} duplicates, {len(sent_ids - received.ids)} missing)")
    _check(report, "victim kept", kept == report.victim_before_kill,
           f"the {report.victim_before_kill} orders on partition {victim} before the kill all came back from it ({kept})")
    _check(report, "keys pinned", all(received.partitions.get(m.message_id) == partition_for_key(m.partition_key, partitions)
                                      for m in keyed if m.partition_key is not None),
           f"each of the {len(keyed)} keyed orders came from its key's partition")
    customers = [v for k, v in received.by_key.items() if k.startswith("customer-")]
    sessions = [v for k, v in received.by_key.items() if k.startswith("chat-")]
    _check(report, "key order", all(_in_order(v) for v in customers),
           f"each of the {len(customers)} customers' orders are in send order within their partition")
    _check(report, "session order", all(_in_order(v) for v in sessions),
           f"each of the {len(sessions)} sessions was received in send order by one session receiver")


def _print_runtime(ns: rb.Namespace, report: DemoReport) -> None:
    rows = []
    for queue in (ORDERS, CHATS):
        rt = ns.get_queue_runtime_properties(queue)
        rows.append([queue, rt.availability, rt.active_message_count, rt.dead_letter_message_count,
                     rt.scheduled_message_count, rt.total_message_count, len(rt.partitions)])
    print("\nruntime properties after receiving")
    print(format_table(["queue", "availability", "active", "dead-letter", "scheduled", "total", "partitions"], rows))
    _check(report, "queues empty", all(row[1] == "Available" and row[5] == 0 for row in rows),
           "both queues are empty, with every partition available")


# ---------------------------------------------------------------------------------------------- the demo


def run_demo(messages: int = 20_000, *, name: str = "demo") -> DemoReport:
    """Run the demo with `messages` messages in namespace `name`; returns what it checked.

    Starts an embedded local Ray of its own (even when a `ray start` head runs on this machine)
    unless Ray is already initialised in this process (then uses that one and leaves it running),
    and always stops the namespace and deletes its temporary stores at the end.
    """
    import ray

    if messages < MIN_MESSAGES:
        raise InvalidArgumentError(f"the demo needs at least {MIN_MESSAGES} messages, got {messages}")
    started = time.monotonic()
    owns_ray = not ray.is_initialized()
    data_dir = tempfile.mkdtemp(prefix="ray-broker-demo-")
    report = DemoReport()
    with quiet_ray():
        try:
            print(f"starting namespace {name!r}: 16 partitions, durability 'normal', stores in {data_dir}")
            ns = rb.start(name, data_dir=data_dir, durability="normal", address="local" if owns_ray else None)
            print(f"namespace ready in {time.monotonic() - started:.1f} s")
            _run_steps(ns, build_plan(messages), report)
        finally:
            rb.stop(name, delete_data=True)
            shutil.rmtree(data_dir, ignore_errors=True)
            if owns_ray:
                ray.shutdown()
    report.elapsed_s = time.monotonic() - started
    verdict = "PASSED" if report.ok else "FAILED"
    print(f"\ndemo {verdict}: {report.sent} messages sent, {report.received} received and completed, "
          f"in {report.elapsed_s:.1f} s")
    return report


def _run_steps(ns: rb.Namespace, plan: _Plan, report: DemoReport) -> None:
    ns.create_queue(ORDERS, enable_partitioning=True)
    ns.create_queue(CHATS, enable_partitioning=True, requires_session=True)
    victim = partition_for_key(VICTIM_CUSTOMER, ns.partition_count)
    report.victim = victim
    print(f"queues {ORDERS!r} (partitioned) and {CHATS!r} (partitioned, sessions) created")
    print(f"\nsending {plan.total} messages: {ORDERS!r} gets orders, half keyed by {CUSTOMERS} customers "
          f"(partition_key), half unkeyed; {CHATS!r} gets {len(plan.sessions)} lines in {SESSIONS} sessions")
    _send_all(ns, CHATS, plan.sessions, "sessions")
    _send_all(ns, ORDERS, plan.before_kill, "orders 1/2")
    print("\nhow the messages spread over the partitions")
    report.victim_before_kill = _spread_table(ns, highlight=victim)[victim]
    rest = _kill_and_recover(ns, plan, victim, report)
    print()
    _send_all(ns, ORDERS, rest + plan.after_restart, "orders 2/2")
    report.sent = plan.total
    print("\nall messages sent")
    _spread_table(ns)
    received = _Received()
    print()
    with tqdm(total=plan.total, desc="receiving", unit="msg", mininterval=0.5) as bar:
        _receive_orders(ns, len(plan.orders()), received, bar)
        _receive_sessions(ns, Counter(str(m.session_id) for m in plan.sessions), received, bar)
    report.received = len(received.ids)
    _verify(plan, received, victim, ns.partition_count, report)
    _print_runtime(ns, report)


__all__ = ["run_demo", "build_plan", "DemoReport"]

