"""Task bodies and status records as msgpack (Ray-free).

No pickle crosses the broker: a task's arguments and a handler's result are msgpack values (None,
bool, int, float, str, bytes, lists, tuples (read back as lists) and dicts of these). Anything else
raises `TaskEncodingError` naming where it was, before anything is sent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import msgpack

from ..errors import InvalidArgumentError

BODY_VERSION = 1
CONTENT_TYPE = "application/x-msgpack"


class TaskEncodingError(InvalidArgumentError):
    """A task's arguments (or a handler's result) hold a value msgpack cannot carry."""


class TaskDecodingError(ValueError):
    """A message body is not a task this adapter wrote (the task is unprocessable)."""


@dataclass(frozen=True)
class TaskCall:
    """One task as it travels in a message body: the handler's name and its arguments."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]


def _unencodable(value: Any, path: str) -> str | None:
    """The path of the first value under `value` that msgpack cannot carry, or None."""
    if value is None or isinstance(value, (bool, str, bytes, bytearray, float)):
        return None
    if isinstance(value, int):
        return None if -(2 ** 63) <= value < 2 ** 64 else f"{path} (an int outside 64 bits)"
    if isinstance(value, (list, tuple)):
        return next((p for i, v in enumerate(value) if (p := _unencodable(v, f"{path}[{i}]"))), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int, bytes, bool, float)) and k is not None:
                return f"{path} (a key of type {type(k).__name__})"
            if (p := _unencodable(v, f"{path}[{k!r}]")):
                return p
        return None
    return f"{path} (a {type(value).__module__}.{type(value).__qualname__})"


def pack(value: Any, what: str) -> bytes:
    """`value` as msgpack; `TaskEncodingError` saying which part of `what` cannot be carried."""
    where = _unencodable(value, what)
    if where is not None:
        raise TaskEncodingError(
            f"{where} cannot be sent as a task value: only None, bool, int, float, str, bytes, lists, tuples "
            "and dicts of these travel (msgpack; no pickle crosses the broker). Pass plain data, e.g. "
            "an array's .tolist() or an object's fields as a dict, or a reference such as a storage path")
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    """A msgpack value written by `pack`."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_task(name: str, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> bytes:
    """The body of a message asking for `name(*args, **kwargs)`; raises `TaskEncodingError` or
    `InvalidArgumentError` for what cannot be sent."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"task_name must be a non-empty string, got {name!r}")
    if args is not None and not isinstance(args, (list, tuple)):
        raise InvalidArgumentError(f"args of task {name!r} must be a list or tuple, got {type(args).__name__}")
    if kwargs is not None and not (isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)):
        raise InvalidArgumentError(f"kwargs of task {name!r} must be a dict with str keys, got {kwargs!r:.80}")
    return pack({"v": BODY_VERSION, "name": name, "args": list(args or ()), "kwargs": dict(kwargs or {})},
                f"task {name!r}")


def decode_task(body: bytes) -> TaskCall:
    """The task in a message body; `TaskDecodingError` when it is not one."""
    try:
        value = unpack(body)
    except Exception as e:  # msgpack raises several unrelated types for bad input
        raise TaskDecodingError(f"the body is not msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict) or value.get("v") != BODY_VERSION:
        raise TaskDecodingError(f"the body is not a version-{BODY_VERSION} task (no 'v': {BODY_VERSION} map)")
    name, args, kwargs = value.get("name"), value.get("args"), value.get("kwargs")
    if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict) \
            or not all(isinstance(k, str) for k in kwargs):
        raise TaskDecodingError("the task body lacks a str 'name', a list 'args' or a str-keyed map 'kwargs'")
    return TaskCall(name, args, kwargs)
