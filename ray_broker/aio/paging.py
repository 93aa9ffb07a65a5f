"""`ItemList`: what the async client's listing calls return, both awaitable and async-iterable."""
from __future__ import annotations

from typing import AsyncIterator, Awaitable, Callable, Generator, Generic, TypeVar

T = TypeVar("T")


class ItemList(Generic[T]):
    """The items a listing call names: `async for` over them, as over the SDK's `AsyncItemPaged`,
    or `await` the call for a list. Each use asks the namespace afresh.

    Example:
        async for queue in ns.list_queues():
            print(queue.name)
        names = [q.name for q in await ns.list_queues()]
    """

    def __init__(self, fetch: Callable[[], Awaitable[list[T]]]) -> None:
        self._fetch = fetch

    def __await__(self) -> Generator[object, None, list[T]]:
        return self._fetch().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        for item in await self._fetch():
            yield item
