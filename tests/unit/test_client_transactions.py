"""Transactions in the client, with no Ray: each operation is pinned to one partition key and one
partition at the call that makes it, limits hold, the 2-minute limit runs on a manual clock, and a
commit carries everything in one call (a rollback, none)."""
from __future__ import annotations

from typing import Any

import pytest

from ray_broker import Message
from ray_broker.clock import ManualClock
from ray_broker.config import NamespaceConfig
from ray_broker.client.flow import run
from ray_broker.client.handle import NamespaceBase
from ray_broker.client.sender_flows import SenderBase
from ray_broker.client.transacting import TransactionBase, transaction_key
from ray_broker.entities import normalize_queue_options
from ray_broker.errors import InvalidArgumentError, InvalidOperationError, MessageLockLostError, TransactionTimeoutError
from ray_broker.message import ReceivedMessage
from ray_broker.protocol import MAX_TRANSACTION_OPERATIONS, TRANSACTION_TIMEOUT_S
from ray_broker.routing import make_sequence_number, partition_for_key
from ray_broker.sku import SKUS
from ray_broker.wire import Send, Settle

from .test_client_flows import FakeLink, receiver

COUNT = 16
T = 1_700_000_000.0
LOCKED_UNTIL = 4_000_000_000.0
"""Far ahead: the receiver checks locks against the real time."""


def definition(name: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "kind": "queue", "options": normalize_queue_options(options)}


DEFINITIONS = {"in": definition("in", enable_partitioning=True), "out": definition("out", enable_partitioning=True),
               "sessions": definition("sessions", enable_partitioning=True, requires_session=True),
               "single": definition("single")}


class Fixture:
    """A fake link that knows the queues above, a manual clock, a transaction, a sender per queue
    and a receiver of "in"."""

    def __init__(self) -> None:
        self.link = FakeLink(definition=lambda name, fresh: DEFINITIONS[name],
                             commit_transaction=self.commit)
        self.clock = ManualClock(T)
        self.txn = TransactionBase(self.link, SKUS["standard"], COUNT, self.clock)
        self.receiver = receiver(self.link, "in")
        self.committed: list[tuple[Any, ...]] = []
        self.reply: Any = None

    def commit(self, index: int, txn_id: str, deadline: float, operations: list[Any], timeout: float) -> Any:
        self.committed.append((index, txn_id, deadline, operations))
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply if self.reply is not None else [
            [len(op.envelopes)] if isinstance(op, Send) else [None] * len(op.settlements) for op in operations]

    def send(self, entity: str, *messages: Message) -> None:
        run(self.link, SenderBase(self.link, SKUS["standard"], entity)._send(list(messages), None, self.txn))

    def received(self, key: str, seq_counter: int = 1, **fields: Any) -> ReceivedMessage:
        """A message of "in" held by the receiver, keyed by partition key `key` (unless `fields` say otherwise)."""
        wire = {"body": b"x", "partition_key": key, **fields}
        seq = make_sequence_number(partition_for_key(str(fields.get("session_id") or key), COUNT), seq_counter)
        return ReceivedMessage({**wire, "sequence_number": seq, "lock_token": b"t" * 16, "locked_until": LOCKED_UNTIL},
                               receiver_key=self.receiver._key)

    def settle(self, message: ReceivedMessage, action: str = "complete") -> None:
        run(self.link, self.receiver._settle_in(self.txn, message, action))


@pytest.fixture
def fx() -> Fixture:
    return Fixture()


def test_a_transaction_key_is_the_session_then_the_partition_key_then_the_message_id() -> None:
    assert transaction_key({"session_id": "s", "partition_key": "s", "message_id": "m"}) == ("s", "session")
    assert transaction_key({"partition_key": "p", "message_id": "m"}) == ("p", "partition key")
    assert transaction_key({"message_id": "m"}) == ("m", "message id")
    assert transaction_key({}) is None


def test_a_commit_carries_every_operation_to_the_pinned_partition(fx: Fixture) -> None:
    message = fx.received("k")
    fx.settle(message)
    assert message._settled, "a settlement in a transaction counts until it rolls back"
    fx.send("out", Message("a", partition_key="k"), Message("b", partition_key="k"))
    assert (fx.txn.partition_key, fx.txn.operation_count) == ("k", 3)
    assert fx.link.operations() == ["definition", "definition"], "nothing reaches the broker before the commit"
    run(fx.link, fx.txn._commit())
    ((index, txn_id, deadline, operations),) = fx.committed
    assert (index, txn_id, deadline) == (partition_for_key("k", COUNT), fx.txn.transaction_id, T + TRANSACTION_TIMEOUT_S)
    assert [type(op) for op in operations] == [Settle, Send]
    (settlement,) = operations[0].settlements
    assert (settlement.action, settlement.sequence_number) == ("complete", message.sequence_number)
    with pytest.raises(InvalidOperationError, match="committed"):
        fx.send("out", Message("c", partition_key="k"))


