"""Typed replies of the control plane: the routing table a gateway publishes, and where a replica
of a partition stands.

As with `wire`'s requests, each record is a `NamedTuple` in the code and crosses Ray as a plain
dict (Ray packs dicts with msgpack but pickles tuples): `encode` gives the dict a gateway or a
replica answers with, the same one it always answered with, and `decode` rebuilds the record on
the caller's side. Imports no Ray.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

from .engine.in_sync import InSync
from .engine.queries import EpochStart


class RoutingTable(NamedTuple):
    """What a gateway publishes for callers that reach partitions directly.

    Example:
        >>> RoutingTable(["h0", None], [1, 2], replicated=True).encode()
        {'handles': ['h0', None], 'epochs': [1, 2], 'replicated': True}
        >>> RoutingTable.decode({'handles': ['h0'], 'epochs': [3]}).replicated
        False
    """

    handles: Sequence[Any]
    """Each partition's actor handle (a replicated partition's leader; None while it has none)."""
    epochs: Sequence[int]
    """Each partition's epoch: it changes when the partition is made again or gets a new leader."""
    replicated: bool = False
    """Whether partitions have several replicas, so that where one runs may change at any time."""

    def encode(self) -> dict[str, Any]:
        """The table as it crosses Ray: `handles` and `epochs`, and `replicated` only when true."""
        table: dict[str, Any] = {"handles": list(self.handles), "epochs": list(self.epochs)}
        if self.replicated:
            table["replicated"] = True
        return table

    @classmethod
    def decode(cls, table: Mapping[str, Any]) -> RoutingTable:
        """The table `encode` gave `table` for."""
        return cls(list(table["handles"]), [int(e) for e in table["epochs"]], bool(table.get("replicated", False)))


class ReplicaState(NamedTuple):
    """Where one replica of a partition stands, as it answers `replica_state` (all fields) or
    `fence` (without `lag` and `node`).

    Example:
        >>> state = ReplicaState.decode({"epoch": 3, "position": 40, "history": [[1, 1], [3, 31]],
        ...                              "followed": 4, "leading": None})
        >>> state.last_epoch, state.encode()["history"]
        (3, [[1, 1], [3, 31]])
    """

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
    lag: Mapping[int, int | None] | None = None
    """Leading: how many changes each follower is behind (None for one waiting for a whole copy);
    empty while it follows; None when the answer does not say (`fence`)."""
    node: str | None = None
    """The id of the node it runs on; None when the answer does not say (`fence`)."""
    in_sync: InSync | None = None
    """Leading with an in-sync set (`engine.in_sync`): the set as it keeps it; else None."""

    @property
    def last_epoch(self) -> int:
        """The epoch of the last change its history records (0 for an empty store)."""
        return self.history[-1].epoch if self.history else 0

    def encode(self) -> dict[str, Any]:
        """The state as it crosses Ray: a dict, its history as lists, `lag` and `node` only when known."""
        answer: dict[str, Any] = {"epoch": self.epoch, "position": self.position,
                                  "history": [list(e) for e in self.history], "followed": self.followed,
                                  "leading": self.leading}
        if self.lag is not None:
            answer["lag"] = dict(self.lag)
        if self.node is not None:
            answer["node"] = self.node
        if self.in_sync is not None:
            answer["in_sync"] = self.in_sync.encode()
        return answer

    @classmethod
    def decode(cls, answer: Mapping[str, Any]) -> ReplicaState:
        """The state `encode` gave `answer` for."""
        lag = answer.get("lag")
        return cls(epoch=int(answer["epoch"]), position=int(answer["position"]),
                   history=tuple(EpochStart(int(e), int(p)) for e, p in answer["history"]),
                   followed=int(answer["followed"]),
                   leading=None if answer["leading"] is None else int(answer["leading"]),
                   lag=None if lag is None else {int(r): v for r, v in lag.items()},
                   node=answer.get("node"),
                   in_sync=None if answer.get("in_sync") is None else InSync.decode(answer["in_sync"]))
