"""The in-sync set of a replicated partition: the replicas that hold every acknowledged change.

With `min_in_sync` below a majority of the replicas (`NamespaceConfig.in_sync_set`; one of two, as
Kafka's `min.insync.replicas=1` with `acks=all`), a leader acknowledges a change once every replica
of its in-sync set holds it, not once a majority does. A follower that falls behind is dropped from
the set, so the leader may go on alone, but only after the deciding gateway recorded the drop
(`accepts_drop`): from then on that follower may not lead, since it lacks changes acknowledged
without it. A follower that caught up is added back by its leader first, before it waits for it
again, and the gateway learns of it later (`newer`). On the leader's loss any member of the set
answering may lead (`engine.election.choose_in_sync`): each holds every acknowledged change.

The set never holds fewer than `min_in_sync` replicas, the leader included. Each change of it is
numbered within its epoch (`version`), so that a report that comes late never undoes a newer one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

IN_SYNC_LAG_S = 1.0
"""How long a change may wait for a follower of the in-sync set before the leader asks to drop it."""


@dataclass(frozen=True)
class InSync:
    """The in-sync set of a partition as of change `version` of it in `epoch`.

    Example:
        >>> first = InSync(3, 0, (0, 1))
        >>> first.without([1])
        InSync(epoch=3, version=1, members=(0,))
        >>> first.without([1]).newer(first), first.newer(first.without([1]))
        (True, False)
        >>> InSync.decode(first.encode()) == first
        True
    """

    epoch: int
    version: int
    members: tuple[int, ...]

    def without(self, replicas: Iterable[int]) -> InSync:
        """The set with `replicas` dropped: the next version."""
        gone = set(replicas)
        return InSync(self.epoch, self.version + 1, tuple(r for r in self.members if r not in gone))

    def with_member(self, replica: int) -> InSync:
        """The set with `replica` added: the next version."""
        return InSync(self.epoch, self.version + 1, tuple(sorted({*self.members, replica})))

    def newer(self, other: InSync | None) -> bool:
        """Whether this set was decided after `other` (None: nothing known)."""
        return other is None or (self.epoch, self.version) > (other.epoch, other.version)

    def encode(self) -> list[Any]:
        """The set as it crosses Ray: `[epoch, version, members]`."""
        return [self.epoch, self.version, list(self.members)]

    @classmethod
    def decode(cls, fields: Sequence[Any]) -> InSync:
        """The set `encode` gave `fields` for."""
        epoch, version, members = fields
        return cls(int(epoch), int(version), tuple(int(r) for r in members))


def accepts_drop(known: InSync | None, epoch: int, proposed: InSync, min_in_sync: int) -> str | None:
    """Why the deciding gateway, knowing `known` for a partition whose current epoch is `epoch`,
    refuses the leader's `proposed` smaller set, or None to record it: the proposal must come from
    the current epoch's leader, be newer than what is known (or be it: the leader asks again when
    an answer went astray) and keep `min_in_sync` members. Its members may include one the gateway
    has not yet learned was added back: the leader waits on each member of its proposal.

    Example:
        >>> known = InSync(2, 0, (0, 1))
        >>> accepts_drop(known, 2, known.without([1]), 1) is None
        True
        >>> accepts_drop(known, 3, known.without([1]), 1)
        'epoch 2 is over (the partition is in epoch 3)'
    """
    if proposed.epoch != epoch:
        return f"epoch {proposed.epoch} is over (the partition is in epoch {epoch})"
    if known is not None and proposed != known and not proposed.newer(known):
        return f"version {proposed.version} is not newer than the recorded {known.version}"
    if len(proposed.members) < min_in_sync:
        return f"{len(proposed.members)} members are fewer than min_in_sync={min_in_sync}"
    return None
