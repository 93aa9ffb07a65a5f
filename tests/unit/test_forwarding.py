"""The forwarder's outbox on one partition: batches taken, kept across a restart, finished or
transfer-dead-lettered; hops counted and limited; dead-lettered messages forwarded; with no Ray."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message, codec
from ray_broker.engine.outbox import HOP_LIMIT_REASON
from ray_broker.engine.partition import DEAD_LETTER, TRANSFER_DEAD_LETTER
from ray_broker.errors import InvalidOperationError
from ray_broker.message import ReceivedMessage
from ray_broker.protocol import TRANSFER_HOPS_FIELD

from .conftest import Broker


def wires(transfer: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of a transfer as their wire forms."""
    return [codec.unpackb(env["payload"]) for env in transfer["envelopes"]]


def counts(broker: Broker, entity: str = "src") -> dict[str, int]:
    runtime = broker.engine.runtime(entity)
    return {key: runtime[key] for key in ("active", "transfer", "dead_letter", "transfer_dead_letter")}


@pytest.fixture
def source(broker: Broker) -> Broker:
    """A queue "src" that forwards to "dst" (which lives elsewhere: the forwarder sends there)."""
    broker.create_queue("src", forward_to="dst")
    return broker


def test_a_batch_is_taken_set_aside_and_removed_once_done(source: Broker) -> None:
    source.send("src", Message("a", partition_key="k1"), Message("b", session_id="s"), "c")
    assert counts(source) == {"active": 0, "transfer": 3, "dead_letter": 0, "transfer_dead_letter": 0}
    with pytest.raises(InvalidOperationError, match="forwards its messages to 'dst'"):
        source.receive("src")
    transfer = source.engine.take_transfer(10)
    assert transfer is not None and (transfer["source"], transfer["destination"]) == ("src", "dst")
    assert [w["body"] for w in wires(transfer)] == [b"a", b"b", b"c"]
    assert [w[TRANSFER_HOPS_FIELD] for w in wires(transfer)] == [1, 1, 1]
    assert [(e.get("partition_key"), e.get("session_id")) for e in transfer["envelopes"]] == [
        ("k1", None), (None, "s"), (None, None)], "a forwarded message keeps its keys"
    assert source.engine.take_transfer(10) == transfer, "the unfinished batch comes back until it is done"
    source.send("src", "d")
    source.engine.transfer_done(transfer["id"])
    source.engine.transfer_done(transfer["id"])
    assert counts(source)["transfer"] == 1
    later = source.engine.take_transfer(10)
    assert later is not None and later["id"] > transfer["id"] and [w["body"] for w in wires(later)] == [b"d"]
    source.engine.transfer_done(later["id"])
    assert source.engine.take_transfer(10) is None
    assert source.engine.runtime("src")["size"] == 0 and source.engine.integrity_check()["ok"]


def test_a_restarted_partition_takes_the_same_batch_again(make_broker: Callable[..., Broker], tmp_path: Path) -> None:
    first = make_broker(path=tmp_path / "p.db")
    first.create_queue("src", forward_to="dst")
    first.send("src", "a", "b")
    transfer = first.engine.take_transfer(1)
    first.send("src", "c")
    first.engine.store.close()
    again = make_broker(path=tmp_path / "p.db")
    assert again.engine.take_transfer(10) == transfer


def test_a_message_forwarded_four_times_is_dead_lettered(source: Broker) -> None:
    source.send("src", Message("tired"), Message("fresh"))
    wire = Message("worn").to_wire()
    wire[TRANSFER_HOPS_FIELD] = 4
    payload = codec.packb(wire)
    source.engine.send("src", [{"payload": payload, "size": len(payload)}])
    transfer = source.engine.take_transfer(10)
    assert transfer is not None and [w["body"] for w in wires(transfer)] == [b"tired", b"fresh"]
    source.engine.transfer_done(transfer["id"])
    (dead,) = source.receive("src", subq=DEAD_LETTER)
    assert (dead.body, dead.dead_letter_reason) == (b"worn", HOP_LIMIT_REASON)


def test_a_run_with_a_message_over_the_limit_is_cut(source: Broker) -> None:
    envelopes = []
    for body, hops in (("a", 0), ("b", 4), ("c", 3)):
        wire = Message(body).to_wire()
        wire[TRANSFER_HOPS_FIELD] = hops
        payload = codec.packb(wire)
        envelopes.append({"payload": payload, "size": len(payload)})
    source.engine.send("src", envelopes)
    transfer = source.engine.take_transfer(10)
    assert transfer is not None and [(w["body"], w[TRANSFER_HOPS_FIELD]) for w in wires(transfer)] == [
        (b"a", 1), (b"c", 4)]
    assert [m.body for m in source.receive("src", subq=DEAD_LETTER)] == [b"b"]
    source.engine.transfer_done(transfer["id"])
    assert source.engine.integrity_check()["ok"]


