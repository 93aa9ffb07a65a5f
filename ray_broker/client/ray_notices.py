"""Keeping Ray's own notices out of the output of a program that uses the broker as a library.

When the library joins or starts Ray for a program, Ray would print its start-up notice about
token authentication (through its logger), a warning that it set no SIGTERM handler when an event
loop's start runs `ray.init` on the library's own thread (`blocking.py`), and, on standard output,
"(raylet)" notices about its worker processes (the broker's actors make Ray start many at once).
The library starts Ray with worker logs off; these notices are turned off with them. A Ray the
program initialized itself is left as the program set it up.
"""
from __future__ import annotations

import logging

TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
"""The logger of Ray's token authentication notices (it logs nothing else below ERROR)."""
WORKER_LOGGER = "ray._private.worker"
"""The logger of `ray.init`, which warns when it is called off the main thread."""
SIGTERM_NOTICE = "SIGTERM handler is not set because current thread is not the main thread."


def _not_sigterm_notice(record: logging.LogRecord) -> bool:
    """Whether `record` is anything but `ray.init`'s warning that it set no SIGTERM handler (off
    the main thread none can be set; SIGTERM keeps its default action, ending the process)."""
    return record.getMessage() != SIGTERM_NOTICE


def silence_ray_notices() -> None:
    """Before the library initializes Ray: drop Ray's token authentication notice and its warning
    about the SIGTERM handler, and stop the driver printing Ray's "(raylet)" notices (its errors
    still raise where they happen)."""
    import ray._private.worker as ray_worker

    logging.getLogger(TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
    logging.getLogger(WORKER_LOGGER).addFilter(_not_sigterm_notice)  # added once however often called
    ray_worker._worker_logs_enabled = False
