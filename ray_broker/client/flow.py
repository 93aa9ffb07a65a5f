"""Client operations as flows: the order of a client's calls written once, for sync and async alike.

A flow is a generator that yields each request it needs answered and is sent the reply (or thrown
the error) in return; its return value is the operation's result. A data operation is asked of
the namespace's router with a typed request (`route(ReceiveRequest(...), timeout=...)`, see
`router_requests`), management of the gateway by name (`request("create_entity", ...)`). Flows
hold every decision a client makes (validation, request building, reply applying); they do no
I/O. A driver does the I/O: `run` answers requests from a link's blocking `route` and `call`,
`run_async` awaits the link's `route_async` and `call_async`. Imports no Ray.

    def get_state(entity: str, lock: HeldSession) -> Flow[bytes | None]:
        return (yield route(SessionCallRequest(entity, lock, "get_session_state"), timeout=60.0))

    state = run(link, get_state("orders", lock))            # sync
    state = await run_async(link, get_state("orders", lock))  # async
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, NamedTuple, Protocol, TypeVar, Union

from ..router_requests import RouterRequest

T = TypeVar("T")
R = TypeVar("R")


class Call(NamedTuple):
    """One management request to a namespace's gateway: the operation, its positional arguments,
    and how long to wait."""

    operation: str
    args: tuple[Any, ...]
    timeout: float


class Route(NamedTuple):
    """One data request to a namespace's router, and how long to wait."""

    request: RouterRequest
    timeout: float


Ask = Union[Call, Route]
"""What a flow asks of a link."""

Flow = Generator[Ask, Any, T]
"""A client operation: yields `Call`s and `Route`s, is sent their replies, returns the operation's
result."""


def request(operation: str, *args: Any, timeout: float) -> Call:
    """The `Call` of management operation `operation(*args)`, waited for up to `timeout` seconds."""
    return Call(operation, args, timeout)


def route(request: RouterRequest, *, timeout: float) -> Route:
    """The `Route` of a router request, waited for up to `timeout` seconds."""
    return Route(request, timeout)


class Link(Protocol):
    """What a driver needs of a link to a namespace (`GatewayLink`, `DirectLink`)."""

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        """Run a management operation, blocking until it answers."""
        ...

    def call_async(self, operation: str, *args: Any, timeout: float) -> Awaitable[Any]:
        """Run a management operation on the running event loop."""
        ...

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        """Run a router request, blocking until it answers; its typed reply."""
        ...

    def route_async(self, request: RouterRequest, *, timeout: float) -> Awaitable[Any]:
        """Run a router request on the running event loop; its typed reply."""
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


def answer(link: Link, ask: Ask) -> Any:
    """The link's blocking answer to what a flow asks."""
    if isinstance(ask, Route):
        return link.route(ask.request, timeout=ask.timeout)
    return link.call(ask.operation, *ask.args, timeout=ask.timeout)


def answer_async(link: Link, ask: Ask) -> Awaitable[Any]:
    """The link's answer to what a flow asks, on the running event loop."""
    if isinstance(ask, Route):
        return link.route_async(ask.request, timeout=ask.timeout)
    return link.call_async(ask.operation, *ask.args, timeout=ask.timeout)


def run(link: Link, flow: Flow[T]) -> T:
    """Run a flow, answering its requests with the link's blocking `route` and `call`."""
    return drive(flow, lambda ask: answer(link, ask))


async def run_async(link: Link, flow: Flow[T]) -> T:
    """Run a flow on the running event loop, awaiting the link's `route_async` and `call_async`."""
    return await drive_async(flow, lambda ask: answer_async(link, ask))
