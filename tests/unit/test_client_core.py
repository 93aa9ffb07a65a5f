"""Client logic without I/O: receiver targets, batches and size limits, settlement checks."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from ray_broker import Message, ReceivedMessage
from ray_broker.client.core import (
    DEFAULT_MAX_WAIT_S,
    MAX_WAIT_S,
    NEXT_AVAILABLE_SESSION,
    MessageBatch,
    ReceiveMode,
    SubQueue,
    apply_settlement,
    check_sequence_number,
    envelopes_for_send,
    new_batch,
    receive_target,
    schedule_epoch,
    sequence_list,
    settlement_op,
    wait_seconds,
)
from ray_broker.engine.partition import DEAD_LETTER, MAIN, TRANSFER_DEAD_LETTER
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageAlreadySettled,
    MessageLockLostError,
    MessageSizeExceededError,
)
from ray_broker.sku import SKUS
from ray_broker.wire import Settlement

STANDARD, PREMIUM = SKUS["standard"], SKUS["premium"]
TOKEN = bytes(range(16))


def target(entity: str, **kwargs: Any) -> Any:
    """`receive_target` with the receiver's defaults."""
    args: dict[str, Any] = {"receive_mode": ReceiveMode.PEEK_LOCK, "sub_queue": None, "session_id": None,
                            "prefetch_count": 0, "max_wait_time": None, **kwargs}
    return receive_target(entity, **args)


def received(*, lock_token: bytes | None = TOKEN, receiver_key: str = "r1") -> ReceivedMessage:
    """A message as receiver `r1` got it, locked for another minute of real time."""
    record = {"payload": Message("x").to_envelope()["payload"], "sequence_number": 42, "delivery_count": 1,
              "lock_token": lock_token, "locked_until": time.time() + 60}
    return ReceivedMessage(record, receiver_key=receiver_key)


def test_a_plain_target() -> None:
    got = target("orders")
    assert (got.entity, got.subq, got.mode, got.session_id, got.max_wait_time) == (
        "orders", MAIN, ReceiveMode.PEEK_LOCK, None, DEFAULT_MAX_WAIT_S)


@pytest.mark.parametrize(("path", "entity", "subq"), [
    ("orders/$deadletterqueue", "orders", DEAD_LETTER),
    ("Orders/$DeadLetterQueue", "Orders", DEAD_LETTER),
    ("orders/$Transfer/$DeadLetterQueue", "orders", TRANSFER_DEAD_LETTER),
    ("events/subscriptions/audit/$deadletterqueue", "events/subscriptions/audit", DEAD_LETTER),
])
def test_dead_letter_paths(path: str, entity: str, subq: int) -> None:
    got = target(path)
    assert (got.entity, got.subq) == (entity, subq)


def test_sub_queue_argument() -> None:
    assert target("orders", sub_queue=SubQueue.DEAD_LETTER).subq == DEAD_LETTER
    assert target("orders", sub_queue=SubQueue.TRANSFER_DEAD_LETTER).subq == TRANSFER_DEAD_LETTER
    assert target("orders/$deadletterqueue", sub_queue=SubQueue.DEAD_LETTER).subq == DEAD_LETTER
    with pytest.raises(InvalidArgumentError):
        target("orders/$deadletterqueue", sub_queue=SubQueue.TRANSFER_DEAD_LETTER)
    with pytest.raises(InvalidArgumentError, match="sub_queue"):
        target("orders", sub_queue="graveyard")


def test_dead_letter_queues_have_no_sessions() -> None:
    with pytest.raises(InvalidOperationError, match="no sessions"):
        target("orders/$deadletterqueue", session_id="s1")


def test_session_choices() -> None:
    assert target("orders", session_id="s1").session_id == "s1"
    assert target("orders", session_id=NEXT_AVAILABLE_SESSION).session_id is NEXT_AVAILABLE_SESSION
    assert target("orders", session_id="").session_id == ""  # the session "", as Service Bus takes it
    for bad in ("s" * 129, 5):
        with pytest.raises(InvalidArgumentError, match="session_id"):
            target("orders", session_id=bad)


