"""A leader's view of its followers (`engine.shipping`): what each is sent, and when a change is held."""
from __future__ import annotations

from pytest import approx

from ray_broker.engine.change_log import ChangeLog
from ray_broker.engine.changes import Change
from ray_broker.engine.shipping import HEARTBEAT_S, LAZY_S, RETRY_AFTER_S, Shipping


def shipping_with(changes: int, followers: tuple[int, ...] = (1, 2), required: int = 2,
                  keep: int = 100) -> Shipping:
    log = ChangeLog(0, max_changes=keep)
    for p in range(1, changes + 1):
        log.append(Change(1, p, []))
    return Shipping(followers, required, log)


def test_a_follower_behind_gets_its_missing_changes_and_one_shipment_at_a_time() -> None:
    shipping = shipping_with(5)
    shipping.start(1, 3)
    shipping.answered(2, 5, now=0.0)
    due = shipping.due(5, now=0.0)
    assert [(s.replica, [c.position for c in s.changes or []]) for s in due] == [(1, [4, 5])]
    assert shipping.due(5, now=0.0) == [], "busy until it answers"
    shipping.answered(1, 5, now=0.0)
    assert shipping.copies(5) == 3 and shipping.lag(5) == {1: 0, 2: 0}


def test_a_follower_the_log_no_longer_covers_or_that_diverged_gets_a_whole_copy() -> None:
    shipping = shipping_with(10, keep=3)
    shipping.start(1, 2)
    shipping.start(2, None)
    assert sorted((s.replica, s.changes) for s in shipping.due(10, now=0.0)) == [(1, None), (2, None)]


def test_a_change_is_held_once_a_majority_holds_it() -> None:
    shipping = shipping_with(4, followers=(1, 2), required=2)
    shipping.start(1, 3)
    shipping.start(2, 3)
    assert not shipping.held(4) and shipping.held(3)
    shipping.due(4, now=0.0)
    shipping.answered(2, 4, now=0.0)
    assert shipping.held(4) and shipping.copies(4) == 2


def test_a_follower_that_did_not_answer_is_left_a_while_and_one_that_said_where_it_stands_resumes_there() -> None:
    shipping = shipping_with(6)
    shipping.start(1, 4)
    shipping.start(2, 4)
    shipping.due(6, now=0.0)
    shipping.failed(1, now=1.0)
    shipping.failed(2, now=1.0, position=5)
    due = shipping.due(6, now=1.0)
    assert [(s.replica, [c.position for c in s.changes or []]) for s in due] == [(2, [6])]
    assert [s.replica for s in shipping.due(6, now=1.0 + RETRY_AFTER_S)] == [1]
    assert shipping.lag(6) == {1: 2, 2: 1}


def test_a_follower_not_heard_from_gets_a_heartbeat_and_one_that_restarted_empty_is_sent_a_copy() -> None:
    shipping = shipping_with(5, followers=(1,))
    shipping.answered(1, 5, now=0.0)
    assert shipping.due(5, now=0.5) == [], "up to date and heard from"
    heartbeat = shipping.due(5, now=0.0 + HEARTBEAT_S)
    assert [(s.replica, s.changes) for s in heartbeat] == [(1, [])], "an empty shipment"
    shipping.answered(1, 0, now=1.0)
    assert [(s.replica, [c.position for c in s.changes or []]) for s in shipping.due(5, now=1.0)] == \
        [(1, [1, 2, 3, 4, 5])], "it restarted empty: everything it lacks"
    shipping.answered(1, 9, now=2.0)
    assert shipping.followers[1].position is None, "more than the leader holds: it gets a copy"


def test_a_follower_a_change_does_not_need_is_shipped_to_once_it_has_been_behind_a_while() -> None:
    shipping = shipping_with(7)
    shipping.start(1, 4)
    shipping.start(2, 4)
    shipping.answered(1, 4, now=0.0)
    shipping.answered(2, 4, now=0.0)
    assert [s.replica for s in shipping.due(5, now=0.001)] == [1], "one follower is what the change needs"
    shipping.answered(1, 5, now=0.002)
    assert shipping.held(5)
    assert [s.replica for s in shipping.due(6, now=0.010)] == [1]
    shipping.answered(1, 6, now=0.011)
    assert shipping.due(6, now=0.012) == []
    lazy = shipping.due(7, now=0.001 + LAZY_S)
    assert [(s.replica, [c.position for c in s.changes or []]) for s in lazy] == [(1, [7]), (2, [5, 6, 7])], \
        "behind since its first change went elsewhere: all it lacks at once"


def test_the_free_follower_takes_the_next_change_while_the_other_takes_this_one() -> None:
    shipping = shipping_with(6)
    shipping.answered(1, 4, now=0.0)
    shipping.answered(2, 4, now=0.0)
    assert [s.replica for s in shipping.due(5, now=0.001)] == [1]
    due = shipping.due(6, now=0.002)
    assert [(s.replica, [c.position for c in s.changes or []]) for s in due] == [(2, [5, 6])]
    shipping.answered(2, 6, now=0.003)
    assert shipping.held(6)


def test_a_silent_follower_leaves_the_other_shipped_to_within_the_lazy_interval() -> None:
    shipping = shipping_with(6)
    shipping.answered(1, 5, now=0.0)
    shipping.answered(2, 5, now=0.0)
    assert [s.replica for s in shipping.due(6, now=0.001)] == [1]
    assert shipping.due(6, now=0.002) == [], "replica 1 is being shipped the change"
    assert [s.replica for s in shipping.due(6, now=0.002 + LAZY_S)] == [2], "replica 1 did not answer"
    shipping.answered(2, 6, now=0.03)
    assert shipping.held(6)


def test_next_due_says_when_a_lazy_follower_a_heartbeat_or_a_retry_is_due_and_due_then_sends_it() -> None:
    shipping = shipping_with(5)
    shipping.answered(1, 5, now=0.0)
    shipping.answered(2, 5, now=0.0)
    assert shipping.next_due(now=0.25) == approx(HEARTBEAT_S - 0.25), "in step: the next heartbeat"
    shipping.log.append(Change(1, 6, []))
    assert shipping.next_due(now=0.5) == approx(0.0), "a new change: due at once"
    assert [s.replica for s in shipping.due(6, now=0.5)] == [1]
    assert shipping.next_due(now=0.5) == approx(LAZY_S), "replica 2 is left a while, replica 1 is busy"
    assert shipping.due(6, now=0.5 + LAZY_S / 2) == []
    assert [s.replica for s in shipping.due(6, now=0.5 + LAZY_S)] == [2]
    shipping.answered(1, 6, now=0.51)
    shipping.failed(2, now=0.52)
    assert shipping.next_due(now=0.52) == approx(RETRY_AFTER_S), "replica 2 is retried once its time comes"
    assert [s.replica for s in shipping.due(6, now=0.52 + RETRY_AFTER_S)] == [2]
    assert shipping.next_due(now=0.52 + RETRY_AFTER_S) == approx(HEARTBEAT_S - (0.01 + RETRY_AFTER_S))


def test_a_follower_behind_and_not_yet_left_is_due_at_once() -> None:
    shipping = shipping_with(6)
    shipping.start(1, 4)
    shipping.start(2, None)
    assert shipping.next_due(now=0.0) == approx(0.0)
    shipping.due(6, now=0.0)
    assert shipping.next_due(now=0.0) == approx(HEARTBEAT_S), "both busy: their answers come first"