def test_a_batch_that_cannot_arrive_goes_to_the_transfer_dead_letter_queue(source: Broker) -> None:
    source.send("src", "a")
    transfer = source.engine.take_transfer(10)
    assert transfer is not None
    source.engine.transfer_failed(transfer["id"], "MessagingEntityNotFound", "'dst' does not exist")
    assert counts(source) == {"active": 0, "transfer": 0, "dead_letter": 0, "transfer_dead_letter": 1}
    (dead,) = source.receive("src", subq=TRANSFER_DEAD_LETTER)
    assert (dead.body, dead.dead_letter_reason) == (b"a", "MessagingEntityNotFound")
    assert source.engine.take_transfer(10) is None


def test_dead_lettered_messages_are_forwarded_with_their_source(broker: Broker) -> None:
    broker.create_queue("q", forward_dead_lettered_messages_to="dlq-sink")
    broker.send("q", "a", "b")
    a, _ = broker.receive("q")
    broker.settle("q", "dead_letter", a, reason="poison", description="cannot parse")
    transfer = broker.engine.take_transfer(10)
    assert transfer is not None and transfer["destination"] == "dlq-sink"
    (wire,) = wires(transfer)
    assert (wire["body"], wire["dead_letter_source"], wire["dead_letter_reason"]) == (b"a", "q", "poison")
    received = ReceivedMessage({"payload": transfer["envelopes"][0]["payload"], "sequence_number": 1})
    assert (received.dead_letter_source, received.dead_letter_error_description) == ("q", "cannot parse")
    broker.engine.transfer_done(transfer["id"])
    assert counts(broker, "q") == {"active": 1, "transfer": 0, "dead_letter": 0, "transfer_dead_letter": 0}


def test_expired_messages_are_not_forwarded(broker: Broker) -> None:
    broker.create_queue("src", forward_to="dst", dead_lettering_on_message_expiration=True)
    broker.send("src", Message("short", time_to_live=5), Message("long"))
    broker.clock.advance(10)
    transfer = broker.engine.take_transfer(10)
    assert transfer is not None and [w["body"] for w in wires(transfer)] == [b"long"]
    assert counts(broker)["dead_letter"] == 1


def test_deleting_a_source_forgets_its_transfers(source: Broker) -> None:
    source.send("src", "a")
    assert source.engine.take_transfer(10) is not None
    source.engine.delete_entity("src")
    source.create_queue("other", forward_to="dst")
    source.send("other", "b")
    transfer = source.engine.take_transfer(10)
    assert transfer is not None and transfer["source"] == "other"
    assert source.engine.forwards()
    source.engine.delete_entity("other")
    assert not source.engine.forwards()


def test_a_queue_forwarding_to_itself_dead_letters_each_message_after_four_hops(broker: Broker) -> None:
    broker.create_queue("loop", forward_to="loop")
    broker.send("loop", "a", "b")
    rounds = 0
    while (transfer := broker.engine.take_transfer(10)) is not None:
        rounds += 1
        assert rounds <= 4 and transfer["destination"] == "loop"
        broker.engine.send("loop", transfer["envelopes"])
        broker.engine.transfer_done(transfer["id"])
    assert rounds == 4
    dead = broker.receive("loop", subq=DEAD_LETTER)
    assert [(m.body, m.dead_letter_reason) for m in dead] == [(b"a", HOP_LIMIT_REASON), (b"b", HOP_LIMIT_REASON)]
    assert counts(broker, "loop") == {"active": 0, "transfer": 0, "dead_letter": 2, "transfer_dead_letter": 0}


def test_a_dead_lettered_message_past_the_hop_limit_goes_to_the_transfer_dead_letter_queue(broker: Broker) -> None:
    broker.create_queue("q", forward_dead_lettered_messages_to="sink")
    wire = Message("worn").to_wire()
    wire[TRANSFER_HOPS_FIELD] = 4
    payload = codec.packb(wire)
    broker.engine.send("q", [{"payload": payload, "size": len(payload)}])
    (message,) = broker.receive("q")
    broker.settle("q", "dead_letter", message, reason="poison")
    assert broker.engine.take_transfer(10) is None, "it cannot be forwarded again"
    assert broker.engine.take_transfer(10) is None
    (dead,) = broker.receive("q", subq=TRANSFER_DEAD_LETTER)
    assert (dead.body, dead.dead_letter_reason) == (b"worn", HOP_LIMIT_REASON)
    assert counts(broker, "q") == {"active": 0, "transfer": 0, "dead_letter": 0, "transfer_dead_letter": 1}