def test_a_share_of_the_partitions() -> None:
    assert target("orders").partitions is None
    assert target("orders", partitions=[12, 0, 4, 4], partition_count=16).partitions == (0, 4, 12)
    for bad in ([], [16], [-1], [True], ["1"], 3, "0"):
        with pytest.raises(InvalidArgumentError, match="partitions"):
            target("orders", partitions=bad, partition_count=16)
    with pytest.raises(InvalidOperationError, match="session"):
        target("orders", session_id="s1", partitions=[0], partition_count=16)


@pytest.mark.parametrize("kwargs", [
    {"receive_mode": "peeklock-ish"}, {"prefetch_count": -1}, {"prefetch_count": True},
    {"max_wait_time": -1}, {"max_wait_time": float("nan")}, {"max_wait_time": "5"},
])
def test_bad_receiver_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        target("orders", **kwargs)


def test_bad_entity_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        target("bad name/$deadletterqueue")
    with pytest.raises(InvalidArgumentError):
        target(7)  # type: ignore[arg-type]


def test_waiting_times_and_modes() -> None:
    assert target("q", max_wait_time=timedelta(seconds=2.5)).max_wait_time == 2.5
    assert target("q", max_wait_time=0).max_wait_time == 0.0
    assert wait_seconds(1e300, 1.0) == wait_seconds(10**40, 1.0) == wait_seconds(timedelta.max, 1.0) == MAX_WAIT_S
    for bad in (-1, float("nan"), float("inf"), 10**400, "5", True):
        with pytest.raises(InvalidArgumentError, match="waiting time"):
            wait_seconds(bad, 1.0)
    assert target("q", receive_mode=ReceiveMode.RECEIVE_AND_DELETE).mode is ReceiveMode.RECEIVE_AND_DELETE


def test_a_batch_refuses_what_does_not_fit_and_stays_unchanged() -> None:
    batch = new_batch(STANDARD, 1000)
    batch.add_message(Message(b"x" * 400))
    batch.add_message(Message(b"x" * 400))
    size = batch.size_in_bytes
    with pytest.raises(MessageSizeExceededError, match="send this batch"):
        batch.add_message(Message(b"x" * 400))
    assert (len(batch), batch.size_in_bytes) == (2, size)
    assert size == sum(e["size"] for e in batch.envelopes)
    with pytest.raises(TypeError):
        batch.add_message(b"raw")  # type: ignore[arg-type]


def test_batch_size_is_bounded_by_the_tier() -> None:
    assert new_batch(STANDARD, None).max_size_in_bytes == 256 * 1024
    assert new_batch(PREMIUM, None).max_size_in_bytes == 1024 * 1024
    assert new_batch(PREMIUM, 512 * 1024).max_size_in_bytes == 512 * 1024
    for bad in (0, 256 * 1024 + 1, True):
        with pytest.raises(InvalidArgumentError):
            new_batch(STANDARD, bad)


def test_envelopes_for_a_message_a_list_and_a_batch() -> None:
    assert len(envelopes_for_send(STANDARD, Message("a"))) == 1
    assert len(envelopes_for_send(STANDARD, [Message("a"), Message("b")])) == 2
    assert len(envelopes_for_send(STANDARD, (m for m in [Message("a")]))) == 1
    batch = MessageBatch(1000)
    batch.add_message(Message("a"))
    assert envelopes_for_send(STANDARD, batch) == batch.envelopes
    for bad in ("text", b"bytes", {"body": "x"}, 5, [Message("a"), "b"]):
        with pytest.raises(TypeError):
            envelopes_for_send(STANDARD, bad)


def test_a_message_sent_without_an_id_goes_with_a_new_one_that_keys_nothing() -> None:
    from ray_broker import codec

    plain, named = Message("a"), Message("b", message_id="mine")
    batch = MessageBatch(1000)
    batch.add_message(Message("c"))
    envelopes = envelopes_for_send(STANDARD, [plain, named, plain]) + batch.envelopes
    ids = [codec.unpackb(e["payload"])["message_id"] for e in envelopes]
    assert ids[1] == "mine" and len({ids[0], ids[2], ids[3]}) == 3
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in (ids[0], ids[2], ids[3]))  # uuid hex, new each send
    assert plain.message_id is None  # the caller's message is left as it is
    assert ["message_id" in e for e in envelopes] == [False, True, False, False]  # unkeyed as sent


