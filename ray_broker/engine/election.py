"""Who leads a replicated partition: the election's rule, as plain decisions over replica states.

The deciding gateway (`actors.leadership`) asks the replicas where they stand and acts on what
these functions decide:

1. `sitting_leader`: a replica that still leads an epoch at least as new as any replica or the
   gateway knows keeps the lead (a gateway that restarted finds the leader it lost track of).
2. Otherwise the replicas are fenced at `next_epoch` (from then on they refuse changes of older
   epochs) and `choose` picks, from those fenced, the one holding the most changes, provided a
   majority answered: any majority holds every acknowledged change, so the chosen replica has
   them all. With fewer than a majority there is no leader (`NoQuorum`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .queries import EpochStart


@dataclass(frozen=True)
class ReplicaState:
    """Where one replica stands, as it answers `replica_state` or `fence`."""

    epoch: int
    """The epoch of its store's last change."""
    position: int
    """The position of its store's last change."""
    history: tuple[EpochStart, ...]
    """For each epoch its store led or followed, the position of the epoch's first change."""
    followed: int
    """The highest epoch it was fenced at: it refuses changes of older ones."""
    leading: int | None
    """The epoch it leads, or None while it follows."""

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> ReplicaState:
        """The state a replica answered (its fields travel as a map, with more the status shows)."""
        return cls(epoch=int(answer["epoch"]), position=int(answer["position"]),
                   history=tuple(EpochStart(int(e), int(p)) for e, p in answer["history"]),
                   followed=int(answer["followed"]),
                   leading=None if answer["leading"] is None else int(answer["leading"]))

    @property
    def last_epoch(self) -> int:
        """The epoch of the last change its history records (0 for an empty store)."""
        return self.history[-1].epoch if self.history else 0


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
