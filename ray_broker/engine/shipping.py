"""A leader's side of replication: what each follower is sent next, and when a change counts as held.

A partition's leader ships every committed change (`changes.Change`) to its followers and answers
the callers whose work a change holds only once `required` replicas, itself included, hold it.
`Shipping` keeps, for each follower, the last change it is known to hold (None: it needs a whole
copy of the store), whether a shipment to it is under way (one at a time, so that each follower
takes its changes in order), and how long to leave one that did not answer. It decides without I/O;
the partition actor makes the calls.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .change_log import ChangeLog
from .changes import Change
from .in_sync import InSync

RETRY_AFTER_S = 0.5
"""How long a follower that did not answer is left before it is shipped to again."""
LAZY_S = 0.02
"""A follower that a change does not need (enough others hold it, or are being shipped it) is
shipped to once it has been behind this long: it takes its changes in fewer, larger shipments,
the leader makes fewer calls per commit, and it is free for the next change while the others
take this one. One of those others that fails to answer leaves it shipped to within this long,
as the leader waits."""
HEARTBEAT_S = 1.0
"""A follower not heard from for this long is sent an empty shipment: it answers with where it
stands (a follower restarted empty says so, and is then sent a copy), and learns that its leader
is alive."""


@dataclass
class FollowerProgress:
    """What the leader knows of one follower."""

    position: int | None
    """The last change it holds; None when it must be sent a whole copy."""
    busy: bool = False
    """A shipment to it is under way."""
    retry_at: float = 0.0
    """When it may be shipped to again after it did not answer."""
    heard_at: float = float("-inf")
    """When it last answered."""
    shipped_to: int = -1
    """The position its last shipment brings it to."""
    behind_since: float | None = None
    """Since when it has been behind, not shipped to, while others covered the changes."""


@dataclass(frozen=True)
class Shipment:
    """What a follower is sent: its missing changes, or (with `changes` None) a whole copy."""

    replica: int
    changes: list[Change] | None


class Shipping:
    """The leader's view of its followers.

    Args:
        followers: the followers' replica numbers.
        required: how many replicas (the leader included) must hold a change before it counts.
        log: the leader's recent changes.
        in_sync: with an in-sync set (`engine.in_sync`), the set: a change counts once every
            follower of it holds it (`required` replicas at least), and those are the ones shipped
            to at once; None: any `required` replicas.

    Example:
        >>> from ray_broker.engine.changes import Change
        >>> log = ChangeLog(0)
        >>> log.append(Change(1, 1, []))
        >>> shipping = Shipping([1, 2], 2, log)
        >>> shipping.start(1, 0); shipping.start(2, None)
        >>> [(s.replica, s.changes is None) for s in shipping.due(1, now=0.0)]
        [(1, False), (2, True)]
        >>> shipping.answered(1, 1, now=0.0); shipping.held(1)
        True
    """

    def __init__(self, followers: Iterable[int], required: int, log: ChangeLog,
                 in_sync: InSync | None = None) -> None:
        self.followers = {r: FollowerProgress(None) for r in followers}
        self.required = required
        self.log = log
        self.in_sync = in_sync
        """The in-sync set, or None without one (the leader changes it: `drop`, `add_back`)."""

    def start(self, replica: int, position: int | None) -> None:
        """Follower `replica` holds the leader's changes up to `position` (None: it needs a copy)."""
        self.followers[replica] = FollowerProgress(position)

    def due(self, position: int, now: float) -> list[Shipment]:
        """What to send now so that followers reach `position`: to each one behind it (or not heard
        from for `HEARTBEAT_S`), not busy and not being left after a failure, its missing changes
        (none for a heartbeat), or a copy when the log no longer has them. A follower behind is
        shipped to at once while fewer followers than a change needs hold `position` or are being
        shipped it; beyond those, once it has been behind for `LAZY_S`. Each one returned is
        marked busy until `answered` or `failed`."""
        covering = sum(1 for f in self.followers.values()
                       if (f.position is not None and f.position >= position) or (f.busy and f.shipped_to >= position))
        out = []
        for replica, follower in self.followers.items():
            behind = follower.position is None or follower.position < position
            quiet = now - follower.heard_at >= HEARTBEAT_S
            if follower.busy or now < follower.retry_at or not (behind or quiet):
                continue
            if behind and not quiet and not self._needed(replica, covering):
                follower.behind_since = now if follower.behind_since is None else follower.behind_since
                if now - follower.behind_since < LAZY_S:
                    continue
            changes = None if follower.position is None else self.log.since(follower.position)
            follower.busy = True
            follower.shipped_to, follower.behind_since = position, None
            covering += behind
            out.append(Shipment(replica, changes))
        return out

    def _needed(self, replica: int, covering: int) -> bool:
        """Whether a change waits for `replica` when `covering` followers hold it or are being
        shipped it: a member of the in-sync set, or (without one) while too few cover it."""
        if self.in_sync is not None:
            return replica in self.in_sync.members
        return covering < self.required - 1

    def next_due(self, now: float) -> float:
        """Seconds from `now` until `due` may have something to send without a new change (0: at
        once), by the followers not busy: one behind once it has been left `LAZY_S` (at once when
        not yet left), one in step once `HEARTBEAT_S` passed since it answered, neither before it
        may be retried. `HEARTBEAT_S` at most (a busy follower's answer comes sooner, or its
        shipment is given up on).

        Example:
            >>> log = ChangeLog(0)
            >>> log.append(Change(1, 1, []))
            >>> shipping = Shipping([1, 2], 2, log)
            >>> shipping.answered(1, 1, now=0.0); shipping.answered(2, 1, now=0.5)
            >>> shipping.next_due(now=0.5)
            0.5
        """
        at = now + HEARTBEAT_S
        for follower in self.followers.values():
            if follower.busy:
                continue
            ready = follower.heard_at + HEARTBEAT_S
            if follower.position is None or follower.position < self.log.last:
                ready = min(ready, now if follower.behind_since is None else follower.behind_since + LAZY_S)
            at = min(at, max(ready, follower.retry_at))
        return max(0.0, at - now)

    def answered(self, replica: int, position: int, now: float) -> None:
        """Follower `replica` took its shipment and now holds changes up to `position` (one that
        holds more than this leader, which cannot be in one epoch, is sent a copy)."""
        before = self.followers[replica]
        self.followers[replica] = FollowerProgress(position if position <= self.log.last else None, heard_at=now,
                                                   shipped_to=before.shipped_to)

    def failed(self, replica: int, now: float, position: int | None = -1) -> None:
        """A shipment to `replica` failed: it did not answer (left for `RETRY_AFTER_S`, what it holds
        unchanged), or it said what it holds (`position`; None: it needs a copy)."""
        follower = self.followers[replica]
        follower.busy = False
        if position is None or position >= 0:
            follower.position = position
        else:
            follower.retry_at = now + RETRY_AFTER_S

    def copies(self, position: int) -> int:
        """How many replicas (the leader included) are known to hold the change at `position`."""
        return 1 + sum(1 for f in self.followers.values() if f.position is not None and f.position >= position)

    def held(self, position: int) -> bool:
        """Whether the change at `position` is held by enough replicas to count (with an in-sync
        set, by each of its members as well)."""
        return self.copies(position) >= self.required and not self.lagging(position)

    def lagging(self, position: int) -> list[int]:
        """The followers of the in-sync set that do not hold the change at `position` (none
        without a set)."""
        members = () if self.in_sync is None else self.in_sync.members
        return sorted(r for r in members if r in self.followers and not self._holds(r, position))

    def caught_up(self, replica: int) -> bool:
        """Whether `replica`, outside the in-sync set, now holds every change of the log."""
        return (self.in_sync is not None and replica not in self.in_sync.members
                and self._holds(replica, self.log.last))

    def drop(self, proposal: InSync) -> None:
        """Take `proposal`, the set without its lagging members, as the deciding gateway recorded
        it: changes no longer wait on them."""
        self.in_sync = proposal

    def add_back(self, replica: int) -> None:
        """Add `replica`, caught up (`caught_up`), back to the set: changes wait on it again."""
        assert self.in_sync is not None, "only a set is added to"
        self.in_sync = self.in_sync.with_member(replica)

    def _holds(self, replica: int, position: int) -> bool:
        follower = self.followers[replica]
        return follower.position is not None and follower.position >= position

    def lag(self, position: int) -> dict[int, int | None]:
        """How many changes each follower is behind `position` (None: it waits for a copy)."""
        return {r: None if f.position is None else max(0, position - f.position) for r, f in self.followers.items()}