def test_a_second_key_or_session_or_a_keyless_message_is_refused_at_the_operation(fx: Fixture) -> None:
    fx.send("out", Message("a", partition_key="k1"))
    with pytest.raises(InvalidOperationError, match="'k1'.*'k2'"):
        fx.send("out", Message("b", partition_key="k2"))
    with pytest.raises(InvalidOperationError, match="no partition key"):
        fx.send("out", Message("c"))
    with pytest.raises(InvalidOperationError, match="'k1'.*'other'"):
        fx.settle(fx.received("other"))
    sessions = Fixture()
    sessions.send("sessions", Message("a", session_id="s1"))
    with pytest.raises(InvalidOperationError, match="session 's1'.*session 's2'.*one session"):
        sessions.send("sessions", Message("b", session_id="s2"))
    assert fx.txn.operation_count == 1 and sessions.txn.operation_count == 1, "a refused operation does not join"


def test_operations_on_another_partition_are_refused_naming_both(fx: Fixture) -> None:
    home = partition_for_key("entity:single", COUNT)
    key = next(k for k in ("k1", "k2", "k3") if partition_for_key(k, COUNT) != home)
    fx.send("out", Message("a", partition_key=key))
    with pytest.raises(InvalidOperationError, match=f"partition {home} .*'single'.*partition "):
        fx.send("single", Message("b", partition_key=key))


def test_at_most_one_hundred_operations(fx: Fixture) -> None:
    fx.send("out", *[Message(str(i), partition_key="k") for i in range(MAX_TRANSACTION_OPERATIONS)])
    with pytest.raises(InvalidOperationError, match="at most 100"):
        fx.send("out", Message("one more", partition_key="k"))


def test_two_minutes_after_the_first_operation_it_is_rolled_back(fx: Fixture) -> None:
    fx.clock.advance(1000)
    message = fx.received("k")
    fx.settle(message)
    fx.clock.advance(TRANSACTION_TIMEOUT_S + 1)
    with pytest.raises(TransactionTimeoutError, match="rolled back"):
        run(fx.link, fx.txn._commit())
    assert not fx.committed and not message._settled
    with pytest.raises(InvalidOperationError, match="rolled back"):
        fx.send("out", Message("a", partition_key="k"))


def test_a_rollback_or_a_failed_commit_leaves_messages_to_settle_again(fx: Fixture) -> None:
    message = fx.received("k")
    fx.settle(message)
    fx.txn._rollback()
    assert not message._settled and not fx.committed
    again = Fixture()
    held = again.received("k")
    again.settle(held)
    again.reply = MessageLockLostError("lost")
    with pytest.raises(MessageLockLostError):
        run(again.link, again.txn._commit())
    assert not held._settled


def test_a_renewal_in_a_transaction_applies_its_new_expiry_on_commit(fx: Fixture) -> None:
    message = fx.received("k")
    fx.settle(message, "renew")
    fx.reply = [[LOCKED_UNTIL + 60]]
    run(fx.link, fx.txn._commit())
    assert message.locked_until == LOCKED_UNTIL + 60 and not message._settled


def test_only_a_transaction_of_this_handle_is_taken(fx: Fixture) -> None:
    with pytest.raises(InvalidArgumentError, match="ns.transaction"):
        run(fx.link, fx.receiver._settle_in("txn", fx.received("k"), "complete"))
    other = TransactionBase(FakeLink(), SKUS["standard"], COUNT)
    with pytest.raises(InvalidOperationError, match="another namespace handle"):
        run(fx.link, SenderBase(fx.link, SKUS["standard"], "out")._send(Message("a", partition_key="k"), None, other))


def test_the_basic_tier_has_no_transactions() -> None:
    class Handle(NamespaceBase[Any, Any, TransactionBase]):
        transaction_class = TransactionBase

    def handle(sku: str) -> Handle:
        return Handle(NamespaceConfig("n", sku, 16, None, "memory", 1, None), FakeLink(), relay=False)

    with pytest.raises(InvalidOperationError, match="the basic tier does not offer transactions"):
        handle("basic").transaction()
    assert isinstance(handle("standard").transaction(), TransactionBase)
