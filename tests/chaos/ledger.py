"""The ledger of a chaos run: what was sent, delivered and completed, and the checks over it.

Words used here:

- a *message* is a message id as a sender built it;
- a *copy* is one stored instance of a message, named by its entity and sequence number. A send
  that raised may still have been stored (at-least-once), and the sender retries it with the same
  ids, so one message can have several copies; each copy is delivered and completed on its own;
- a completion is *confirmed* once the receiver's `flush()` returned without raising, and
  *unconfirmed* when the flush (or the settle call) raised: the broker may or may not have applied it.

The ledger is thread-safe: senders, receivers and the checks may use it at the same time.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

PARTITION_SHIFT = 48
"""The top bits of a partitioned entity's sequence number name the partition."""
MAX_LISTED = 20
"""How many problems of one kind `violations()` lists before summarising the rest."""

Copy = tuple[str, int]


@dataclass(frozen=True)
class Delivery:
    """One message handed to a receiver."""

    entity: str
    sequence_number: int
    message_id: str
    session_id: str | None
    delivery_count: int
    started: float
    """When the receive call that returned it began (seconds on the run's monotonic clock)."""

    @property
    def copy(self) -> Copy:
        """The stored copy this delivery is of."""
        return self.entity, self.sequence_number

    def describe(self) -> str:
        """The message, its copy and partition, for reports."""
        return (f"{self.message_id!r} ({self.entity} seq {self.sequence_number}, "
                f"partition {self.sequence_number >> PARTITION_SHIFT})")


