"""Chaos: keyed, session and unkeyed messages through partitioned queues while actors are SIGKILLed.

Four senders push the messages in batches into two partitioned queues of one 16-partition
namespace: keyed and unkeyed messages into one, session messages into a session queue. Two
receivers drain the first queue and two session receivers take the sessions of the second one by
one (`NEXT_AVAILABLE_SESSION`: each drains its session, closes and takes the next). Meanwhile a
killer thread SIGKILLs a random partition actor every 5 s, kills one partition for good (Ray will
not restart it: clients holding its handle report it and the gateway recreates it under a new
epoch) when a quarter of the messages are in, and SIGKILLs the gateway once, when half of the
messages have been acknowledged. Senders and receivers reach partitions directly, with cached
routing tables, while all this happens. Consumers crash too: now and then one drops a batch unsettled
(and a session consumer then either vanishes or closes its receiver), so lock expiry, session
release and redelivery happen during the run. Every send, delivery and confirmed completion goes
into a `Ledger`; the run ends when every acknowledged message is completed and both queues are
empty, and the ledger then checks the guarantees (see `Ledger.violations`).

Senders retry a batch that raised with the same message ids (the broker is at-least-once), so
the ledger tolerates extra copies. The CI run sends 10,000 messages; `--long` sends 200,000. Only
correctness is asserted; an overall deadline turns a hang into a failure with a report.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import ray

import ray_broker as rb

from ..moved_in_doubt import MovedInDoubtLog
from .ledger import MAX_LISTED, Delivery, Ledger

NAMESPACE = "chaos"
QUEUE = "chaos-keyed-unkeyed"
SESSION_QUEUE = "chaos-sessions"
CI_MESSAGES = 10_000
LONG_MESSAGES = 200_000
CI_DEADLINE_S = 900.0
LONG_DEADLINE_S = 3 * 3600.0
"""Safety deadlines: far beyond a healthy run even on a loaded 2-core machine; they catch hangs."""

SENDERS = 4
QUEUE_RECEIVERS = 2
SESSION_RECEIVERS = 2
BATCH = 100
PARTITION_KEYS = [f"key-{i}" for i in range(48)]
SESSIONS_PER_SENDER = 8
LOCK_DURATION = timedelta(seconds=15)
"""Short, so messages stranded by a kill (locked, never handed out) come back during the run."""
MAX_DELIVERY_COUNT = 1_000
"""High, so no message is dead-lettered however often chaos strands it."""

SEND_TIMEOUT_S = 30.0
RETRY_PAUSE_S = 0.2
RECEIVE_WAIT_S = 1.0
"""How long a receive waits for the first message; a session receiver closes its session after that."""
CONSUMER_CRASH_EVERY = 20
"""Every so many received batches a consumer drops one unsettled, as if it crashed: lock expiry,
session release and redelivery (with their delivery counts) are exercised besides the kills."""
LOCK_MARGIN_S = 1.0
"""A message whose lock ends sooner than this is left to come back rather than completed."""
KILL_INTERVAL_S = 5.0
KILL_SEED = 20_240_601
RESTART_TIMEOUT_S = 60.0
CHECK_INTERVAL_S = 1.0
JOIN_TIMEOUT_S = 120.0


@dataclass
class Kill:
    """One SIGKILL the killer sent."""

    actor: str
    pid: int
    at_s: float
    """Seconds into the run."""
    back_after_s: float | None
    """Seconds until the actor answered from a new process; None if not within RESTART_TIMEOUT_S."""


@dataclass
class Outcome:
    """How a run ended, and its figures."""

    finished: bool
    duration_s: float
    sending_s: float
    kills: list[Kill]
    crashes: Counter[str]
    errors: Counter[str]
    error_samples: list[str]
    failures: list[str]
    hung_threads: list[str]
    leftovers: list[str] = field(default_factory=list)


class ChaosRun:
    """The threads of one chaos run and the state they share."""

    def __init__(self, ns: rb.Namespace, total: int, ledger: Ledger) -> None:
        assert total % (SENDERS * BATCH) == 0, f"{total} messages do not split into {SENDERS} senders' batches"
        self.ns = ns
        self.total = total
        self.ledger = ledger
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.failures: list[str] = []
        self.kills: list[Kill] = []
        self.crashes: Counter[str] = Counter()
        self.senders_done = 0
        self.started = time.monotonic()
        self.sending_s = 0.0

    # ------------------------------------------------------------------ shared state

    def clock(self) -> float:
        """Seconds since the run started (monotonic): the ledger's clock."""
        return time.monotonic() - self.started

    def note_error(self, where: str, exc: BaseException) -> None:
        """Count an error a client call raised (expected under chaos); keep a few samples."""
        key = f"{where}: {type(exc).__name__}"
        with self._lock:
            self.errors[key] += 1
            if self.errors[key] <= 3:
                self.error_samples.append(f"{key} at {self.clock():.1f}s: {str(exc)[:300]}")

    def _guarded(self, target: Callable[..., None], *args: Any) -> Callable[[], None]:
        """Run `target`; a crash of the thread is a test failure and stops the run."""
        def body() -> None:
            try:
                target(*args)
            except BaseException:  # noqa: BLE001 - reported by the test
                with self._lock:
                    self.failures.append(f"{threading.current_thread().name} crashed:\n{traceback.format_exc()}")
                self.stop.set()
        return body

    # ------------------------------------------------------------------ senders

    def plan(self, sender: int) -> Iterator[tuple[list[rb.Message], str | None]]:
        """Sender `sender`'s batches in order: keyed (one key each), session (one session each), unkeyed."""
        for batch in range(self.total // SENDERS // BATCH):
            ids = [f"m{sender}.{batch}.{j}" for j in range(BATCH)]
            kind = batch % 3
            if kind == 0:
                key = PARTITION_KEYS[(sender * 11 + batch) % len(PARTITION_KEYS)]
                yield [rb.Message(i, message_id=i, partition_key=key) for i in ids], None
            elif kind == 1:
                session = f"session-{sender}-{(batch // 3) % SESSIONS_PER_SENDER}"
                yield [rb.Message(i, message_id=i, session_id=session) for i in ids], session
            else:
                yield [rb.Message(i, message_id=i) for i in ids], None

    def send_loop(self, sender: int, ns: rb.Namespace) -> None:
        """Send this sender's plan, each batch retried until a send acknowledges it."""
        with ns.get_queue_sender(QUEUE) as queue_sender, ns.get_queue_sender(SESSION_QUEUE) as session_sender:
            for messages, session in self.plan(sender):
                client = queue_sender if session is None else session_sender
                first_try = True
                while True:
                    if self.stop.is_set():
                        return
                    try:
                        client.send_messages(messages, timeout=SEND_TIMEOUT_S)
                    except Exception as exc:  # noqa: BLE001 - at-least-once: retry the same ids
                        self.note_error("send", exc)
                        first_try = False
                        time.sleep(RETRY_PAUSE_S)
                        continue
                    self.ledger.record_sent([m.message_id for m in messages if m.message_id], session,
                                            first_try=first_try)
                    break
        with self._lock:
            self.senders_done += 1
            self.sending_s = max(self.sending_s, self.clock())

    # ------------------------------------------------------------------ receivers

    def _receive(self, receiver: rb.Receiver, entity: str) -> tuple[list[rb.ReceivedMessage], list[Delivery]]:
        """One receive call, its deliveries recorded in the ledger."""
        started = self.clock()
        batch = receiver.receive_messages(BATCH, max_wait_time=RECEIVE_WAIT_S)
        deliveries = [Delivery(entity, m.sequence_number, m.message_id or "", m.session_id, m.delivery_count, started)
                      for m in batch]
        self.ledger.record_delivered(deliveries)
        return batch, deliveries

    def _complete(self, receiver: rb.Receiver, batch: list[rb.ReceivedMessage], deliveries: list[Delivery],
                  session: rb.ReceiverSession | None) -> None:
        """Complete a batch and flush; record which completions are confirmed and which are in doubt."""
        pending: list[Delivery] = []
        for message, delivery in zip(batch, deliveries):
            until = session.locked_until_utc if session is not None else message.locked_until_utc
            assert until is not None, f"message {delivery.describe()} has no lock"
            if until.timestamp() - time.time() < LOCK_MARGIN_S:
                with self._lock:
                    self.errors["complete: lock about to expire, left to come back"] += 1
                continue
            try:
                receiver.complete_message(message)
            except Exception as exc:  # noqa: BLE001 - may be an earlier buffered settlement's error
                self.note_error("complete", exc)
                self.ledger.record_unconfirmed(pending + [delivery])
                pending = []
                continue
            pending.append(delivery)
        try:
            receiver.flush()
        except Exception as exc:  # noqa: BLE001 - the pending completions may or may not have applied
            self.note_error("flush", exc)
            self.ledger.record_unconfirmed(pending)
            return
        self.ledger.record_completed(pending, self.clock())

    @staticmethod
    def _crash_now(batches: int) -> bool:
        """Whether a consumer drops its `batches`-th batch, as if it had crashed (first at the tenth)."""
        return batches % CONSUMER_CRASH_EVERY == CONSUMER_CRASH_EVERY // 2

    def _note_crash(self, kind: str) -> None:
        with self._lock:
            self.crashes[kind] += 1

    def queue_receive_loop(self, ns: rb.Namespace) -> None:
        """Receive and complete from the keyed/unkeyed queue until the run stops; now and then crash:
        drop a batch unsettled and carry on with a new receiver (its locks must expire)."""
        batches = 0
        receiver = ns.get_queue_receiver(QUEUE, max_wait_time=RECEIVE_WAIT_S)
        try:
            while not self.stop.is_set():
                try:
                    batch, deliveries = self._receive(receiver, QUEUE)
                except Exception as exc:  # noqa: BLE001 - chaos; receive again
                    self.note_error("receive", exc)
                    time.sleep(RETRY_PAUSE_S)
                    continue
                if not batch:
                    continue
                batches += 1
                if self._crash_now(batches):
                    self._note_crash("queue consumer crashed")
                    receiver = ns.get_queue_receiver(QUEUE, max_wait_time=RECEIVE_WAIT_S)
                else:
                    self._complete(receiver, batch, deliveries, None)
        finally:
            self._close(receiver)

    def session_receive_loop(self, ns: rb.Namespace) -> None:
        """Lock the next available session, drain it, close it; again until the run stops.

        Now and then the consumer drops a batch unsettled and, in turn, crashes (never closes: the
        session lock must expire) or gives up (closes the receiver with the batch unsettled).
        """
        batches = itertools.count(1)
        crashes = itertools.count()
        while not self.stop.is_set():
            receiver = ns.get_queue_receiver(SESSION_QUEUE, session_id=rb.NEXT_AVAILABLE_SESSION,
                                             max_wait_time=RECEIVE_WAIT_S)
            try:
                session = receiver.session
            except rb.errors.OperationTimeoutError:
                continue  # no session with messages is free right now
            except Exception as exc:  # noqa: BLE001 - chaos; try again
                self.note_error("accept session", exc)
                time.sleep(RETRY_PAUSE_S)
                continue
            assert session is not None, "a session receiver holds no session after accepting one"
            crashed = False
            try:
                crashed = self._drain_session(receiver, session, batches, crashes)
            except Exception as exc:  # noqa: BLE001 - chaos; take the next session
                self.note_error("session receive", exc)
            if not crashed:
                self._close(receiver)

    def _drain_session(self, receiver: rb.Receiver, session: rb.ReceiverSession, batches: Iterator[int],
                       crashes: Iterator[int]) -> bool:
        """Receive and complete the session until it is empty; True if the consumer crashed instead.

        `batches` numbers this consumer's non-empty batches and `crashes` its crashes."""
        while not self.stop.is_set():
            assert session.locked_until_utc is not None
            if session.locked_until_utc.timestamp() - time.time() < LOCK_DURATION.total_seconds() / 3:
                session.renew_lock()
            batch, deliveries = self._receive(receiver, SESSION_QUEUE)
            if not batch:
                return False
            if self._crash_now(next(batches)):
                if next(crashes) % 2 == 0:
                    self._note_crash("session consumer crashed")
                    return True
                self._note_crash("session consumer closed with a batch unsettled")
                return False
            self._complete(receiver, batch, deliveries, session)
        return False

    def _close(self, receiver: rb.Receiver) -> None:
        try:
            receiver.close()
        except Exception as exc:  # noqa: BLE001 - chaos; the broker releases what it held
            self.note_error("close", exc)

    # ------------------------------------------------------------------ killer

    def kill_loop(self) -> None:
        """SIGKILL a random partition every KILL_INTERVAL_S, and the gateway once half the messages are in."""
        rng = random.Random(KILL_SEED)
        next_kill = time.monotonic() + KILL_INTERVAL_S
        gateway_killed = recreated = False
        while not self.stop.wait(0.1):
            if not recreated and self.ledger.acknowledged >= self.total // 4:
                recreated = self._kill(f"partition.{rng.randrange(self.ns.partition_count)}", for_good=True)
            if not gateway_killed and self.ledger.acknowledged >= self.total // 2:
                gateway_killed = self._kill("gateway.0")
            if time.monotonic() >= next_kill:
                self._kill(f"partition.{rng.randrange(self.ns.partition_count)}")
                next_kill = max(next_kill + KILL_INTERVAL_S, time.monotonic())

    def _kill(self, actor: str, *, for_good: bool = False) -> bool:
        """SIGKILL the process of `<namespace>.<actor>` and wait for its new one; False (and noted) if
        its pid could not be had. `for_good`: `ray.kill` it so that Ray will not restart it; clients
        holding its handle in their routing tables report it, and the gateway recreates it from
        its store under a new epoch."""
        name = f"{self.ns.name}.{actor}"
        try:
            pid = int(ray.get(ray.get_actor(name, namespace="ray_broker").pid.remote(), timeout=30))
        except Exception as exc:  # noqa: BLE001 - still restarting from an earlier kill
            self.note_error(f"kill {actor}", exc)
            return False
        assert pid != os.getpid(), f"{actor} claims to run in the test's own process {pid}"
        if for_good:
            ray.kill(ray.get_actor(name, namespace="ray_broker"), no_restart=True)
        else:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        back_after_s: float | None = None
        while back_after_s is None and time.monotonic() - killed_at < RESTART_TIMEOUT_S:
            time.sleep(0.05)
            with contextlib.suppress(Exception):  # restarting
                if int(ray.get(ray.get_actor(name, namespace="ray_broker").pid.remote(), timeout=5)) != pid:
                    back_after_s = time.monotonic() - killed_at
        with self._lock:
            self.kills.append(Kill(actor + (" for good" if for_good else ""), pid, killed_at - self.started,
                                   back_after_s))
        return True

    # ------------------------------------------------------------------ the run

    def tick(self) -> None:
        """Called on the main thread between progress checks (chaos that must run there goes here)."""

    def _entities_empty(self, ns: rb.Namespace) -> bool:
        """Whether both queues hold nothing at all (every partition answering)."""
        try:
            for queue in (QUEUE, SESSION_QUEUE):
                runtime = ns.get_queue_runtime_properties(queue)
                if runtime.availability != "Available" or runtime.total_message_count:
                    return False
        except Exception as exc:  # noqa: BLE001 - chaos; ask again later
            self.note_error("runtime", exc)
            return False
        return True

    def leftovers(self, ns: rb.Namespace) -> list[str]:
        """What the queues still hold (peeked), for a report."""
        lines = []
        for queue in (QUEUE, SESSION_QUEUE):
            try:
                with ns.get_queue_receiver(queue) as receiver:
                    for m in receiver.peek_messages(MAX_LISTED):
                        lines.append(f"{queue}: {m.message_id!r} seq {m.sequence_number} partition "
                                     f"{rb.partition_of(m.sequence_number)} session {m.session_id!r} "
                                     f"delivery count {m.delivery_count}")
                lines.append(f"{queue}: {ns.get_queue_runtime_properties(queue)}")
            except Exception as exc:  # noqa: BLE001 - best effort, for the report only
                lines.append(f"{queue}: could not peek ({type(exc).__name__}: {exc})")
        return lines

    def run(self, deadline_s: float) -> Outcome:
        """Run every thread until all is completed (or the deadline, or a thread crashed)."""
        roles: list[tuple[str, Callable[..., None], tuple[Any, ...]]] = []
        roles += [(f"sender-{i}", self.send_loop, (i, rb.connect(NAMESPACE))) for i in range(SENDERS)]
        roles += [(f"receiver-{i}", self.queue_receive_loop, (rb.connect(NAMESPACE),))
                  for i in range(QUEUE_RECEIVERS)]
        roles += [(f"session-receiver-{i}", self.session_receive_loop, (rb.connect(NAMESPACE),))
                  for i in range(SESSION_RECEIVERS)]
        roles.append(("killer", self.kill_loop, ()))
        monitor = rb.connect(NAMESPACE)
        threads = [threading.Thread(target=self._guarded(target, *args), name=name, daemon=True)
                   for name, target, args in roles]
        self.started = time.monotonic()
        for thread in threads:
            thread.start()
        finished = False
        while not self.stop.is_set() and self.clock() < deadline_s:
            if self.senders_done == SENDERS and not self.ledger.outstanding() and self._entities_empty(monitor):
                finished = True
                break
            self.tick()
            time.sleep(CHECK_INTERVAL_S)
        duration = self.clock()
        self.stop.set()
        join_by = time.monotonic() + JOIN_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, join_by - time.monotonic()))
        outcome = Outcome(finished=finished, duration_s=duration, sending_s=self.sending_s, kills=list(self.kills),
                          crashes=Counter(self.crashes), errors=Counter(self.errors),
                          error_samples=list(self.error_samples), failures=list(self.failures),
                          hung_threads=[t.name for t in threads if t.is_alive()])
        if not finished:
            outcome.leftovers = self.leftovers(monitor)
        return outcome


