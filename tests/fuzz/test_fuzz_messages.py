"""Fuzzing message fields against a live namespace.

Each example builds messages from generated fields; a message is either refused at construction
(TypeError, ValueError, or a typed broker error) or sent, and every message that was sent comes
back identical: received by a peek-lock receiver, or (scheduled well ahead) counted as scheduled,
seen in a peek and cancelled.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ray_broker as rb
from ray_broker import errors

from .strategies import (
    MESSAGE_LIMIT_BYTES,
    Arg,
    MessageCase,
    Verdict,
    ids,
    large_body_sizes,
    message_cases,
    mostly,
    session_id_pools,
    tag,
)
from .support import (
    CONSTRUCTION_ERRORS,
    SETTLE_S,
    QueueSlot,
    Sent,
    assert_namespace_healthy,
    classify,
    differences,
    expected_body,
    expect,
    fuzz_example,
    fuzz_settings,
    receive_expected,
)

SAFE_BATCH_BYTES = 250_000
"""A batch whose bodies total this much certainly fits in 256 KiB with its headers."""


@pytest.fixture
def plain_slot(namespace: rb.Namespace) -> Iterator[QueueSlot]:
    """A partitioned queue with default settings."""
    slot = QueueSlot(namespace, {"enable_partitioning": True})
    yield slot
    slot.drop()


@pytest.fixture
def session_slot(namespace: rb.Namespace) -> Iterator[QueueSlot]:
    """A partitioned queue that requires sessions."""
    slot = QueueSlot(namespace, {"enable_partitioning": True, "requires_session": True})
    yield slot
    slot.drop()


@pytest.fixture
def dedup_slot(namespace: rb.Namespace) -> Iterator[QueueSlot]:
    """A partitioned queue with duplicate detection over a window longer than any run (re-created
    after a failure: the test's record of the ids it has sent must match the queue's)."""
    slot = QueueSlot(namespace, {"enable_partitioning": True, "requires_duplicate_detection": True,
                                 "duplicate_detection_history_time_window": timedelta(days=7)},
                     keep_after_failure=False)
    yield slot
    slot.drop()


def build(cases: list[MessageCase]) -> list[tuple[MessageCase, rb.Message]]:
    """Construct each message; an invalid one must be refused, a valid one accepted."""
    built = []
    for case in cases:
        outcome = expect(case.verdict, lambda: rb.Message(case.body.value, **case.kwargs()),
                         f"rb.Message({case!r})", CONSTRUCTION_ERRORS)
        if outcome.accepted:
            built.append((case, outcome.result))
    return built


def batch_verdict(cases: list[MessageCase]) -> Verdict:
    """What a send of messages that were all constructed must do: succeed if every one is valid."""
    return Verdict.VALID if all(c.verdict is Verdict.VALID for c in cases) else Verdict.EDGE


def send_requiring(slot: QueueSlot, cases: list[MessageCase], required: str) -> list[MessageCase]:
    """Send, in one call, the cases whose messages could be built, on a queue where every message
    needs the field `required` (a message without it must make the send fail); returns what was
    sent (nothing when the send was refused)."""
    built = build(cases)
    if not built:
        return []
    verdict = (Verdict.INVALID if any(c.value(required) is None for c, _ in built)
               else batch_verdict([c for c, _ in built]))
    if not expect(verdict, lambda: slot.sender.send_messages([m for _, m in built]), "send_messages").accepted:
        return []
    return [c for c, _ in built]


def test_message_fields_round_trip(plain_slot: QueueSlot, long_run: bool) -> None:
    """Bodies, ids, headers, property maps of every type, TTLs and schedule times, several per send."""

    @fuzz_settings(long_run, ci=300, long=6000)
    @given(cases=st.lists(message_cases(), min_size=1, max_size=6))
    @fuzz_example
    def run(cases: list[MessageCase]) -> None:
        with plain_slot.example() as slot:
            built = build(cases)
            if not built:
                return
            sent_at = time.time()
            outcome = expect(batch_verdict([c for c, _ in built]),
                             lambda: slot.sender.send_messages([m for _, m in built]), "send_messages")
            if outcome.accepted:
                receive_expected(slot, [classify(case, sent_at) for case, _ in built])

    run()


def size_verdict(total: int) -> Verdict:
    """Bodies of `total` bytes in one message or batch: fit, may not fit (headers), cannot fit."""
    return (Verdict.VALID if total <= SAFE_BATCH_BYTES else
            Verdict.INVALID if total > MESSAGE_LIMIT_BYTES else Verdict.EDGE)


def test_message_size_limits(plain_slot: QueueSlot, long_run: bool) -> None:
    """Bodies around the 256 KiB limit, sent alone, as a list, or packed into a MessageBatch."""

    @fuzz_settings(long_run, ci=20, long=300)
    @given(sizes=st.lists(large_body_sizes(), min_size=1, max_size=3), as_text=st.booleans(), packed=st.booleans())
    @fuzz_example
    def run(sizes: list[Arg], as_text: bool, packed: bool) -> None:
        with plain_slot.example() as slot:
            cases = [MessageCase(Arg("é" * (s.value // 2) if as_text else bytes([i]) * s.value, s.verdict),
                                 {"message_id": Arg(f"big-{i}", Verdict.VALID)}) for i, s in enumerate(sizes)]
            sizes_in_bytes = [len(expected_body(c.body.value)) for c in cases]
            messages = [rb.Message(c.body.value, **c.kwargs()) for c in cases]
            added: list[MessageCase] = []
            if packed:
                batch = slot.sender.create_message_batch()
                for case, message, size in zip(cases, messages, sizes_in_bytes):
                    total = sum(sizes_in_bytes[:len(added)]) + size
                    if not expect(size_verdict(total), lambda: batch.add_message(message),
                                  f"add_message up to {total} bytes", (errors.MessageSizeExceededError,)).accepted:
                        break
                    added.append(case)
                slot.sender.send_messages(batch)
            elif expect(size_verdict(sum(sizes_in_bytes)), lambda: slot.sender.send_messages(messages),
                        f"send_messages of {sum(sizes_in_bytes)} bytes", (errors.MessageSizeExceededError,)).accepted:
                added = cases
            receive_expected(slot, [Sent(c) for c in added])

    run()


def test_session_messages_round_trip(session_slot: QueueSlot, long_run: bool) -> None:
    """Messages on a session queue: a message without a session id refuses the send; otherwise
    each session's receiver gets its messages back identical and in the order they were sent."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(pool=session_id_pools(), data=st.data())
    @fuzz_example
    def run(pool: list[Arg], data: st.DataObject) -> None:
        sessions = mostly(st.sampled_from(pool), st.just(Arg(None, Verdict.VALID, "no session")), one_in=10)
        cases = data.draw(st.lists(message_cases(timing=False, session_ids=sessions), min_size=1, max_size=6))
        with session_slot.example() as slot:
            sent = send_requiring(slot, cases, "session_id")
            for session_id in dict.fromkeys(c.value("session_id") for c in sent):
                expected = [c for c in sent if c.value("session_id") == session_id]
                got: list[rb.ReceivedMessage] = []
                with slot.ns.get_queue_receiver(slot.name, session_id=session_id, max_wait_time=5) as receiver:
                    deadline = time.monotonic() + SETTLE_S
                    while len(got) < len(expected) and time.monotonic() < deadline:
                        batch = receiver.receive_messages(len(expected), max_wait_time=1.0)
                        for message in batch:
                            receiver.complete_message(message)
                        got.extend(batch)
                    receiver.flush()
                assert len(got) == len(expected), f"session {session_id!r}: sent {len(expected)}, received {len(got)}"
                for position, (case, message) in enumerate(zip(expected, got)):
                    found = differences(case, message)
                    assert not found, f"session {session_id!r}, message {position} (in send order): {found}"
            assert slot.ns.get_queue_runtime_properties(slot.name).total_message_count == 0

    run()


