"""The in-sync set (`engine.in_sync`): the leader's drops the deciding gateway records, the members
added back, and who may lead after a loss (`engine.election.choose_in_sync`); with it a leader
counts a change held once every member holds it (`engine.shipping`)."""
from __future__ import annotations

import pytest

from ray_broker.config import NamespaceConfig, check_min_in_sync
from ray_broker.engine.change_log import ChangeLog
from ray_broker.engine.changes import Change
from ray_broker.engine.election import Lead, NoQuorum, choose_in_sync
from ray_broker.engine.in_sync import InSync, accepts_drop
from ray_broker.engine.queries import EpochStart
from ray_broker.engine.shipping import LAZY_S, Shipping
from ray_broker.errors import InvalidArgumentError
from ray_broker.replies import ReplicaState


def state(epoch: int, position: int, followed: int | None = None) -> ReplicaState:
    return ReplicaState(epoch, position, (EpochStart(epoch, 1),), epoch if followed is None else followed, None)


def test_a_drop_is_recorded_only_from_the_current_epoch_newer_than_known_and_keeping_min_in_sync() -> None:
    known = InSync(4, 2, (0, 1))
    assert accepts_drop(known, 4, known.without([1]), 1) is None
    assert "epoch 4 is over" in accepts_drop(known, 5, known.without([1]), 1)
    assert "not newer" in accepts_drop(known, 4, InSync(4, 2, (0,)), 1)
    assert accepts_drop(known, 4, known, 1) is None, "asked again after an answer went astray"
    assert accepts_drop(InSync(4, 2, (0,)), 4, InSync(4, 4, (0, 2)), 1) is None, \
        "replica 2 was added back (version 3), which the gateway had not yet read"
    assert "fewer than min_in_sync=2" in accepts_drop(InSync(4, 0, (0, 1, 2)), 4, InSync(4, 1, (0,)), 2)
    assert accepts_drop(None, 4, InSync(4, 7, (2,)), 1) is None, "a gateway that restarted takes it"


def test_a_late_report_never_undoes_a_newer_set() -> None:
    dropped = InSync(3, 0, (0, 1)).without([1])
    added_back = dropped.with_member(1)
    assert added_back == InSync(3, 2, (0, 1))
    assert added_back.newer(dropped) and not dropped.newer(added_back)
    assert InSync(4, 0, (1,)).newer(added_back), "a new epoch's set is newer than any of the last"


def test_on_the_leaders_loss_a_member_of_the_set_leads_and_a_replica_dropped_from_it_never_does() -> None:
    fenced = {1: state(2, 40)}
    assert choose_in_sync(fenced, [0, 1], InSync(2, 0, (0, 1)), 1, 3) == Lead(1, (0,), 3, InSync(3, 0, (1,)))
    assert choose_in_sync(fenced, [0, 1], InSync(2, 1, (0,)), 1, 3) == NoQuorum(0, 1), \
        "the leader acknowledged changes without it"


def test_the_newest_member_answering_leads_and_the_epoch_begins_with_the_members_that_answered() -> None:
    fenced = {0: state(2, 30), 1: state(2, 35), 2: state(2, 50)}
    decision = choose_in_sync(fenced, [0, 1, 2, 3], InSync(2, 4, (0, 1, 3)), 1, 3)
    assert isinstance(decision, Lead)
    assert decision.chosen == 1, "replica 2 holds more, but was dropped from the set"
    assert decision.in_sync == InSync(3, 0, (0, 1))


def test_a_gateway_that_does_not_know_the_set_needs_every_replica_but_min_in_sync_less_one() -> None:
    assert choose_in_sync({1: state(2, 9)}, [0, 1], None, 1, 3) == NoQuorum(1, 2)
    decision = choose_in_sync({0: state(2, 5), 1: state(2, 9)}, [0, 1], None, 1, 3)
    assert decision == Lead(1, (0,), 3, InSync(3, 0, (1,)))
    fresh = choose_in_sync({0: state(0, 0), 1: state(0, 0)}, [0, 1], None, 1, 1)
    assert fresh == Lead(0, (1,), 1, InSync(1, 0, (0, 1))), "both hold just what the chosen one holds"


def shipping(in_sync: tuple[int, ...] | None, required: int = 1) -> Shipping:
    log = ChangeLog(0)
    for p in (1, 2, 3):
        log.append(Change(1, p, []))
    ship = Shipping([1, 2], required, log, None if in_sync is None else InSync(1, 0, in_sync))
    ship.start(1, 0)
    ship.start(2, 0)
    return ship


def test_with_a_set_a_change_is_held_once_every_member_holds_it() -> None:
    ship = shipping(in_sync=(0, 1))
    assert not ship.held(3) and ship.lagging(3) == [1]
    ship.answered(1, 3, now=0.0)
    assert ship.held(3), "replica 2 is not a member: the change does not wait for it"
    alone = shipping(in_sync=(0,))
    assert alone.held(3) and alone.lagging(3) == [], "the leader alone holds it"


def test_with_a_set_its_members_are_shipped_to_at_once_and_the_others_lazily() -> None:
    ship = shipping(in_sync=(0, 1))
    ship.answered(1, 0, now=10.0)
    ship.answered(2, 0, now=10.0)
    assert [s.replica for s in ship.due(3, now=10.0)] == [1]
    assert [s.replica for s in ship.due(3, now=10.0 + 2 * LAZY_S)] == [2]


def test_a_follower_outside_the_set_is_caught_up_once_it_holds_every_change() -> None:
    ship = shipping(in_sync=(0,))
    assert not ship.caught_up(1)
    ship.answered(1, 3, now=0.0)
    assert ship.caught_up(1)
    ship.add_back(1)
    assert ship.in_sync == InSync(1, 1, (0, 1)) and not ship.caught_up(1)
    ship.log.append(Change(1, 4, []))
    assert ship.lagging(4) == [1], "a member again: the next change waits for it"
    assert not shipping(in_sync=None).caught_up(1), "no set, nothing to catch up to"


def test_a_dropped_member_is_no_longer_waited_for() -> None:
    ship = shipping(in_sync=(0, 1))
    assert ship.lagging(3) == [1]
    ship.drop(ship.in_sync.without([1]))
    assert ship.held(3) and ship.in_sync == InSync(1, 1, (0,))


def test_min_in_sync_below_a_majority_keeps_an_in_sync_set() -> None:
    def config(replicas: int, min_in_sync: int | None) -> NamespaceConfig:
        return NamespaceConfig("ns", "premium", 1, None, "memory", 1, None, replicas=replicas, min_in_sync=min_in_sync)

    assert config(2, 1).in_sync_set and config(2, 1).required_copies == 1
    assert not config(2, None).in_sync_set and config(2, None).required_copies == 2
    assert not config(3, 2).in_sync_set and config(3, 3).required_copies == 3 and config(3, 3).majority == 2
    assert config(5, 2).in_sync_set


@pytest.mark.parametrize("value, replicas, words", [
    (0, 2, "from 1 to replicas (2)"), (3, 2, "from 1 to replicas (2)"), (True, 2, "an int"),
    ("1", 3, "an int"), (1, 1, "needs replicas > 1")])
def test_a_bad_min_in_sync_is_refused_saying_what_it_takes(value: object, replicas: int, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_min_in_sync(value, replicas)