def _report(outcome: Outcome, ledger: Ledger, total: int) -> tuple[str, dict[str, Any]]:
    """The run's figures, as text and as junit properties."""
    stats = ledger.stats()
    partition_kills = [k for k in outcome.kills if k.actor.startswith("partition.")]
    figures: dict[str, Any] = {
        "messages": total,
        "duration_s": round(outcome.duration_s, 1),
        "sending_s": round(outcome.sending_s, 1),
        "messages_per_s": round(total / outcome.duration_s, 1),
        "partition_kills": len(partition_kills),
        "gateway_kills": len(outcome.kills) - len(partition_kills),
        "consumer_crashes": sum(outcome.crashes.values()),
        "slowest_restart_s": round(max((RESTART_TIMEOUT_S if k.back_after_s is None else k.back_after_s
                                         for k in outcome.kills), default=0.0), 1),
        **stats,
    }
    lines = [f"chaos run: {', '.join(f'{k}={v}' for k, v in figures.items())}",
             "kills (actor@time, back after): " + ", ".join(
                 f"{k.actor}@{k.at_s:.0f}s "
                 + ("NOT BACK" if k.back_after_s is None else f"{k.back_after_s:.1f}s") for k in outcome.kills),
             "consumer crashes: " + (", ".join(f"{k} x{n}" for k, n in sorted(outcome.crashes.items())) or "none"),
             "client errors (expected under chaos): " + (", ".join(f"{k} x{n}" for k, n in
                                                                  sorted(outcome.errors.items())) or "none")]
    lines += [f"  {sample}" for sample in outcome.error_samples]
    return "\n".join(lines), figures


