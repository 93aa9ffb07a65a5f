"""`async with` for the async client's objects: entering gives the object, leaving awaits its `close()`."""
from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

C = TypeVar("C", bound="Closing")


class Closing:
    """Base of objects with an `async def close()`, usable with `async with` (subclasses may enter
    with more: a receiver locks its session).

        async with ns.get_queue_sender("orders") as sender: ...
    """

    async def close(self) -> Any:
        """Release what the object holds."""
        raise NotImplementedError

    async def __aenter__(self: C) -> C:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
