"""CallerWatch: a caller found there is not asked about again while fresh; a dead one is reported."""
from __future__ import annotations

from typing import Any

from ray_broker.callers import CallerWatch


class FakeRef:
    """Stands for the ObjectRef a caller's token wraps (only its id is read)."""

    def __init__(self, key: str) -> None:
        self._key = key

    def hex(self) -> str:
        return self._key


class Owners:
    """Which callers' processes are dead, and how often the watch asked."""

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.asked = 0

    def check(self, token: Any) -> bool:
        self.asked += 1
        return token[0].hex() in self.dead


def test_a_live_caller_is_asked_about_once_per_fresh_window_and_a_dead_one_is_reported() -> None:
    now = [0.0]
    owners = Owners()
    watch = CallerWatch(owners.check, fresh_s=0.5, clock=lambda: now[0])
    token = [FakeRef("a")]
    assert not watch.gone(token) and owners.asked == 1
    now[0] = 0.3
    assert not watch.gone(token) and owners.asked == 1, "fresh: no second round trip"
    owners.dead.add("a")
    now[0] = 0.6
    assert watch.gone(token) and owners.asked == 2
    assert watch.gone(token) and owners.asked == 3, "a dead caller is never taken as fresh"


def test_no_token_is_never_gone_and_costs_nothing() -> None:
    owners = Owners()
    watch = CallerWatch(owners.check)
    assert not watch.gone(None) and not watch.gone([]) and owners.asked == 0


def test_callers_are_told_apart() -> None:
    now = [0.0]
    owners = Owners()
    owners.dead.add("b")
    watch = CallerWatch(owners.check, fresh_s=0.5, clock=lambda: now[0])
    assert not watch.gone([FakeRef("a")])
    assert watch.gone([FakeRef("b")])
