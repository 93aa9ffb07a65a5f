"""Fuzzing management and client arguments against a live namespace.

Queue names, durations, counts, flags and statuses for create_queue and update_queue; receiver,
peek, settlement and sender arguments. An argument is accepted (and then reads back as given and
behaves as documented) or refused with a typed error from `ray_broker.errors`, leaving nothing
half-done behind.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from typing import Any, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ray_broker as rb
from ray_broker import errors

from .strategies import (
    IMMUTABLE_QUEUE_OPTIONS,
    Arg,
    MessageCase,
    NameCase,
    Verdict,
    batch_sizes,
    combined,
    entity_names,
    message_counts,
    name_verdict,
    queue_changes,
    queue_options,
    receive_modes,
    receiver_session_ids,
    schedule_arguments,
    send_timeouts,
    sequence_numbers,
    sub_queues,
    waiting_times,
)
from .support import (
    FUTURE_MARGIN_S,
    QueueSlot,
    Sent,
    assert_namespace_healthy,
    close_seconds,
    duration_seconds,
    epoch_of,
    expect,
    fuzz_example,
    fuzz_settings,
    receive_expected,
)

CREATE_PREFIX = "fzc-"
QUEUE_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(rb.QueueProperties)
                                  if f.name not in ("name", "created_at_utc", "updated_at_utc")}
DURATION_OPTIONS = ("duplicate_detection_history_time_window", "lock_duration", "default_message_time_to_live")
SEND_BLOCKING = ("Disabled", "SendDisabled")
RECEIVE_BLOCKING = ("Disabled", "ReceiveDisabled")


@pytest.fixture
def queue_slot(namespace: rb.Namespace) -> Iterator[QueueSlot]:
    """A queue with default settings that update_queue examples change in turn."""
    slot = QueueSlot(namespace)
    yield slot
    slot.drop()


@pytest.fixture
def client_slots(namespace: rb.Namespace) -> Iterator[dict[bool, QueueSlot]]:
    """A partitioned and a non-partitioned queue for client-argument examples, by `enable_partitioning`."""
    slots = {partitioned: QueueSlot(namespace, {"enable_partitioning": partitioned}) for partitioned in (True, False)}
    yield slots
    for slot in slots.values():
        slot.drop()


def option_value(options: dict[str, Arg], key: str) -> Any:
    """The value an option was given, or its documented default."""
    return options[key].value if key in options else QUEUE_DEFAULTS[key]


def assert_properties(props: rb.QueueProperties, name: str, expected: dict[str, Any]) -> None:
    """`props` carries `name` and every option as expected (durations up to float rounding)."""
    assert props.name == name, f"name: expected {name!r}, got {props.name!r}"
    for key, want in expected.items():
        got = getattr(props, key)
        if key in DURATION_OPTIONS:
            seconds = None if want is None else duration_seconds(want)
            assert close_seconds(seconds, got), f"{key}: expected {want!r}, got {got!r}"
        else:
            assert type(got) is type(want) and got == want, f"{key}: expected {want!r}, got {got!r}"


def create_refused_or_cleaned(ns: rb.Namespace, name: Any, verdict: Verdict, kwargs: dict[str, Any]) -> Any:
    """create_queue, checked against `verdict`; a refused creation must leave no queue behind, and a
    queue whose creation crashed is deleted before the crash propagates (the namespace is shared)."""
    try:
        outcome = expect(verdict, lambda: ns.create_queue(name, **kwargs), f"create_queue({name!r}, **{kwargs!r})")
    except BaseException:
        if isinstance(name, str):
            with contextlib.suppress(errors.ServiceBusError):
                ns.delete_queue(name)
        raise
    if outcome.accepted:
        return outcome.result
    if name_verdict(name) is not Verdict.INVALID:
        with pytest.raises((errors.MessagingEntityNotFoundError, errors.InvalidArgumentError)):
            ns.get_queue(name)
    return None


def exercise_status(ns: rb.Namespace, props: rb.QueueProperties) -> None:
    """Send and receive one message as the queue's status and settings allow: a blocked direction
    raises MessagingEntityDisabledError, an open one works."""
    session = "s" if props.requires_session else None
    ttl = props.default_message_time_to_live
    with ns.get_queue_sender(props.name) as sender:
        probe = rb.Message(b"probe", message_id="probe", session_id=session)
        if props.status in SEND_BLOCKING:
            with pytest.raises(errors.MessagingEntityDisabledError):
                sender.send_messages(probe)
        else:
            sender.send_messages(probe)
    # Whether a message certainly waits to be received (a short default TTL may expire it).
    waiting = props.status not in SEND_BLOCKING and (ttl is None or ttl.total_seconds() >= 60)
    if props.status in RECEIVE_BLOCKING and waiting:
        with pytest.raises(errors.MessagingEntityDisabledError):
            with ns.get_queue_receiver(props.name, session_id=session, max_wait_time=5) as receiver:
                receiver.receive_messages(1)
    elif props.status in RECEIVE_BLOCKING:
        with contextlib.suppress(errors.MessagingEntityDisabledError):
            with ns.get_queue_receiver(props.name, session_id=session, max_wait_time=0.2) as receiver:
                assert receiver.receive_messages(1) == [], f"a queue with status {props.status} delivered a message"
    else:
        with ns.get_queue_receiver(props.name, session_id=session, max_wait_time=5 if waiting else 0.2) as receiver:
            got = receiver.receive_messages(1)
            for message in got:
                receiver.complete_message(message)
        assert [m.body for m in got] in ([[b"probe"]] if waiting else [[], [b"probe"]])


def test_create_queue_arguments(namespace: rb.Namespace, long_run: bool) -> None:
    """create_queue with generated names and options: refused with a typed error and nothing left,
    or created with every option as given, listed, working as its status says, and deletable."""

    @fuzz_settings(long_run, ci=80, long=1500)
    @given(name=entity_names(), options=queue_options())
    @fuzz_example
    def run(name: NameCase, options: dict[str, Arg]) -> None:
        queue = name.materialize(f"{CREATE_PREFIX}{uuid.uuid4().hex[:10]}-")
        verdict = max(name_verdict(queue), combined(*options.values()))
        kwargs = {key: arg.value for key, arg in options.items()}
        props = create_refused_or_cleaned(namespace, queue, verdict, kwargs)
        if props is None:
            return
        try:
            expected = {key: option_value(options, key) for key in QUEUE_DEFAULTS}
            assert_properties(props, queue, expected)
            assert_properties(namespace.get_queue(queue), queue, expected)
            assert queue in [q.name for q in namespace.list_queues()]
            exercise_status(namespace, props)
        finally:
            namespace.delete_queue(queue)
        with pytest.raises(errors.MessagingEntityNotFoundError):
            namespace.get_queue(queue)

    run()


def update_verdict(current: rb.QueueProperties, changes: dict[str, Arg]) -> Verdict:
    """An update's verdict: its values', and a change to an option fixed at creation is invalid."""
    verdict = combined(*changes.values())
    for key in IMMUTABLE_QUEUE_OPTIONS:
        if key in changes and changes[key].value != getattr(current, key):
            verdict = Verdict.INVALID
    return verdict


def test_update_queue_arguments(queue_slot: QueueSlot, long_run: bool) -> None:
    """update_queue by name (with unknown keys too) or with modified QueueProperties: refused with a
    typed error and nothing changed, or every change applied and nothing else; a status that
    blocks sending then refuses a send."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(changes=queue_changes(), as_properties=st.booleans())
    @fuzz_example
    def run(changes: dict[str, Arg], as_properties: bool) -> None:
        with queue_slot.example() as slot:
            ns = slot.ns
            before = ns.get_queue(slot.name)
            if as_properties and all(key in QUEUE_DEFAULTS for key in changes):
                # A QueueProperties carries every option: only values that differ from the queue's
                # (by ==, so 0 for False is no change) are changes.
                changes = {key: arg for key, arg in changes.items() if not arg.value == getattr(before, key)}
                modified = dataclasses.replace(before, **{key: arg.value for key, arg in changes.items()})

                def update() -> rb.QueueProperties:
                    return ns.update_queue(modified)
            else:
                def update() -> rb.QueueProperties:
                    return ns.update_queue(slot.name, **{key: arg.value for key, arg in changes.items()})
            outcome = expect(update_verdict(before, changes), update, f"update_queue with {changes!r}")
            expected = {key: getattr(before, key) for key in QUEUE_DEFAULTS}
            if outcome.accepted:
                expected.update({key: arg.value for key, arg in changes.items()})
                assert_properties(outcome.result, slot.name, expected)
            after = ns.get_queue(slot.name)
            assert_properties(after, slot.name, expected)
            if after.status in SEND_BLOCKING:
                with pytest.raises(errors.MessagingEntityDisabledError):
                    slot.sender.send_messages(rb.Message(b"blocked"))

    run()


