"""What the fuzz tests share: settings, outcome checks, message comparison, queue slots, health.

A fuzz test calls the broker with generated values and checks one rule: a value is accepted (and
comes back identical) or refused with a typed error. Any other exception propagates and fails the
example, so hypothesis reports it with the minimal input that raises it.
"""
from __future__ import annotations

import contextlib
import functools
import math
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator, Mapping

import ray
from hypothesis import HealthCheck, settings
from hypothesis.errors import HypothesisException

import ray_broker as rb
from ray_broker import errors
from ray_broker.wire import IntegrityCheck, encode

from .strategies import MessageCase, Verdict

CONSTRUCTION_ERRORS = (TypeError, ValueError, errors.ServiceBusError)
"""What `rb.Message(...)` may raise for a bad field (the contract's TypeError/ValueError, and
InvalidOperationError for a partition key that differs from the session id)."""
ARGUMENT_REFUSALS = (errors.ServiceBusError,)
"""What a call may raise for a bad argument: a typed broker error (InvalidArgumentError, a
ValueError, for a malformed name, duration, count or type)."""
SETTLE_S = 20.0
"""How long a test waits for messages that must arrive."""
FUTURE_MARGIN_S = 120.0
"""A schedule time this far ahead is certainly still scheduled when the test looks."""
SHORT_TTL_S = 120.0
"""A message with a shorter TTL may expire before it is received."""


CASES_RUN: Counter[str] = Counter()
"""Examples run per test in this session (generated, replayed and shrunk), for the summary."""


def fuzz_settings(long_run: bool, *, ci: int, long: int) -> settings:
    """Hypothesis settings: `ci` examples by default, `long` with --long; no deadline (live actors)."""
    return settings(max_examples=long if long_run else ci, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def fuzz_example(test: Callable[..., None]) -> Callable[..., None]:
    """Wrap the body of one example: count it, and give its failure a stable identity.

    An error re-raised from an actor has a `RayTaskError(...)` in its context whose class Ray
    creates anew each time, so hypothesis would take every replay for a different bug (and call
    the test flaky). The context is cut off the failure and kept as a note in its report.
    """
    name = test.__qualname__.split(".")[0]

    @functools.wraps(test)
    def example(*args: Any, **kwargs: Any) -> None:
        CASES_RUN[name] += 1
        try:
            test(*args, **kwargs)
        except HypothesisException:
            raise
        except Exception as exc:
            context = exc.__cause__ or exc.__context__
            if context is not None:
                exc.add_note("while handling:\n" + "".join(traceback.format_exception(context)))
                exc.__cause__ = exc.__context__ = None
            raise

    return example


@dataclass
class Outcome:
    """Whether a call was accepted, and what it returned or raised."""

    accepted: bool
    result: Any = None
    error: BaseException | None = None


def expect(verdict: Verdict, call: Callable[[], Any], what: str,
           refusals: tuple[type[BaseException], ...] = ARGUMENT_REFUSALS) -> Outcome:
    """Run `call` and check it against `verdict`.

    VALID must be accepted, INVALID must be refused with one of `refusals`, EDGE may be either.
    Any exception outside `refusals` propagates: it is a failure whatever the verdict.
    """
    try:
        outcome = Outcome(True, call())
    except refusals as exc:
        outcome = Outcome(False, error=exc)
    if outcome.accepted:
        assert verdict is not Verdict.INVALID, f"{what}: an invalid input was accepted (returned {outcome.result!r})"
    else:
        assert verdict is not Verdict.VALID, f"{what}: a valid input was refused with {outcome.error!r}"
    return outcome


# ---------------------------------------------------------------------- message comparison

def same_value(want: Any, got: Any) -> bool:
    """Equality that also checks the type (bool is not int), NaN and the sign of zero, a
    datetime's wall-clock time and offset (naive stays naive), and a decimal's digits and exponent."""
    if want is None or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, int):
        return type(got) is int and got == want
    if isinstance(want, float):
        if type(got) is not float:
            return False
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    if isinstance(want, datetime):
        return (isinstance(got, datetime) and got.replace(tzinfo=None) == want.replace(tzinfo=None)
                and got.utcoffset() == want.utcoffset())
    if isinstance(want, Decimal):
        return type(got) is Decimal and got.as_tuple() == want.as_tuple()
    for kind in (str, bytes, uuid.UUID):
        if isinstance(want, kind):
            return isinstance(got, kind) and got == want
    raise AssertionError(f"no comparison for a sent value of type {type(want).__name__}")


def epoch_of(value: datetime) -> float:
    """A datetime's epoch seconds (a naive datetime is UTC, as the contract says)."""
    return (value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)).timestamp()


def _close_seconds(want: float, got: float) -> bool:
    """Equal up to float64 rounding: durations and times travel as float seconds."""
    return abs(got - want) <= 1e-6 + abs(want) * 2.0 ** -50


def close_seconds(want: float | None, got: timedelta | None) -> bool:
    """Whether a duration came back as the seconds that were given (None for None)."""
    if want is None or got is None:
        return want is None and got is None
    return _close_seconds(want, got.total_seconds())


