"""Who leads a replicated partition: the election's rule, as plain decisions over replica states.

The deciding gateway (`actors.leadership`) asks the replicas where they stand (`replies.ReplicaState`)
and acts on what these functions decide:

1. `sitting_leader`: a replica that still leads an epoch at least as new as any replica or the
   gateway knows keeps the lead (a gateway that restarted finds the leader it lost track of).
2. Otherwise the replicas are fenced at `next_epoch` (from then on they refuse changes of older
   epochs) and `choose` picks, from those fenced, the one holding the most changes, provided a
   majority answered: any majority holds every acknowledged change, so the chosen replica has
   them all. With fewer than a majority there is no leader (`NoQuorum`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..replies import ReplicaState


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
