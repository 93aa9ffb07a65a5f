"""Free TCP ports for a broker a test starts."""
from __future__ import annotations

import random
import socket

QUIET_PORTS = range(20000, 32768)
"""Ports no other process on this machine picks for itself: below the kernel's ephemeral range
(from 32768, where a bind to port 0 and every outgoing connection take theirs) and above Ray's
worker ports (up to 19999). A port probed free here stays free until the test listens on it."""


def free_port(avoid: frozenset[int] = frozenset()) -> int:
    """A TCP port free on every address of this machine right now, from `QUIET_PORTS`, not in `avoid`."""
    while True:
        port = random.choice(QUIET_PORTS)
        if port in avoid:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
