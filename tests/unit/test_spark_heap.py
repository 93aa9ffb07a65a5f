"""Freezing the objects alive after start-up (spark_bridge.heap, for read and write tasks): no Ray."""
from __future__ import annotations

import gc
from typing import Iterator

import pytest

from spark_bridge import heap


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    gc.unfreeze()
    monkeypatch.setattr(heap, "_frozen", False)
    yield
    gc.unfreeze()


def test_objects_alive_at_the_first_call_leave_the_collections_and_later_calls_change_nothing(unfrozen: None) -> None:
    kept = [object() for _ in range(10)]
    assert gc.get_freeze_count() == 0
    heap.freeze_startup_objects()
    frozen = gc.get_freeze_count()
    assert frozen > len(kept)
    assert all(o is not kept for o in gc.get_objects())
    more = [[] for _ in range(100)]
    heap.freeze_startup_objects()
    # Nothing more is frozen (the count may drop: other threads of the process free frozen objects).
    assert gc.get_freeze_count() <= frozen
    tracked = {id(o) for o in gc.get_objects()}
    assert all(id(o) in tracked for o in more)
