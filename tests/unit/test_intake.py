"""A follower's intake: shipments held in memory in order, written to the store in groups."""
from __future__ import annotations

import pytest

from ray_broker.engine.changes import Change
from ray_broker.engine.intake import Intake
from ray_broker.engine.queries import ReplicaPosition
from ray_broker.engine.store import Store
from ray_broker.errors import OutOfOrderChangeError, ReplicationError, StaleEpochError

from .test_replication import contents, insert, leader_with_changes


def test_changes_that_follow_are_answered_from_memory_and_written_in_one_commit() -> None:
    leader, changes = leader_with_changes(5)
    follower = Store(None, "memory")
    intake = Intake(follower)
    assert intake.take(changes[:2]) == ReplicaPosition(1, 2)
    assert intake.take(changes[2:]) == ReplicaPosition(1, 5)
    assert intake.held == 5 and follower.replication_position == (0, 0), "nothing written yet"
    commits = follower.commits.count
    assert intake.flush() == 5 and intake.flush() == 0
    assert follower.commits.count == commits + 1
    assert follower.replication_position == (1, 5) and contents(follower) == contents(leader)


def test_a_repeat_is_judged_against_the_store_once_what_is_held_is_written() -> None:
    _, changes = leader_with_changes(3)
    follower = Store(None, "memory")
    intake = Intake(follower)
    intake.take(changes[:2])
    assert intake.take(changes[1:]) == ReplicaPosition(1, 3), "the repeat skipped, the rest applied"
    assert intake.held == 0 and follower.replication_position == (1, 3)


def test_a_gap_or_an_older_epoch_is_refused_and_nothing_of_it_is_taken() -> None:
    _, changes = leader_with_changes(4, epoch=2)
    intake = Intake(Store(None, "memory"))
    intake.take(changes[:1])
    with pytest.raises(OutOfOrderChangeError, match="send the changes after 1"):
        intake.take(changes[2:])
    assert intake.position() == ReplicaPosition(2, 1)
    with pytest.raises(StaleEpochError, match="older than this replica's epoch 2"):
        intake.take([Change(1, 2, [])])


def test_a_write_that_fails_is_told_at_the_next_shipment_and_a_copy_clears_it() -> None:
    _, changes = leader_with_changes(2)
    follower = Store(None, "memory")
    with follower.transaction() as db:
        insert(db, "e1")
    intake = Intake(follower)
    intake.take(changes)
    with pytest.raises(ReplicationError, match="rows differ"):
        intake.flush()
    assert intake.held == 0 and follower.replication_position == (0, 0)
    with pytest.raises(ReplicationError):
        intake.take(changes)
    intake.take(changes[:1])
    intake.drop()
    assert intake.held == 0 and intake.take([]) == ReplicaPosition(0, 0)


def test_a_follower_holding_its_limit_writes_before_it_takes_more() -> None:
    _, changes = leader_with_changes(5)
    follower = Store(None, "memory")
    intake = Intake(follower, max_held=3)
    intake.take(changes[:2])
    assert follower.replication_position == (0, 0)
    intake.take(changes[2:3])
    assert intake.held == 0 and follower.replication_position == (1, 3)