def duration_seconds(value: Any) -> float:
    """The seconds a duration stands for: a timedelta's, or a number's own."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def expected_body(value: Any) -> bytes:
    """The bytes a body comes back as (a str is encoded UTF-8)."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def differences(case: MessageCase, got: rb.ReceivedMessage) -> list[str]:
    """How a received (or peeked) message differs from what `case` sent; empty when identical."""
    found = []
    if not same_value(expected_body(case.body.value), got.body):
        found.append(f"body: sent {case.body.value!r}, got {got.body!r}")
    sent_id = case.value("message_id")
    if sent_id is None and not (isinstance(got.message_id, str) and got.message_id):
        found.append(f"message_id: sent none, so one is given, got {got.message_id!r}")
    elif sent_id is not None and not same_value(sent_id, got.message_id):
        found.append(f"message_id: sent {sent_id!r}, got {got.message_id!r}")
    for name in ("session_id", "partition_key", "correlation_id", "subject", "to", "reply_to",
                 "reply_to_session_id", "content_type"):
        want = case.value(name)
        if not same_value(want, getattr(got, name)):
            found.append(f"{name}: sent {want!r}, got {getattr(got, name)!r}")
    props = case.value("application_properties") or {}
    if set(props) != set(got.application_properties):
        found.append(f"application_properties keys: sent {sorted(props)!r}, got {sorted(got.application_properties)!r}")
    for key, want in props.items():
        if key in got.application_properties and not same_value(want, got.application_properties[key]):
            found.append(f"application_properties[{key!r}]: sent {want!r}, got {got.application_properties[key]!r}")
    ttl = case.value("time_to_live")
    if (ttl is None) != (got.time_to_live is None) or (
            ttl is not None and not _close_seconds(duration_seconds(ttl), got.time_to_live.total_seconds())):
        found.append(f"time_to_live: sent {ttl!r}, got {got.time_to_live!r}")
    when = case.value("scheduled_enqueue_time_utc")
    got_when = got.scheduled_enqueue_time_utc
    if (when is None) != (got_when is None) or (when is not None and (
            got_when.tzinfo is None or not _close_seconds(epoch_of(when), got_when.timestamp()))):
        found.append(f"scheduled_enqueue_time_utc: sent {when!r}, got {got_when!r}")
    return found


@dataclass
class Sent:
    """A message that was sent, and what the test may expect of it."""

    case: MessageCase
    scheduled: bool = False
    """Scheduled well into the future: must be counted as scheduled and show in a peek."""
    certain: bool = True
    """Must arrive (False: it may expire, or be scheduled too close to now to tell)."""


def classify(case: MessageCase, sent_at: float) -> Sent:
    """Decide from its TTL and schedule time what a sent message must do."""
    when = case.value("scheduled_enqueue_time_utc")
    ttl = case.value("time_to_live")
    due = None if when is None else epoch_of(when)
    if due is not None and due > sent_at + FUTURE_MARGIN_S:
        return Sent(case, scheduled=True)
    certain = (due is None or due <= sent_at) and (ttl is None or duration_seconds(ttl) >= SHORT_TTL_S)
    return Sent(case, certain=certain)


def match(sent: list[Sent], received: Iterable[rb.ReceivedMessage], *, spare: Iterable[Sent] = ()) -> list[Sent]:
    """Pair each received message with an identical sent one; returns the sent ones left over.

    A received message may also match one of `spare` (messages that may or may not show up).
    One that matches nothing fails the example, with its differences from the sent message of
    the same message_id (ids are usually unique within an example).
    """
    left, maybe = list(sent), list(spare)
    for got in received:
        hit = next((s for s in left + maybe if not differences(s.case, got)), None)
        if hit is None:
            same_id = [s.case for s in left + maybe if same_value(s.case.value("message_id"), got.message_id)]
            detail = differences(same_id[0], got) if same_id else ["no message with that message_id was sent"]
            raise AssertionError(f"received {got!r} does not match what was sent: {detail}; "
                                 f"sent: {[s.case for s in left + maybe]!r}")
        (left if hit in left else maybe).remove(hit)
    return left


# ---------------------------------------------------------------------- queues the examples share

