"""The message an enqueue sends (Ray-free): its id is the task id, its body the msgpack task."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping, Sequence

from ..errors import InvalidArgumentError
from ..message import Message
from .codec import CONTENT_TYPE, encode_task

TASK_NAME_PROPERTY = "task_name"
SUPPORTED_OPTIONS = ("task_id", "countdown", "eta")
MAX_TASK_ID = 128


def task_message(name: str, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None, options: Mapping[str, Any],
                 *, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 new_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> Message:
    """The message asking for `name(*args, **kwargs)`. Options (Celery's names): `task_id` (a
    string of at most 128 characters; an enqueue repeated with the same id is stored once),
    `countdown` (seconds to wait before the task may run) or `eta` (an aware datetime).
    Raises `InvalidArgumentError` (or its `TaskEncodingError`) before anything is sent, and
    before `new_id` is asked for an id (when no `task_id` is named)."""
    unknown = sorted(set(options) - set(SUPPORTED_OPTIONS))
    if unknown:
        raise InvalidArgumentError(f"enqueue options {unknown} are not supported; use {list(SUPPORTED_OPTIONS)}")
    named = options.get("task_id") or None
    if named is not None and (not isinstance(named, str) or len(named) > MAX_TASK_ID):
        raise InvalidArgumentError(f"task_id must be a string of at most {MAX_TASK_ID} characters, got {named!r:.160}")
    body = encode_task(name, args, kwargs)
    run_at = _run_at(options, now)
    return Message(body, message_id=named or new_id(), subject=name, content_type=CONTENT_TYPE,
                   application_properties={TASK_NAME_PROPERTY: name}, scheduled_enqueue_time_utc=run_at)


def _run_at(options: Mapping[str, Any], now: Callable[[], datetime]) -> datetime | None:
    countdown, eta = options.get("countdown"), options.get("eta")
    if countdown is not None and eta is not None:
        raise InvalidArgumentError("give countdown or eta, not both")
    if countdown is not None:
        if isinstance(countdown, bool) or not isinstance(countdown, (int, float)) or countdown < 0:
            raise InvalidArgumentError(f"countdown must be a number of seconds >= 0, got {countdown!r}")
        return now() + timedelta(seconds=countdown) if countdown else None
    if eta is not None:
        if not isinstance(eta, datetime) or eta.tzinfo is None:
            raise InvalidArgumentError(f"eta must be a timezone-aware datetime, got {eta!r}")
        return eta
    return None
