"""The local Ray the library starts for a program: Ray's untyped start-up failure is tried once
more, then reported as `RayStartupError` saying what happened and what to do; and `ray.init`'s
warning about the SIGTERM handler, which it logs when an event loop's start runs it on the
library's thread, is dropped."""
from __future__ import annotations

import logging
from typing import Any

import pytest

from ray_broker.client import lifecycle
from ray_broker.client.ray_notices import SIGTERM_NOTICE, WORKER_LOGGER, silence_ray_notices
from ray_broker.errors import RayStartupError

NODE_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed "
                "to startup or the GCS has become overloaded.")
"""What Ray 2.60 raises (an `Exception`) when its processes miss its start-up deadline."""


class RayStarts:
    """`ray.init` and `ray.shutdown` of a Ray whose first `failures` starts time out."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def init(self, **options: Any) -> None:
        self.calls.append(f"init {options['address']}")
        if self.failures:
            self.failures -= 1
            raise Exception(NODE_TIMEOUT)  # noqa: TRY002 - as Ray raises it

    def shutdown(self) -> None:
        self.calls.append("shutdown")


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> RayStarts:
    ray_starts = RayStarts(request.param)
    monkeypatch.setattr(lifecycle.ray, "init", ray_starts.init)
    monkeypatch.setattr(lifecycle.ray, "shutdown", ray_starts.shutdown)
    return ray_starts


@pytest.mark.parametrize("starts", [1], indirect=True)
def test_a_start_that_times_out_once_is_tried_again(starts: RayStarts) -> None:
    lifecycle.start_local_ray()
    assert starts.calls == ["init local", "shutdown", "init local"]


@pytest.mark.parametrize("starts", [2], indirect=True)
def test_a_start_that_times_out_twice_is_a_typed_error_saying_what_to_do(starts: RayStarts) -> None:
    with pytest.raises(RayStartupError) as raised:
        lifecycle.start_local_ray()
    assert starts.calls == ["init local", "shutdown", "init local", "shutdown"]
    message = str(raised.value)
    assert message.startswith(f"a local Ray could not be started (2 tries; Ray reported: {NODE_TIMEOUT}). ")
    assert "`ray start --head`" in message and "RAY_ADDRESS" in message


def test_the_sigterm_warning_of_ray_init_is_dropped_and_its_other_warnings_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    silence_ray_notices()
    worker = logging.getLogger(WORKER_LOGGER)
    with caplog.at_level(logging.WARNING, logger=WORKER_LOGGER):
        worker.warning(SIGTERM_NOTICE)
        worker.warning("another warning")
    assert [r.getMessage() for r in caplog.records if r.name == WORKER_LOGGER] == ["another warning"]