@st.composite
def receiver_cases(draw: st.DrawFn) -> dict[str, Arg]:
    """Arguments for get_queue_receiver and receive_messages. Long waits are drawn only where a
    message is waiting (the main queue), so that no valid example sits out its wait."""
    case = {"path": draw(st.sampled_from(["name", "upper", "dead-letter path"]).map(lambda p: Arg(p, Verdict.VALID))),
            "receive_mode": draw(receive_modes()), "sub_queue": draw(sub_queues()),
            "session_id": draw(receiver_session_ids()), "prefetch_count": draw(message_counts(low=0)),
            "max_message_count": draw(message_counts())}
    main_queue = case["path"].value != "dead-letter path" and case["sub_queue"].value is None
    case["receiver_wait"] = draw(waiting_times(long=main_queue))
    case["wait"] = draw(waiting_times(long=main_queue))
    return case


def test_receiver_arguments(client_slots: dict[bool, QueueSlot], long_run: bool) -> None:
    """Receiver arguments (mode, sub-queue, session, prefetch, waits, counts, entity paths) with one
    message waiting: refused with a typed error, or the main queue returns exactly that message
    and a dead-letter sub-queue returns nothing."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(partitioned=st.booleans(), case=receiver_cases())
    @fuzz_example
    def run(partitioned: bool, case: dict[str, Arg]) -> None:
        with client_slots[partitioned].example() as slot:
            if not slot.extra.get("probe"):
                slot.sender.send_messages(rb.Message(b"probe", message_id="probe"))
                slot.extra["probe"] = True
            path = {"name": slot.name, "upper": slot.name.upper(),
                    "dead-letter path": slot.name + "/$deadletterqueue"}[case["path"].value]
            verdict = combined(*case.values())
            sub_queue = case["sub_queue"].value
            if case["path"].value == "dead-letter path" and sub_queue not in (None, rb.SubQueue.DEAD_LETTER):
                verdict = Verdict.INVALID  # the path names the dead-letter queue; another sub_queue contradicts it
            dead_letter = case["path"].value == "dead-letter path" or sub_queue is not None

            def receive() -> list[rb.ReceivedMessage]:
                receiver = slot.ns.get_queue_receiver(
                    path, receive_mode=case["receive_mode"].value, sub_queue=sub_queue,
                    session_id=case["session_id"].value, prefetch_count=case["prefetch_count"].value,
                    max_wait_time=case["receiver_wait"].value)
                with receiver:
                    got = receiver.receive_messages(case["max_message_count"].value, max_wait_time=case["wait"].value)
                    if receiver.receive_mode is rb.ReceiveMode.PEEK_LOCK:
                        for message in got:
                            receiver.complete_message(message)
                return got

            outcome = expect(verdict, receive, f"receive with {case!r}")
            if outcome.accepted:
                assert [m.body for m in outcome.result] == ([] if dead_letter else [b"probe"])
                slot.extra["probe"] = dead_letter

    run()


def test_sequence_number_arguments(client_slots: dict[bool, QueueSlot], long_run: bool) -> None:
    """peek_messages, receive_deferred_messages and cancel_scheduled_messages with generated
    sequence numbers and counts: a peek returns messages from that number on; with no deferred or
    scheduled message in the queue, the other two are always refused with a typed error."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(partitioned=st.booleans(), operation=st.sampled_from(["peek", "receive_deferred", "cancel_scheduled"]),
           numbers=st.lists(sequence_numbers(), min_size=1, max_size=3), count=message_counts())
    @fuzz_example
    def run(partitioned: bool, operation: str, numbers: list[Arg], count: Arg) -> None:
        with client_slots[partitioned].example() as slot:
            if not slot.extra.get("probe"):
                slot.sender.send_messages(rb.Message(b"probe", message_id="probe"))
                slot.extra["probe"] = True
            values = [n.value for n in numbers]
            if operation == "peek":
                outcome = expect(combined(numbers[0], count),
                                 lambda: slot.receiver.peek_messages(count.value, sequence_number=values[0]),
                                 f"peek_messages({count.value!r}, sequence_number={values[0]!r})")
                if outcome.accepted:
                    assert all(m.sequence_number >= values[0] for m in outcome.result)
                    assert [m.body for m in outcome.result] in ([], [b"probe"])
            elif operation == "receive_deferred":
                expect(Verdict.INVALID, lambda: slot.receiver.receive_deferred_messages(values),
                       f"receive_deferred_messages({values!r}) with no deferred message")
            else:
                expect(Verdict.INVALID, lambda: slot.sender.cancel_scheduled_messages(values),
                       f"cancel_scheduled_messages({values!r}) with no scheduled message")

    run()


