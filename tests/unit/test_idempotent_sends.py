"""Idempotent sends: a retried batch of a producer is recognized and not stored twice."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ray_broker import Message
from ray_broker.engine.scheduling import NAMED_PRODUCER_IDLE_S, PRODUCER_IDLE_S
from ray_broker import codec
from ray_broker.engine.enqueueing import PRODUCER_BATCH_HISTORY, pack_runs, unpack_runs
from ray_broker.errors import InvalidArgumentError, QuotaExceededError
from ray_broker.protocol import NAMED_PRODUCER_PREFIX

from .conftest import Broker


def envelopes(*bodies: str, **fields: Any) -> list[dict[str, Any]]:
    """Envelopes of messages with these bodies (and fields)."""
    return [Message(body, **fields).to_envelope() for body in bodies]


def stored(broker: Broker, entity: str = "q") -> int:
    """How many messages an entity holds here."""
    return int(broker.engine.runtime(entity)["active"])


def test_a_retried_batch_returns_its_first_reply_and_stores_nothing(broker: Broker) -> None:
    broker.create_queue("q")
    first = broker.engine.send("q", envelopes("a", "b"), producer=("p1", 7))
    assert first == [1, 2]
    assert broker.engine.send("q", envelopes("a", "b"), producer=("p1", 7)) == [1, 2]
    assert stored(broker) == 2
    assert broker.send("q", "c") == [3]
    assert broker.engine.integrity_check() == {"ok": True, "problems": []}


def test_the_first_reply_keeps_the_duplicates_it_dropped(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    broker.engine.send("q", envelopes("x", message_id="m1"))
    batch = envelopes("y", message_id="m1") + envelopes("z", message_id="m2")
    assert broker.engine.send("q", batch, producer=("p1", 1)) == [None, 2]
    assert broker.engine.send("q", batch, producer=("p1", 1)) == [None, 2]
    assert stored(broker) == 2


def test_other_batch_numbers_are_stored(broker: Broker) -> None:
    broker.create_queue("q")
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 1)) == [1]
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 2)) == [2]
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 0)) == [3]
    assert stored(broker) == 3


def test_entities_and_producers_are_independent(broker: Broker) -> None:
    broker.create_queue("q")
    broker.create_queue("other")
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 1)) == [1]
    assert broker.engine.send("other", envelopes("a"), producer=("p1", 1)) == [1]
    assert broker.engine.send("q", envelopes("a"), producer=("p2", 1)) == [2]
    assert broker.engine.send("q", envelopes("a")) == [3]
    assert (stored(broker, "q"), stored(broker, "other")) == (3, 1)


def test_a_restarted_partition_still_recognizes_the_batch(make_broker: Callable[..., Broker],
                                                          tmp_path: Path) -> None:
    path = tmp_path / "partition-0.sqlite"
    first = make_broker(path=path)
    first.create_queue("q")
    assert first.engine.send("q", envelopes("a", "b"), producer=("p1", 3)) == [1, 2]
    first.engine.store.close()
    second = make_broker(path=path)
    assert second.engine.send("q", envelopes("a", "b"), producer=("p1", 3)) == [1, 2]
    assert stored(second) == 2


def test_a_producer_idle_for_over_an_hour_is_forgotten(broker: Broker) -> None:
    broker.create_queue("q")
    broker.engine.send("q", envelopes("a"), producer=("idle", 1))
    broker.engine.send("q", envelopes("a"), producer=("busy", 1))
    broker.clock.advance(PRODUCER_IDLE_S / 2)
    broker.engine.send("q", envelopes("a"), producer=("busy", 2))
    broker.clock.advance(PRODUCER_IDLE_S / 2)
    broker.engine.housekeeping()
    assert broker.engine.send("q", envelopes("a"), producer=("idle", 1)) == [1]
    broker.clock.advance(1)
    broker.engine.housekeeping()
    assert broker.engine.send("q", envelopes("a"), producer=("idle", 1)) == [4]
    assert broker.engine.send("q", envelopes("a"), producer=("busy", 1)) == [2]


def test_a_named_producer_is_remembered_for_thirty_days(broker: Broker) -> None:
    broker.create_queue("q")
    broker.engine.send("q", envelopes("a"), producer=(NAMED_PRODUCER_PREFIX + "sink", 1))
    broker.clock.advance(NAMED_PRODUCER_IDLE_S - 1)
    broker.engine.housekeeping()
    assert broker.engine.send("q", envelopes("a"), producer=(NAMED_PRODUCER_PREFIX + "sink", 1)) == [1]
    broker.clock.advance(NAMED_PRODUCER_IDLE_S + 1)
    broker.engine.housekeeping()
    assert broker.engine.send("q", envelopes("a"), producer=(NAMED_PRODUCER_PREFIX + "sink", 1)) == [2]


def test_a_dropped_duplicate_inside_a_batch_comes_back_in_its_place_on_a_retry(broker: Broker) -> None:
    broker.create_queue("q", requires_duplicate_detection=True)
    broker.engine.send("q", envelopes("x", message_id="m2"))
    batch = [Message(body, message_id=f"m{i}").to_envelope() for i, body in enumerate("abcd", start=1)]
    first = broker.engine.send("q", batch, producer=("p1", 3))
    assert first == [2, None, 3, 4]
    assert broker.engine.send("q", batch, producer=("p1", 3)) == first
    assert stored(broker) == 4


@pytest.mark.parametrize("seqs", [[], [5], [5, 6, 7], [None], [None, None, 5, 6, None, 9, 10, 12], [7, 6]])
def test_sequence_numbers_pack_into_runs_and_back(seqs: list[int | None]) -> None:
    runs = pack_runs(seqs)
    assert unpack_runs(codec.unpackb(codec.packb(runs))) == seqs
    if len(seqs) > 1 and None not in seqs and seqs == sorted(seqs) and seqs[-1] - seqs[0] == len(seqs) - 1:
        assert runs == [[seqs[0], len(seqs)]], "a stored batch is one run"


def test_a_history_written_before_runs_is_still_recognized(broker: Broker) -> None:
    broker.create_queue("q")
    first = broker.engine.send("q", envelopes("a", "b"), producer=("p1", 7))
    key = broker.engine.state.fragment("q").key
    broker.engine.state.queries.save_producer_batches(key, "p1", codec.packb([[7, first]]), broker.clock.now())
    assert broker.engine.send("q", envelopes("a", "b"), producer=("p1", 7)) == first
    assert broker.engine.send("q", envelopes("c"), producer=("p1", 8)) == [3]
    assert broker.engine.send("q", envelopes("a", "b"), producer=("p1", 7)) == first, "old and new entries side by side"
    assert stored(broker) == 3


def test_only_the_latest_batches_are_remembered(broker: Broker) -> None:
    broker.create_queue("q")
    for number in range(PRODUCER_BATCH_HISTORY + 1):
        broker.engine.send("q", envelopes("a"), producer=("p1", number))
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 1)) == [2]
    assert broker.engine.send("q", envelopes("a"), producer=("p1", PRODUCER_BATCH_HISTORY)) == [
        PRODUCER_BATCH_HISTORY + 1]
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 0)) == [PRODUCER_BATCH_HISTORY + 2]


def test_a_failed_send_is_not_remembered(broker: Broker) -> None:
    broker.create_queue("q", max_size_in_megabytes=1)
    big = [{**envelopes("a")[0], "size": 2 * 1024 * 1024}]
    with pytest.raises(QuotaExceededError):
        broker.engine.send("q", big, producer=("p1", 1))
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 1)) == [1]


@pytest.mark.parametrize("producer", [("p1",), ("p1", "1"), (1, 1), ("p1", True), "p1"])
def test_a_malformed_producer_is_refused(broker: Broker, producer: Any) -> None:
    broker.create_queue("q")
    with pytest.raises(InvalidArgumentError, match="producer must be"):
        broker.engine.send("q", envelopes("a"), producer=producer)
    assert stored(broker) == 0


def test_a_deleted_entity_forgets_its_producers(broker: Broker) -> None:
    broker.create_queue("q")
    broker.engine.send("q", envelopes("a"), producer=("p1", 1))
    broker.engine.delete_entity("q")
    broker.create_queue("q")
    assert broker.engine.send("q", envelopes("a"), producer=("p1", 1)) == [1]
    assert stored(broker) == 1
