"""Who leads a replicated partition: the election's rule, as plain decisions over replica states.

The deciding gateway (`actors.leadership`) asks the replicas where they stand (`replies.ReplicaState`)
and acts on what these functions decide:

1. `sitting_leader`: a replica that still leads an epoch at least as new as any replica or the
   gateway knows keeps the lead (a gateway that restarted finds the leader it lost track of).
2. Otherwise the replicas are fenced at `next_epoch` (from then on they refuse changes of older
   epochs) and `choose` picks, from those fenced, the one holding the most changes, provided a
   majority answered: any majority holds every acknowledged change, so the chosen replica has
   them all. With fewer than a majority there is no leader (`NoQuorum`).
3. With an in-sync set (`engine.in_sync`: fewer copies than a majority acknowledge a change),
   `choose_in_sync` picks the newest of the fenced replicas that are members of the set, each of
   which holds every acknowledged change; with none of them answering there is no leader. A gateway
   that does not know the set (it restarted while the leader was gone) falls back to `choose`
   with every replica but `min_in_sync - 1` answering, which meets each possible set.
4. How long an election waits for each replica's answer (`patience_after`): short at first, so a
   replica that is gone does not hold a failover up, and longer after each election that found no
   majority, so that replicas slowed down (a loaded machine, a queue of calls before the fence)
   still get their say instead of every election timing out alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..replies import ReplicaState
from .in_sync import InSync


ANSWER_S = 1.5
"""How long an election waits for each replica's answer at first."""
MAX_ANSWER_S = 12.0
"""The longest an election waits for each replica's answer, after elections that found no majority."""


def patience_after(patience: float, decided: bool) -> float:
    """How long the next election of a partition waits for each replica's answer, the last one having
    waited `patience`: `ANSWER_S` after one that `decided` (a leader, or one kept), else twice as
    long, up to `MAX_ANSWER_S`.

    Example:
        >>> [patience_after(p, False) for p in (1.5, 6.0, 12.0)], patience_after(12.0, True)
        ([3.0, 12.0, 12.0], 1.5)
    """
    return ANSWER_S if decided else min(2 * patience, MAX_ANSWER_S)


@dataclass(frozen=True)
class Keep:
    """A replica still leads the newest epoch: it keeps the lead."""

    replica: int
    epoch: int


@dataclass(frozen=True)
class Lead:
    """`chosen` is to lead `epoch`, with every other replica of the partition following it."""

    chosen: int
    followers: tuple[int, ...]
    epoch: int
    in_sync: InSync | None = None
    """The in-sync set the epoch begins with (None without one)."""


@dataclass(frozen=True)
class NoQuorum:
    """Fewer replicas answered than a majority: the partition has no leader for now."""

    answered: int
    required: int


def known_epoch(states: Mapping[int, ReplicaState], current: int) -> int:
    """The newest epoch anyone knows of: the gateway's `current` one, or one a replica was fenced
    at or holds changes of."""
    return max([current, *(max(s.epoch, s.followed) for s in states.values())])


def sitting_leader(states: Mapping[int, ReplicaState], known: int) -> Keep | None:
    """The replica (the lowest numbered, should two claim it) leading an epoch no older than
    `known`, or None."""
    for replica in sorted(states):
        leading = states[replica].leading
        if leading is not None and leading >= known:
            return Keep(replica, leading)
    return None


def newest(states: Mapping[int, ReplicaState]) -> int:
    """The replica holding the most changes: by the epoch of its last change, then its position
    (then the lowest replica number)."""
    return max(states, key=lambda r: (states[r].last_epoch, states[r].position, -r))


def choose(fenced: Mapping[int, ReplicaState], replicas: Sequence[int], required: int,
           epoch: int) -> Lead | NoQuorum:
    """Decide who leads `epoch` from the states of the replicas fenced at it: the newest of them,
    when at least `required` answered."""
    if len(fenced) < required:
        return NoQuorum(len(fenced), required)
    chosen = newest(fenced)
    return Lead(chosen, tuple(r for r in replicas if r != chosen), epoch)


def choose_in_sync(fenced: Mapping[int, ReplicaState], replicas: Sequence[int], known: InSync | None,
                   min_in_sync: int, epoch: int) -> Lead | NoQuorum:
    """Decide who leads `epoch` from the states of the replicas fenced at it, with an in-sync set:
    the newest fenced member of the `known` set, the epoch beginning with it and the members that
    answered; without a known set, `choose` among at least `len(replicas) - min_in_sync + 1`
    answers (one of which holds every acknowledged change), the set beginning with the chosen one
    and those holding just what it holds.

    Example:
        >>> from ray_broker.replies import ReplicaState
        >>> state = ReplicaState(1, 9, (), 1, None)
        >>> choose_in_sync({1: state}, [0, 1], InSync(1, 2, (0,)), 1, 2)
        NoQuorum(answered=0, required=1)
        >>> choose_in_sync({1: state}, [0, 1], InSync(1, 0, (0, 1)), 1, 2).in_sync
        InSync(epoch=2, version=0, members=(1,))
    """
    if known is None:
        decision = choose(fenced, replicas, len(replicas) - min_in_sync + 1, epoch)
        if isinstance(decision, NoQuorum):
            return decision
        last = fenced[decision.chosen]
        same = tuple(sorted(r for r, s in fenced.items() if (s.last_epoch, s.position) == (last.last_epoch,
                                                                                           last.position)))
        return Lead(decision.chosen, decision.followers, epoch, InSync(epoch, 0, same))
    members = {r: s for r, s in fenced.items() if r in known.members}
    if not members:
        return NoQuorum(0, 1)
    chosen = newest(members)
    return Lead(chosen, tuple(r for r in replicas if r != chosen), epoch, InSync(epoch, 0, tuple(sorted(members))))
