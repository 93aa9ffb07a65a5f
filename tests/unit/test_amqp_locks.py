"""The front end's table of message locks: any receiver of the entity finds a lock by its token,
another entity's node does not, and locks that ran out unsettled are swept."""
from __future__ import annotations

import uuid

import pytest

from ray_broker import codec
from ray_broker.amqp import locks as locks_module
from ray_broker.amqp.locks import HeldLocks
from ray_broker.errors import MessageLockLostError
from ray_broker.message import ReceivedMessage


def locked(until: float) -> ReceivedMessage:
    return ReceivedMessage({"payload": codec.packb({"body": b"x"}), "sequence_number": 1,
                            "lock_token": uuid.uuid4().bytes, "locked_until": until}, receiver_key="r1")


def test_a_lock_is_found_by_its_token_on_its_entity_only_until_dropped() -> None:
    table: HeldLocks[str] = HeldLocks(clock=lambda: 100.0)
    message = locked(130.0)
    table.hold("Orders", "receiver-1", message)
    held = table.get(message.lock_token, "orders")  # entity names are case-insensitive
    assert (held.receiver, held.message) == ("receiver-1", message)
    with pytest.raises(MessageLockLostError, match="not held on 'orders/\\$deadletterqueue'"):
        table.get(message.lock_token, "orders/$deadletterqueue")
    table.drop(message.lock_token)
    with pytest.raises(MessageLockLostError):
        table.get(message.lock_token, "orders")


def test_locks_that_ran_out_unsettled_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locks_module, "PRUNE_EVERY", 3)
    now = [100.0]
    table: HeldLocks[str] = HeldLocks(clock=lambda: now[0])
    old, fresh = locked(30.0), locked(130.0)
    table.hold("q", "r", old)
    table.hold("q", "r", fresh)
    now[0] = 100.0 + locks_module.GRACE_S
    table.hold("q", "r", locked(200.0))
    assert len(table) == 2
    assert table.get(fresh.lock_token, "q").message is fresh


def test_a_message_bound_to_another_receiver_keeps_its_lock_as_it_is_now() -> None:
    message = locked(130.0)
    message.locked_until_utc = message.locked_until_utc.replace(year=2030)
    copy = message.bound_to("r2")
    assert (copy.lock_token, copy.locked_until, copy.sequence_number) == (
        message.lock_token, message.locked_until, message.sequence_number)
    assert copy._receiver_key == "r2" and copy is not message  # noqa: SLF001