@pytest.mark.timeout(int(LONG_DEADLINE_S + 2 * JOIN_TIMEOUT_S + 300))
def test_chaos_kills_lose_nothing_and_keep_order(ray_instance: None, long_run: bool, tmp_path: Path,
                                                 record_property: Callable[[str, Any], None],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    total = LONG_MESSAGES if long_run else CI_MESSAGES
    deadline_s = LONG_DEADLINE_S if long_run else CI_DEADLINE_S
    ns = rb.start(NAMESPACE, data_dir=str(tmp_path / NAMESPACE), durability="normal")
    try:
        ns.create_queue(QUEUE, enable_partitioning=True, lock_duration=LOCK_DURATION,
                        max_delivery_count=MAX_DELIVERY_COUNT)
        ns.create_queue(SESSION_QUEUE, enable_partitioning=True, requires_session=True, lock_duration=LOCK_DURATION,
                        max_delivery_count=MAX_DELIVERY_COUNT)
        ledger = Ledger()
        with MovedInDoubtLog() as doubts:
            outcome = ChaosRun(ns, total, ledger).run(deadline_s)
        ledger.record_moved_in_doubt(doubts.message_ids)
    finally:
        rb.stop(NAMESPACE, delete_data=True)

    text, figures = _report(outcome, ledger, total)
    for name, value in figures.items():
        record_property(name, value)
    with capsys.disabled():
        print("\n" + text)
    violations = ledger.violations()
    assert not outcome.failures, "a chaos thread crashed:\n" + "\n".join(outcome.failures)
    assert not outcome.hung_threads, (f"threads still running {JOIN_TIMEOUT_S:g}s after the run stopped: "
                                      f"{outcome.hung_threads}\n{text}")
    assert outcome.finished, (
        f"not every acknowledged message was completed within {deadline_s:g}s "
        f"({ledger.outstanding()} outstanding, e.g. {ledger.outstanding_ids()}; senders done: "
        f"{figures['acknowledged']}/{total} acknowledged)\nthe queues still hold:\n" + "\n".join(outcome.leftovers)
        + "\n" + text + "\nledger violations so far:\n" + "\n".join(violations))
    assert not violations, "the broker broke its guarantees under chaos:\n" + "\n".join(violations) + "\n" + text
    assert figures["partition_kills"] >= 1 and figures["gateway_kills"] == 1, f"the chaos did not happen:\n{text}"