@dataclass
class QueueSlot:
    """A queue the examples of one test share, each example starting from an empty queue.

    An example that leaves the queue in doubt (messages that may still arrive) marks it dirty, and
    the next example deletes it and creates a fresh one. So does a failed example, unless the
    queue is still readable and empty and `keep_after_failure` allows keeping it: re-creating a
    partitioned queue for each of the many examples hypothesis tries while shrinking is slow.
    """

    ns: rb.Namespace
    options: Mapping[str, Any] = field(default_factory=dict)
    keep_after_failure: bool = True
    name: str = ""
    dirty: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    """What a test remembers about the queue's contents; cleared whenever the queue is known empty."""
    _sender: rb.Sender | None = None
    _receiver: rb.Receiver | None = None

    def ready(self) -> None:
        """Make sure the queue exists, and is fresh if it was dirty."""
        if self.dirty:
            self.drop()
            self.name = f"fz-{uuid.uuid4().hex[:12]}"
            self.ns.create_queue(self.name, **self.options)
            self.dirty = False

    @property
    def sender(self) -> rb.Sender:
        """The slot's sender."""
        if self._sender is None:
            self._sender = self.ns.get_queue_sender(self.name)
        return self._sender

    @property
    def receiver(self) -> rb.Receiver:
        """The slot's peek-lock receiver."""
        if self._receiver is None:
            self._receiver = self.ns.get_queue_receiver(self.name, max_wait_time=5)
        return self._receiver

    @contextlib.contextmanager
    def example(self) -> Iterator[QueueSlot]:
        """Run one example on the slot, and after a failure keep the queue only if it is empty
        (the namespace is shared: a queue that holds messages no receive can take, or settings
        no `get_queue` can read, must not outlive the example)."""
        self.ready()
        try:
            yield self
        except BaseException:
            self._close_clients()
            if self.keep_after_failure and self._empty():
                self.extra = {}
            else:
                self.drop()
            raise

    def _empty(self) -> bool:
        try:
            self.ns.get_queue(self.name)
            return self.ns.get_queue_runtime_properties(self.name).total_message_count == 0
        except Exception:  # noqa: BLE001 - any failure to read the queue means it cannot be kept
            return False

    def _close_clients(self) -> None:
        """Close the clients, best effort: a receiver re-raises what its buffered settlements met,
        which the failed example has already reported."""
        for client in (self._receiver, self._sender):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._sender = self._receiver = None

    def drop(self) -> None:
        """Close the clients and delete the queue; the next example creates a fresh one."""
        self._close_clients()
        if self.name:
            with contextlib.suppress(errors.MessagingEntityNotFoundError):
                self.ns.delete_queue(self.name)
            self.name = ""
        self.extra = {}
        self.dirty = True


def receive_expected(slot: QueueSlot, sent: list[Sent]) -> None:
    """Receive every message of `sent` that is not scheduled, compare, complete; then check the
    scheduled ones through the runtime counts and a peek, and cancel them.

    Messages that may or may not arrive (short TTL, due about now) are compared when they do;
    if any of them is left unaccounted for, the slot is marked dirty.
    """
    receiver = slot.receiver
    waiting = [s for s in sent if not s.scheduled]
    deadline = time.monotonic() + SETTLE_S
    while any(s.certain for s in waiting) and time.monotonic() < deadline:
        batch = receiver.receive_messages(len(waiting), max_wait_time=1.0)
        waiting = match(waiting, batch)
        for message in batch:
            receiver.complete_message(message)
    receiver.flush()
    missing = [s.case for s in waiting if s.certain]
    assert not missing, f"messages sent but not received within {SETTLE_S} s: {missing!r}"
    slot.dirty = bool(waiting)
    scheduled = [s for s in sent if s.scheduled]
    if not waiting:
        runtime = slot.ns.get_queue_runtime_properties(slot.name)
        assert (runtime.active_message_count, runtime.scheduled_message_count) == (0, len(scheduled)), (
            f"after receiving, expected 0 active and {len(scheduled)} scheduled messages; the runtime counts "
            f"{runtime.active_message_count} active and {runtime.scheduled_message_count} scheduled")
    if not scheduled:
        return
    peeked = [m for m in receiver.peek_messages(len(sent) + 1, sequence_number=1)
              if m.state == rb.MessageState.SCHEDULED]
    assert not match(scheduled, peeked, spare=waiting), "scheduled messages missing from a peek"
    seqs = [m.sequence_number for m in peeked if any(not differences(s.case, m) for s in scheduled)]
    slot.sender.cancel_scheduled_messages(seqs)
    if not waiting:
        assert slot.ns.get_queue_runtime_properties(slot.name).scheduled_message_count == 0


# ---------------------------------------------------------------------- namespace health

def assert_namespace_healthy(ns: rb.Namespace) -> None:
    """Every partition's store passes its integrity check, and the namespace still serves:
    create a partitioned queue, send, receive, complete, delete."""
    for k in range(ns.partition_count):
        handle = ray.get_actor(f"{ns.name}.partition.{k}", namespace="ray_broker")
        verdict = ray.get(handle.run.remote(*encode(IntegrityCheck())), timeout=60)
        assert verdict["ok"], f"partition {k}: {verdict['problems']}"
    name = f"fz-health-{uuid.uuid4().hex[:8]}"
    ns.create_queue(name, enable_partitioning=True)
    try:
        with ns.get_queue_sender(name) as sender, ns.get_queue_receiver(name, max_wait_time=10) as receiver:
            sender.send_messages([rb.Message(f"after fuzz {i}", message_id=str(i)) for i in range(32)])
            got: list[rb.ReceivedMessage] = []
            deadline = time.monotonic() + SETTLE_S
            while len(got) < 32 and time.monotonic() < deadline:
                batch = receiver.receive_messages(32, max_wait_time=2)
                for message in batch:
                    receiver.complete_message(message)
                got.extend(batch)
            receiver.flush()
        assert sorted(int(m.message_id) for m in got) == list(range(32))
        assert ns.get_queue_runtime_properties(name).total_message_count == 0
    finally:
        ns.delete_queue(name)
