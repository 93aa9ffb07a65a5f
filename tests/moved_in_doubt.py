"""The messages the broker said it may store twice: the batches a router of this process moved on
from a partition that may have stored them and then stayed away (the warning that carries a
`ray_broker.routing.send_routing.MovedInDoubt`). Tests that count copies under failures allow a second
copy of these, and of no other message acknowledged at its first send."""
from __future__ import annotations

import logging
import threading
from types import TracebackType

from ray_broker.routing.send_routing import MOVED_IN_DOUBT, MovedInDoubt

SENDING_LOGGER = "ray_broker.sending"


class MovedInDoubtLog(logging.Handler):
    """Collects the batches moved on in doubt while it is entered (thread-safe)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._batches: list[MovedInDoubt] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        moved = getattr(record, MOVED_IN_DOUBT, None)
        if isinstance(moved, MovedInDoubt):
            with self._guard:
                self._batches.append(moved)

    @property
    def batches(self) -> list[MovedInDoubt]:
        """The batches moved on in doubt so far."""
        with self._guard:
            return list(self._batches)

    @property
    def message_ids(self) -> set[str]:
        """The ids of their messages (those that have one)."""
        return {i for batch in self.batches for i in batch.message_ids if i is not None}

    def attach(self) -> None:
        """Start collecting."""
        logging.getLogger(SENDING_LOGGER).addHandler(self)

    def detach(self) -> None:
        """Stop collecting."""
        logging.getLogger(SENDING_LOGGER).removeHandler(self)

    def __enter__(self) -> MovedInDoubtLog:
        self.attach()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.detach()
