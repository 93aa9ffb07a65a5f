"""Client operations as flows: the order of a client's calls written once, for sync and async alike.

A flow is a generator that yields each request it needs answered and is sent the reply (or thrown
the error) in return; its return value is the operation's result. Flows hold every decision a
client makes (validation, request building, reply applying); they do no I/O. A driver does the
I/O: `run` answers requests from a link's blocking `call`, `run_async` awaits the link's
`call_async`. Imports no Ray.

    def get_state(entity: str, lock: dict) -> Flow[bytes | None]:
        return (yield request("session_call", entity, lock, "get_session_state", timeout=60.0))

    state = run(link, get_state("orders", lock))            # sync
    state = await run_async(link, get_state("orders", lock))  # async
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, NamedTuple, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Call(NamedTuple):
    """One request to a namespace: the operation, its positional arguments, and how long to wait."""

    operation: str
    args: tuple[Any, ...]
    timeout: float


Flow = Generator[Call, Any, T]
"""A client operation: yields `Call`s, is sent their replies, returns the operation's result."""


def request(operation: str, *args: Any, timeout: float) -> Call:
    """The `Call` of `operation(*args)`, waited for up to `timeout` seconds."""
    return Call(operation, args, timeout)


class Link(Protocol):
    """What a driver needs of a link to a namespace (`GatewayLink`, `DirectLink`)."""

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run an operation, blocking until it answers."""
        ...

    def call_async(self, operation: str, *args: Any, timeout: float) -> Awaitable[Any]:
        """Run an operation on the running event loop."""
        ...


def _advance(flow: Generator[R, Any, T], ok: bool, value: Any) -> tuple[bool, Any]:
    """Resume `flow` with a reply (`ok`) or an error to raise in it; returns (True, its next request)
    or, once it returned, (False, its value)."""
    try:
        return True, (flow.send(value) if ok else flow.throw(value))
    except StopIteration as done:
        return False, done.value


def drive(flow: Generator[R, Any, T], answer: Callable[[R], Any]) -> T:
    """Run a generator that yields requests of type R: each is answered by `answer(request)`, whose
    value is sent back in (or whose exception is raised in it); returns the generator's value."""
    waiting, value = _advance(flow, True, None)
    while waiting:
        try:
            ok, value = True, answer(value)
        except BaseException as error:  # noqa: BLE001 - raised in the flow, which re-raises what it does not handle
            ok, value = False, error
        waiting, value = _advance(flow, ok, value)
    return value  # type: ignore[no-any-return]


async def drive_async(flow: Generator[R, Any, T], answer: Callable[[R], Awaitable[Any]]) -> T:
    """`drive` on the running event loop: each request is answered by awaiting `answer(request)`."""
    waiting, value = _advance(flow, True, None)
    while waiting:
        try:
            ok, value = True, await answer(value)
        except BaseException as error:  # noqa: BLE001 - raised in the flow, which re-raises what it does not handle
            ok, value = False, error
        waiting, value = _advance(flow, ok, value)
    return value  # type: ignore[no-any-return]


def run(link: Link, flow: Flow[T]) -> T:
    """Run a flow, answering its requests with the link's blocking `call`."""
    return drive(flow, lambda call: link.call(call.operation, *call.args, timeout=call.timeout))


async def run_async(link: Link, flow: Flow[T]) -> T:
    """Run a flow on the running event loop, awaiting the link's `call_async` for each request."""
    return await drive_async(flow, lambda call: link.call_async(call.operation, *call.args, timeout=call.timeout))
