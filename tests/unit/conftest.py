"""Fixtures for the unit tests: partition engines over a manual clock, with no Ray started."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ray_broker.clock import ManualClock
from ray_broker.engine import messages
from ray_broker.engine.partition import MAIN, PEEK_LOCK, PartitionEngine
from ray_broker.engine.store import Store
from ray_broker.entities import normalize_queue_options
from ray_broker.message import Message, ReceivedMessage
from ray_broker.wire import SessionRef, Settlement

RECEIVER = "receiver-1"


def queue_definition(name: str, **options: Any) -> dict[str, Any]:
    """The definition dict a gateway hands to partitions for a new queue."""
    return {"name": name, "kind": "queue", "options": normalize_queue_options(options),
            "incarnation": f"{name}-1", "created_at": 1_700_000_000.0, "updated_at": 1_700_000_000.0}


class Broker:
    """A partition engine with its clock, and shorthands for the calls the tests make most."""

    def __init__(self, engine: PartitionEngine, clock: ManualClock) -> None:
        self.engine = engine
        self.clock = clock

    def create_queue(self, name: str = "q", **options: Any) -> str:
        """Create a queue on this partition and return its name."""
        self.engine.create_entity(queue_definition(name, **options))
        return name

    def send(self, entity: str, *messages: Message | str) -> list[int | None]:
        """Send messages (a str is a body) in one call; returns their sequence numbers."""
        envelopes = [(m if isinstance(m, Message) else Message(m)).to_envelope() for m in messages]
        return self.engine.send(entity, envelopes)

    def receive(self, entity: str, max_count: int = 10, *, subq: int = MAIN, mode: str = PEEK_LOCK,
                session: SessionRef | None = None) -> list[ReceivedMessage]:
        """Receive messages as a receiver would see them."""
        result = self.engine.receive(entity, subq, max_count, mode, session)
        return [ReceivedMessage(r, receiver_key=RECEIVER) for r in result["messages"]]

    def settle(self, entity: str, action: str, message: ReceivedMessage, *, subq: int = MAIN,
               session: SessionRef | None = None, reason: str | None = None,
               description: str | None = None) -> Any:
        """Apply one settlement and return its result (None, a renew expiry, or an error instance)."""
        assert message.lock_token is not None
        settlement = Settlement(action, message.sequence_number, message.lock_token.bytes, reason, description)
        return self.engine.settle(entity, subq, [settlement], session)[0]

    def peek(self, entity: str, from_sequence: int = 0, max_count: int = 100, *,
             subq: int = MAIN, to_sequence: int | None = None) -> list[ReceivedMessage]:
        """Peek messages without locking them."""
        records = self.engine.peek(entity, subq, from_sequence, max_count, None, to_sequence)
        return [ReceivedMessage(r, peeked=True) for r in records]

    def bodies(self, messages: list[ReceivedMessage]) -> list[bytes]:
        """The bodies of some messages, in order."""
        return [m.body for m in messages]


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when a test advances it."""
    return ManualClock(1_700_000_000.0)


@pytest.fixture(params=["rows", "runs"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How engines store batches: as they do ("rows": runs from `RUN_MIN` messages on), or with a
    run for every batch of two messages or more ("runs"), so that every engine test covers both."""
    if request.param == "runs":
        if request.node.get_closest_marker("rows_only"):
            pytest.skip("reads or writes message rows itself")
        monkeypatch.setattr(messages, "RUN_MIN", 2)
    return str(request.param)


@pytest.fixture
def make_broker(clock: ManualClock, layout: str) -> Iterator[Callable[..., Broker]]:
    """Build engines on the shared clock: in memory, or over a file store when `path` is given."""
    stores: list[Store] = []

    def make(index: int = 0, partition_count: int = 1, path: Path | None = None,
             durability: str = "normal") -> Broker:
        store = Store(str(path), durability) if path is not None else Store(None, "memory")
        stores.append(store)
        return Broker(PartitionEngine(index, partition_count, store, clock), clock)

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    """A single-partition in-memory engine: every entity's home is partition 0."""
    return make_broker()
