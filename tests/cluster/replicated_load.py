"""Four senders and four receivers at work on a replicated namespace while `replication_run`
removes a node: keyed sends into a transaction pipeline (each message received from `STAGE` is sent
on to `OUTPUT` and completed in one transaction), unkeyed sends to `OUTPUT`, a session queue, and a
topic with three subscriptions.

`LoadTally` keeps every acknowledged send and every delivery, by the entity the message must end
in; `LoadTally.report` names any acknowledged message never received there, and any received twice
without a cause: a send that raised and was tried again may have stored its messages twice, and a
message whose lock was lost is delivered again with its delivery count raised; anything else is a
message stored twice.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any, Callable

import ray_broker as rb
from ray_broker.errors import OperationTimeoutError
from tests.moved_in_doubt import MovedInDoubtLog

STAGE = "stage"
OUTPUT = "output"
SESSIONS = "sessions"
TOPIC = "events"
SUBSCRIPTIONS = ("a", "b", "c")
LOCK = timedelta(seconds=10)
"""Short, so that a message whose lock was lost in the failover comes back during the drain."""
PER_SEND = 5
PACE_S = 0.05
SEND_TIMEOUT_S = 10.0
SEND_GIVE_UP_S = 60.0
SESSION_COUNT = 4
MAX_LISTED = 10


def create_entities(ns: rb.Namespace) -> None:
    """The pipeline's queues, the session queue and the topic with its three subscriptions."""
    ns.create_queue(STAGE, lock_duration=LOCK)
    ns.create_queue(OUTPUT, lock_duration=LOCK)
    ns.create_queue(SESSIONS, requires_session=True, lock_duration=LOCK)
    ns.create_topic(TOPIC)
    for name in SUBSCRIPTIONS:
        ns.create_subscription(TOPIC, name, lock_duration=LOCK)


