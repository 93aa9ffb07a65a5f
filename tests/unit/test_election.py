"""The election's rule (`ray_broker.engine.election`): who keeps or takes a partition's lead."""
from __future__ import annotations

import pytest

from ray_broker.engine.election import (
    ANSWER_S,
    MAX_ANSWER_S,
    Keep,
    Lead,
    NoQuorum,
    choose,
    known_epoch,
    newest,
    patience_after,
    sitting_leader,
)
from ray_broker.engine.queries import EpochStart
from ray_broker.replies import ReplicaState


def state(epoch: int = 0, position: int = 0, history: tuple[tuple[int, int], ...] = (), followed: int = 0,
          leading: int | None = None) -> ReplicaState:
    return ReplicaState(epoch, position, tuple(EpochStart(*e) for e in history), followed, leading)


def test_the_known_epoch_is_the_newest_any_replica_was_fenced_at_holds_or_the_gateway_knows() -> None:
    states = {0: state(epoch=2, followed=5), 1: state(epoch=4, followed=3)}
    assert known_epoch(states, 1) == 5
    assert known_epoch(states, 9) == 9
    assert known_epoch({}, 2) == 2


def test_a_replica_leading_the_newest_epoch_keeps_the_lead() -> None:
    states = {0: state(epoch=3, followed=3), 1: state(epoch=3, followed=3, leading=3)}
    assert sitting_leader(states, known_epoch(states, 2)) == Keep(1, 3)


def test_a_replica_leading_an_older_epoch_than_one_known_does_not_keep_it() -> None:
    states = {0: state(epoch=3, followed=4), 1: state(epoch=3, followed=3, leading=3)}
    assert sitting_leader(states, known_epoch(states, 0)) is None
    assert sitting_leader({0: state(leading=2)}, 3) is None


def test_the_newest_replica_holds_the_most_changes_by_last_epoch_then_position() -> None:
    # replica 0 holds more changes, but of an older epoch: replica 1's newer epoch wins
    states = {0: state(2, 90, ((1, 1), (2, 50))), 1: state(3, 60, ((1, 1), (3, 55))), 2: state(3, 58, ((1, 1), (3, 55)))}
    assert newest(states) == 1
    tie = {0: state(1, 10, ((1, 1),)), 2: state(1, 10, ((1, 1),))}
    assert newest(tie) == 0


def test_a_majority_fenced_elects_the_newest_with_every_other_replica_following() -> None:
    fenced = {0: state(1, 10, ((1, 1),), followed=2), 2: state(1, 12, ((1, 1),), followed=2)}
    assert choose(fenced, range(3), 2, 2) == Lead(2, (0, 1), 2)


@pytest.mark.parametrize("answered", [0, 1])
def test_fewer_fenced_than_a_majority_elects_no_one(answered: int) -> None:
    fenced = {r: state(followed=2) for r in range(answered)}
    assert choose(fenced, range(3), 2, 2) == NoQuorum(answered, 2)


def test_an_empty_partition_elects_its_lowest_replica() -> None:
    fenced = {r: state(followed=1) for r in range(3)}
    assert choose(fenced, range(3), 2, 1) == Lead(0, (1, 2), 1)


def test_elections_that_find_no_majority_wait_longer_for_answers_up_to_a_bound_and_one_that_decides_resets_it() -> None:
    waits = [ANSWER_S]
    for _ in range(6):
        waits.append(patience_after(waits[-1], decided=False))
    assert waits[:4] == [ANSWER_S, 2 * ANSWER_S, 4 * ANSWER_S, 8 * ANSWER_S]
    assert waits[-1] == MAX_ANSWER_S and all(a <= b for a, b in zip(waits, waits[1:]))
    assert patience_after(MAX_ANSWER_S, decided=True) == ANSWER_S