class Ledger:
    """Sends acknowledged, deliveries, and completions of a chaos run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, str | None] = {}
        self._session_order: dict[str, list[str]] = defaultdict(list)
        self._deliveries: list[Delivery] = []
        self._confirmed: dict[Copy, float] = {}
        self._confirmed_ids: set[str] = set()
        self._unconfirmed_ids: set[str] = set()
        self._outstanding: set[str] = set()
        self._clean: set[str] = set()
        self._moved_in_doubt: set[str] = set()

    # ------------------------------------------------------------------ recording

    def record_sent(self, message_ids: Sequence[str], session_id: str | None = None, *, first_try: bool = False) -> None:
        """A send of these messages (in this order, in `session_id` if given) was acknowledged;
        `first_try` when no earlier send of them raised (then each must be stored exactly once)."""
        with self._lock:
            if first_try:
                self._clean.update(message_ids)
            for message_id in message_ids:
                if message_id in self._sent:
                    continue
                self._sent[message_id] = session_id
                if session_id is not None:
                    self._session_order[session_id].append(message_id)
                if message_id not in self._confirmed_ids and message_id not in self._unconfirmed_ids:
                    self._outstanding.add(message_id)

    def record_delivered(self, deliveries: Iterable[Delivery]) -> None:
        """Messages a receive call returned, in the order it returned them."""
        with self._lock:
            self._deliveries.extend(deliveries)

    def record_completed(self, deliveries: Iterable[Delivery], confirmed_at: float) -> None:
        """Completions of these deliveries were confirmed at `confirmed_at` (the clock of `Delivery.started`)."""
        with self._lock:
            for delivery in deliveries:
                self._confirmed.setdefault(delivery.copy, confirmed_at)
                self._confirmed_ids.add(delivery.message_id)
                self._outstanding.discard(delivery.message_id)

    def record_unconfirmed(self, deliveries: Iterable[Delivery]) -> None:
        """Completions of these deliveries were attempted, but whether the broker applied them is unknown."""
        with self._lock:
            for delivery in deliveries:
                self._unconfirmed_ids.add(delivery.message_id)
                self._outstanding.discard(delivery.message_id)

    def record_moved_in_doubt(self, message_ids: Iterable[str]) -> None:
        """Messages of batches a client moved on from a partition that may have stored them
        (`tests.moved_in_doubt`): acknowledged at their first send, they may be stored twice all
        the same, as the client warned."""
        with self._lock:
            self._moved_in_doubt.update(message_ids)

    # ------------------------------------------------------------------ progress

    @property
    def acknowledged(self) -> int:
        """How many messages a send acknowledged."""
        with self._lock:
            return len(self._sent)

    def outstanding(self) -> int:
        """Acknowledged messages with no completion yet (neither confirmed nor attempted)."""
        with self._lock:
            return len(self._outstanding)

    def outstanding_ids(self, limit: int = MAX_LISTED) -> list[str]:
        """Some of the outstanding messages, for reports."""
        with self._lock:
            return sorted(self._outstanding)[:limit]

    def stats(self) -> dict[str, int]:
        """Counts for the run's report."""
        with self._lock:
            copies_per_id: dict[str, set[int]] = defaultdict(set)
            seen: set[Copy] = set()
            redeliveries = 0
            for delivery in self._deliveries:
                copies_per_id[delivery.message_id].add(delivery.sequence_number)
                if delivery.copy in seen:
                    redeliveries += 1
                seen.add(delivery.copy)
            return {
                "acknowledged": len(self._sent),
                "deliveries": len(self._deliveries),
                "redeliveries": redeliveries,
                "extra_copies": sum(len(c) - 1 for c in copies_per_id.values()),
                "confirmed": len(self._confirmed_ids),
                "unconfirmed_only": len(self._unconfirmed_ids - self._confirmed_ids),
                "outstanding": len(self._outstanding),
                "moved_in_doubt": len(self._moved_in_doubt),
            }

    # ------------------------------------------------------------------ checks

    def violations(self) -> list[str]:
        """Every broken guarantee, as human-readable lines (empty when the run was correct).

        - an acknowledged message that no completion (confirmed or attempted) reached is missing;
          one whose completions are all unconfirmed is not, and the caller checks that the
          entities ended empty;
        - a delivered message that no acknowledged send carried, or that came back in another
          session or under a sequence number of another message, is wrong;
        - a message whose send was acknowledged at the first try, stored more than once (unless
          a client moved its batch on in doubt, saying so);
        - a copy delivered by a receive call that began after its completion was confirmed;
        - a redelivery of a copy whose delivery count is not higher than the one before;
        - a session whose first deliveries (one per message id) are not in its send order.
        """
        with self._lock:
            return (self._missing() + self._misdelivered() + self._stored_twice() + self._after_completion()
                    + self._delivery_counts() + self._sessions_out_of_order())

    @staticmethod
    def _capped(kind: str, problems: list[str]) -> list[str]:
        if len(problems) <= MAX_LISTED:
            return problems
        return problems[:MAX_LISTED] + [f"... and {len(problems) - MAX_LISTED} more {kind}"]

    def _deliveries_of(self) -> dict[str, list[Delivery]]:
        by_id: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in self._deliveries:
            by_id[delivery.message_id].append(delivery)
        return by_id

    def _missing(self) -> list[str]:
        by_id = self._deliveries_of()
        problems = []
        for message_id in sorted(self._outstanding):
            seen = by_id.get(message_id, [])
            where = ", ".join(f"seq {d.sequence_number} (partition {d.sequence_number >> PARTITION_SHIFT}) "
                              f"delivery count {d.delivery_count}" for d in seen) or "never delivered"
            session = self._sent[message_id]
            problems.append(f"missing: {message_id!r}{'' if session is None else f' (session {session!r})'} was "
                            f"acknowledged by a send but never completed; deliveries: {where}")
        return self._capped("missing messages", problems)

    def _misdelivered(self) -> list[str]:
        problems = []
        owner: dict[Copy, str] = {}
        for delivery in self._deliveries:
            if delivery.message_id not in self._sent:
                problems.append(f"phantom: {delivery.describe()} was delivered but no send of it was acknowledged")
            elif self._sent[delivery.message_id] != delivery.session_id:
                problems.append(f"wrong session: {delivery.describe()} was sent in session "
                                f"{self._sent[delivery.message_id]!r} and delivered in {delivery.session_id!r}")
            first = owner.setdefault(delivery.copy, delivery.message_id)
            if first != delivery.message_id:
                problems.append(f"sequence number reused: {delivery.describe()} has the sequence number "
                                f"of {first!r}")
        return self._capped("misdeliveries", problems)

    def _stored_twice(self) -> list[str]:
        problems = []
        for message_id, deliveries in sorted(self._deliveries_of().items()):
            copies = sorted({d.sequence_number for d in deliveries})
            if message_id in self._clean and message_id not in self._moved_in_doubt and len(copies) > 1:
                problems.append(f"stored twice: {message_id!r} was acknowledged by its first send, yet is stored "
                                f"as sequence numbers {copies}")
        return self._capped("messages stored twice", problems)

    def _after_completion(self) -> list[str]:
        problems = []
        for delivery in self._deliveries:
            confirmed_at = self._confirmed.get(delivery.copy)
            if confirmed_at is not None and delivery.started > confirmed_at:
                problems.append(f"delivered after completion: {delivery.describe()} was delivered (delivery count "
                                f"{delivery.delivery_count}) by a receive that began at {delivery.started:.2f} s, "
                                f"{delivery.started - confirmed_at:.3f} s after its completion was confirmed")
        return self._capped("deliveries after completion", problems)

    def _delivery_counts(self) -> list[str]:
        problems = []
        last: dict[Copy, int] = {}
        for delivery in self._deliveries:
            before = last.get(delivery.copy)
            if before is not None and delivery.delivery_count <= before:
                problems.append(f"delivery count not raised: {delivery.describe()} was redelivered with delivery "
                                f"count {delivery.delivery_count} after a delivery with {before}")
            last[delivery.copy] = delivery.delivery_count
        return self._capped("redeliveries without a higher delivery count", problems)

    def _sessions_out_of_order(self) -> list[str]:
        problems = []
        firsts: dict[str, list[Delivery]] = defaultdict(list)
        seen: set[str] = set()
        for delivery in self._deliveries:
            session = self._sent.get(delivery.message_id)
            if session is None or delivery.message_id in seen:
                continue
            seen.add(delivery.message_id)
            firsts[session].append(delivery)
        for session, order in sorted(self._session_order.items()):
            position = {message_id: i for i, message_id in enumerate(order)}
            previous: Delivery | None = None
            for delivery in firsts.get(session, []):
                if previous is not None and position[delivery.message_id] < position[previous.message_id]:
                    problems.append(
                        f"session order: in session {session!r}, {delivery.describe()} (sent #"
                        f"{position[delivery.message_id]}) was first delivered at {delivery.started:.2f} s with "
                        f"delivery count {delivery.delivery_count}, after {previous.describe()} (sent #"
                        f"{position[previous.message_id]}, first delivered at {previous.started:.2f} s)")
                    break
                previous = delivery
        return self._capped("sessions out of order", problems)