class LoadTally:
    """What the load's senders had acknowledged and its receivers were handed (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acknowledged: dict[str, set[str]] = defaultdict(set)
        """Message ids acknowledged, by the entity each must end in."""
        self.retried: set[str] = set()
        """Message ids whose send raised at least once before it was acknowledged."""
        self.deliveries: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
        """Each time a message was handed out, its sequence number and delivery count, by (entity,
        message id)."""
        self.errors: Counter[str] = Counter()
        """Errors the clients saw (each retried or redelivered), by where and type."""
        self.doubts = MovedInDoubtLog()
        """The batches the clients moved on in doubt (which may be stored twice), while the load runs."""

    def sent(self, destinations: list[str], ids: list[str], retried: bool) -> None:
        """`ids` were acknowledged, bound for every entity in `destinations`."""
        with self._lock:
            for destination in destinations:
                self.acknowledged[destination].update(ids)
            if retried:
                self.retried.update(ids)

    def delivered(self, destination: str, messages: list[rb.ReceivedMessage]) -> None:
        """`messages` were handed to a receiver of `destination`."""
        with self._lock:
            for message in messages:
                self.deliveries[(destination, str(message.message_id))].append(
                    (message.sequence_number, message.delivery_count))

    def error(self, where: str, exc: BaseException) -> None:
        """A client call at `where` raised `exc`."""
        with self._lock:
            self.errors[f"{where}: {type(exc).__name__}"] += 1

    def missing(self) -> dict[str, list[str]]:
        """The acknowledged messages not received yet, by entity."""
        with self._lock:
            return {destination: sorted(i for i in ids if (destination, i) not in self.deliveries)
                    for destination, ids in self.acknowledged.items()}

    def twice_without_cause(self) -> list[str]:
        """Messages handed out more than once where neither a retried send nor a batch the client
        moved on in doubt (either may store a message twice) nor a lost lock (which hands the same
        copy out again, its delivery count raised) explains it; each with its (sequence number,
        delivery count) pairs."""
        doubted = self.doubts.message_ids
        with self._lock:
            return sorted(f"{destination}:{i} {handed}" for (destination, i), handed in self.deliveries.items()
                          if len(handed) > 1 and (len({seq for seq, _ in handed}) > 1 and i not in self.retried
                                                  and i not in doubted or len(set(handed)) < len(handed)))

    def report(self) -> dict[str, Any]:
        """What `replication_run` prints of the load."""
        missing = self.missing()
        with self._lock:
            acknowledged = {destination: len(ids) for destination, ids in sorted(self.acknowledged.items())}
            errors = dict(self.errors)
            retried = len(self.retried)
        twice = self.twice_without_cause()
        return {"acknowledged": acknowledged, "missing": {d: ids[:MAX_LISTED] for d, ids in missing.items() if ids},
                "missing_count": sum(len(ids) for ids in missing.values()), "twice_without_cause": twice[:MAX_LISTED],
                "twice_without_cause_count": len(twice), "retried_messages": retried,
                "moved_in_doubt": sorted(self.doubts.message_ids)[:MAX_LISTED], "errors": errors}


class Load:
    """The four senders and four receivers, on threads, until `stop_sending` and `drain`.

    Args:
        ns: the namespace (with `create_entities` done).
        keys: partition keys for the keyed sends, one per partition, used in turn.
    """

    def __init__(self, ns: rb.Namespace, keys: list[str]) -> None:
        self.ns = ns
        self.keys = keys
        self.tally = LoadTally()
        self._sending = threading.Event()
        self._receiving = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start every sender and receiver."""
        self.tally.doubts.attach()
        self._sending.set()
        self._receiving.set()
        work: list[Callable[[], None]] = [self._send_keyed, self._send_unkeyed, self._send_sessions, self._send_topic,
                                          self._forward_in_transactions, self._receive_output, self._receive_sessions,
                                          self._receive_subscriptions]
        self._threads = [threading.Thread(target=job, name=job.__name__, daemon=True) for job in work]
        for thread in self._threads:
            thread.start()

    def stop_sending(self) -> None:
        """Stop the senders (each ends the batch it is trying)."""
        self._sending.clear()
        for thread in self._threads[:4]:
            thread.join(timeout=SEND_GIVE_UP_S + 5)
        self.tally.doubts.detach()

    def drain(self, give_up_s: float) -> float | None:
        """Let the receivers run until every acknowledged message was received (or `give_up_s`
        passed), then stop them; the seconds it took, or None."""
        began = time.monotonic()
        took = None
        while time.monotonic() - began < give_up_s:
            if not any(self.tally.missing().values()):
                took = round(time.monotonic() - began, 2)
                break
            time.sleep(0.5)
        self._receiving.clear()
        for thread in self._threads[4:]:
            thread.join(timeout=30)
        return took

    # ------------------------------------------------------------------ senders

    def _send_loop(self, entity: str, destinations: list[str], build: Callable[[int, list[str]], list[rb.Message]],
                   prefix: str, sender_of: Callable[[str], Any]) -> None:
        with sender_of(entity) as sender:
            for n in itertools.count():
                if not self._sending.is_set():
                    return
                ids = [f"{prefix}{n}-{j}" for j in range(PER_SEND)]
                self._send(sender, entity, destinations, build(n, ids), ids)
                time.sleep(PACE_S)

    def _send(self, sender: Any, entity: str, destinations: list[str], messages: list[rb.Message],
              ids: list[str]) -> None:
        retried = False
        began = time.monotonic()
        while time.monotonic() - began < SEND_GIVE_UP_S:
            try:
                sender.send_messages(messages, timeout=SEND_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - tried again with the same ids, as an application would
                self.tally.error(f"send to {entity}", exc)
                retried = True
                time.sleep(0.2)
                continue
            self.tally.sent(destinations, ids, retried)
            return

    def _send_keyed(self) -> None:
        self._send_loop(STAGE, [OUTPUT], lambda n, ids: [rb.Message(i, message_id=i,
                                                                    partition_key=self.keys[n % len(self.keys)])
                                                         for i in ids], "k", self.ns.get_queue_sender)

    def _send_unkeyed(self) -> None:
        self._send_loop(OUTPUT, [OUTPUT], lambda n, ids: [rb.Message(i, message_id=i) for i in ids], "u",
                        self.ns.get_queue_sender)

    def _send_sessions(self) -> None:
        self._send_loop(SESSIONS, [SESSIONS], lambda n, ids: [rb.Message(i, message_id=i,
                                                                         session_id=f"s{n % SESSION_COUNT}")
                                                              for i in ids], "s", self.ns.get_queue_sender)

    def _send_topic(self) -> None:
        self._send_loop(TOPIC, [f"{TOPIC}/{name}" for name in SUBSCRIPTIONS],
                        lambda n, ids: [rb.Message(i, message_id=i) for i in ids], "t", self.ns.get_topic_sender)

    # ------------------------------------------------------------------ receivers

    def _settle(self, receiver: rb.Receiver, destination: str, messages: list[rb.ReceivedMessage]) -> None:
        self.tally.delivered(destination, messages)
        for message in messages:
            try:
                receiver.complete_message(message)
            except Exception as exc:  # noqa: BLE001 - the message comes back when its lock ends
                self.tally.error(f"complete on {destination}", exc)

    def _forward_in_transactions(self) -> None:
        """Each message of `STAGE` sent on to `OUTPUT` and completed in one transaction."""
        with self.ns.get_queue_receiver(STAGE) as receiver, self.ns.get_queue_sender(OUTPUT) as sender:
            while self._receiving.is_set():
                try:
                    batch = receiver.receive_messages(20, max_wait_time=1)
                except Exception as exc:  # noqa: BLE001 - received again at the next round
                    self.tally.error(f"receive from {STAGE}", exc)
                    time.sleep(0.2)
                    continue
                for message in batch:
                    try:
                        with self.ns.transaction() as transaction:
                            sender.send_messages(rb.Message(message.body, message_id=message.message_id,
                                                            partition_key=message.partition_key),
                                                 transaction=transaction, timeout=SEND_TIMEOUT_S)
                            receiver.complete_message(message, transaction=transaction)
                    except Exception as exc:  # noqa: BLE001 - all or nothing: the message comes back
                        self.tally.error("forward in a transaction", exc)

    def _receive_output(self) -> None:
        with self.ns.get_queue_receiver(OUTPUT) as receiver:
            while self._receiving.is_set():
                self._receive_once(receiver, OUTPUT, max_wait_s=1.0)

    def _receive_subscriptions(self) -> None:
        receivers = {name: self.ns.get_subscription_receiver(TOPIC, name) for name in SUBSCRIPTIONS}
        try:
            while self._receiving.is_set():
                for name, receiver in receivers.items():
                    self._receive_once(receiver, f"{TOPIC}/{name}", max_wait_s=0.3)
        finally:
            for receiver in receivers.values():
                receiver.close()

    def _receive_once(self, receiver: rb.Receiver, destination: str, max_wait_s: float) -> None:
        try:
            batch = receiver.receive_messages(20, max_wait_time=max_wait_s)
        except Exception as exc:  # noqa: BLE001 - received again at the next round
            self.tally.error(f"receive from {destination}", exc)
            time.sleep(0.2)
            return
        self._settle(receiver, destination, batch)

    def _receive_sessions(self) -> None:
        """Each session in turn (the next available one), drained, then let go."""
        while self._receiving.is_set():
            receiver = self.ns.get_queue_receiver(SESSIONS, session_id=rb.NEXT_AVAILABLE_SESSION, max_wait_time=1)
            try:
                assert receiver.session is not None, "a session receiver holds its session once it is accepted"
            except OperationTimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001 - the session is accepted again at the next round
                self.tally.error(f"accept a session of {SESSIONS}", exc)
                time.sleep(0.2)
                continue
            try:
                while self._receiving.is_set():
                    batch = receiver.receive_messages(20, max_wait_time=0.5)
                    if not batch:
                        break
                    self._settle(receiver, SESSIONS, batch)
            except Exception as exc:  # noqa: BLE001 - the session's lock ends and it is accepted again
                self.tally.error(f"receive from a session of {SESSIONS}", exc)
            finally:
                try:
                    receiver.close()
                except Exception as exc:  # noqa: BLE001 - its lock ends on its own
                    self.tally.error(f"close a session of {SESSIONS}", exc)
