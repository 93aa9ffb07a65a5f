"""Keeping Ray's own notices out of the output of a program that uses the broker as a library.

When the library joins or starts Ray for a program, Ray would print its start-up notice about
token authentication (through its logger) and, on standard output, "(raylet)" notices about its
worker processes (the broker's actors make Ray start many at once). The library starts Ray with
worker logs off; these notices are turned off with them. A Ray the program initialized itself is
left as the program set it up.
"""
from __future__ import annotations

import logging

TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
"""The logger of Ray's token authentication notices (it logs nothing else below ERROR)."""


def silence_ray_notices() -> None:
    """Before the library initializes Ray: drop Ray's token authentication notice and stop the
    driver printing Ray's "(raylet)" notices (its errors still raise where they happen)."""
    import ray._private.worker as ray_worker

    logging.getLogger(TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
    ray_worker._worker_logs_enabled = False