def test_sender_arguments(client_slots: dict[bool, QueueSlot], long_run: bool) -> None:
    """send_messages timeouts, create_message_batch sizes and schedule_messages times: refused with
    a typed error, or the message arrives (or is scheduled, peeked and cancelled) identical."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(partitioned=st.booleans(), operation=st.sampled_from(["timeout", "batch", "schedule"]),
           timeout=send_timeouts(), size=batch_sizes(), when=schedule_arguments(), body=st.binary(max_size=300))
    @fuzz_example
    def run(partitioned: bool, operation: str, timeout: Arg, size: Arg, when: Arg, body: bytes) -> None:
        with client_slots[partitioned].example() as slot:
            message = rb.Message(body, message_id="m")
            case = MessageCase(Arg(body, Verdict.VALID), {"message_id": Arg("m", Verdict.VALID)})
            if operation == "timeout":
                outcome = expect(timeout.verdict, lambda: slot.sender.send_messages(message, timeout=timeout.value),
                                 f"send_messages(timeout={timeout.value!r})")
                if isinstance(outcome.error, (errors.OperationTimeoutError, errors.PartitionUnavailableError)):
                    slot.dirty = True  # a send that timed out may still have been stored
                    return
                receive_expected(slot, [Sent(case)] if outcome.accepted else [])
            elif operation == "batch":
                outcome = expect(size.verdict, lambda: slot.sender.create_message_batch(size.value),
                                 f"create_message_batch({size.value!r})")
                if not outcome.accepted:
                    return
                batch = outcome.result
                limit = batch.max_size_in_bytes
                fits = (Verdict.VALID if limit >= len(body) + 1024 else
                        Verdict.INVALID if limit < len(body) else Verdict.EDGE)
                added = expect(fits, lambda: batch.add_message(message), f"add_message to a batch of {limit} bytes",
                               (errors.MessageSizeExceededError,)).accepted
                slot.sender.send_messages(batch)
                receive_expected(slot, [Sent(case)] if added else [])
            else:
                sent_at = time.time()
                outcome = expect(when.verdict, lambda: slot.sender.schedule_messages(message, when.value),
                                 f"schedule_messages(schedule_time_utc={when.value!r})")
                if not outcome.accepted:
                    return
                assert len(outcome.result) == 1, f"schedule_messages returned {outcome.result!r}"
                due = epoch_of(when.value)
                scheduled = MessageCase(case.body, {**case.fields, "scheduled_enqueue_time_utc": when})
                if due > sent_at + FUTURE_MARGIN_S:
                    peeked = slot.receiver.peek_messages(2, sequence_number=outcome.result[0])
                    assert [m.sequence_number for m in peeked] == outcome.result
                    receive_expected(slot, [Sent(scheduled, scheduled=True)])
                else:
                    receive_expected(slot, [Sent(scheduled, certain=due <= sent_at)])

    run()


def test_namespace_still_serves_after_management_fuzz(namespace: rb.Namespace) -> None:
    """No queue from the create examples is left, every partition's store passes its integrity
    check, and a new queue works end to end."""
    assert not [q.name for q in namespace.list_queues() if q.name.startswith(CREATE_PREFIX)]
    assert_namespace_healthy(namespace)