def test_message_size_limits_per_tier() -> None:
    big = Message(b"x" * (300 * 1024))
    with pytest.raises(MessageSizeExceededError, match="per message"):
        envelopes_for_send(STANDARD, big)
    assert len(envelopes_for_send(PREMIUM, big)) == 1
    with pytest.raises(MessageSizeExceededError, match="per message"):
        envelopes_for_send(PREMIUM, Message(b"x" * (1024 * 1024)))


def test_batch_size_limits_per_tier() -> None:
    parts = [Message(b"x" * (100 * 1024)) for _ in range(3)]
    with pytest.raises(MessageSizeExceededError, match="per batch"):
        envelopes_for_send(STANDARD, parts)
    assert len(envelopes_for_send(PREMIUM, parts)) == 3


def test_schedule_time_goes_on_every_envelope() -> None:
    when = datetime(2030, 1, 1, tzinfo=timezone.utc)
    envelopes = envelopes_for_send(STANDARD, [Message("a"), Message("b")], schedule_at=when.timestamp())
    assert [e["scheduled"] for e in envelopes] == [when.timestamp()] * 2


@pytest.mark.parametrize("when", [None, 0.0, "2030-01-01"])
def test_a_schedule_time_must_be_a_datetime_in_range(when: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="schedule_time_utc"):
        schedule_epoch(when)


def test_sequence_numbers_are_ints_in_the_store_range() -> None:
    assert sequence_list(5) == [5]
    assert sequence_list((1, 2)) == [1, 2]
    assert sequence_list([]) == []
    for bad in ("", "12", 0.0, None, [1, "2"], [True], -1, 2**63):
        with pytest.raises(InvalidArgumentError, match="sequence number"):
            sequence_list(bad)
    assert check_sequence_number(2**63 - 1) == 2**63 - 1


def test_settlement_op_builds_the_request() -> None:
    msg = received()
    assert settlement_op(msg, "dead_letter", "r1", False, "why", "details") == Settlement(
        action="dead_letter", sequence_number=42, lock_token=TOKEN, reason="why", description="details")
    with pytest.raises(TypeError, match="reason"):
        settlement_op(msg, "dead_letter", "r1", False, 5)


def test_settling_twice_raises_already_settled() -> None:
    msg = received()
    op = settlement_op(msg, "complete", "r1", False)
    assert apply_settlement(msg, op.action, None) is None
    with pytest.raises(MessageAlreadySettled):
        settlement_op(msg, "complete", "r1", False)
    assert issubclass(MessageAlreadySettled, ValueError)


def test_a_receive_and_delete_or_peeked_message_cannot_be_settled() -> None:
    with pytest.raises(MessageAlreadySettled, match="RECEIVE_AND_DELETE"):
        settlement_op(received(lock_token=None), "complete", "r1", False)
    peeked = ReceivedMessage({"payload": Message("x").to_envelope()["payload"], "sequence_number": 1,
                              "lock_token": TOKEN}, peeked=True)
    with pytest.raises(MessageAlreadySettled):
        settlement_op(peeked, "complete", "r1", False)


def test_another_receivers_message_is_refused() -> None:
    with pytest.raises(InvalidOperationError, match="another receiver"):
        settlement_op(received(receiver_key="r2"), "complete", "r1", False)


def test_a_closed_receiver_settles_nothing() -> None:
    with pytest.raises(InvalidOperationError, match="closed"):
        settlement_op(received(), "complete", "r1", True)
    with pytest.raises(TypeError):
        settlement_op("not a message", "complete", "r1", False)


def test_apply_settlement_raises_the_broker_error_or_records_renewal() -> None:
    msg = received()
    with pytest.raises(MessageLockLostError):
        apply_settlement(msg, "complete", MessageLockLostError("lost"))
    settlement_op(msg, "complete", "r1", False)
    until = float(int(time.time()) + 120)
    renewed = apply_settlement(msg, "renew", until)
    assert renewed == msg.locked_until_utc
    assert renewed is not None and renewed.timestamp() == until
    settlement_op(msg, "complete", "r1", False)