def test_duplicate_detection_keeps_first_of_each_id(dedup_slot: QueueSlot, long_run: bool) -> None:
    """With duplicate detection, a message whose id (and partition key) was seen before on the
    queue is dropped; every other one comes back identical. Messages without an id refuse the send."""

    @fuzz_settings(long_run, ci=60, long=1200)
    @given(pool=st.lists(ids("message_id").filter(lambda a: a.verdict is Verdict.VALID and a.value is not None),
                         min_size=1, max_size=4), data=st.data())
    @fuzz_example
    def run(pool: list[Arg], data: st.DataObject) -> None:
        message_ids = mostly(st.sampled_from(pool), tag(st.none(), Verdict.VALID, "no message id"), one_in=12)
        cases = data.draw(st.lists(message_cases(timing=False, message_ids=message_ids), min_size=1, max_size=6))
        with dedup_slot.example() as slot:
            sent = send_requiring(slot, cases, "message_id")
            seen: set[tuple[str, str | None]] = slot.extra.setdefault("seen", set())
            kept = []
            for case in sent:
                session_id = case.value("session_id")
                key = (case.value("message_id"), session_id if session_id is not None else case.value("partition_key"))
                if key not in seen:
                    seen.add(key)
                    kept.append(Sent(case))
            receive_expected(slot, kept)

    run()


def test_namespace_still_serves_after_message_fuzz(namespace: rb.Namespace) -> None:
    """Every partition's store passes its integrity check, and a new queue works end to end."""
    assert_namespace_healthy(namespace)
