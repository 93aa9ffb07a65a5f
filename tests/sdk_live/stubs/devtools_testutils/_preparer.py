"""The decorator behind every preparer stub: before the test it makes what the preparer provides
(named keyword arguments), passes them on with those it was given, and removes what it made after
the test. Pytest sees the test's signature without the provided names, so it asks no fixture for them."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` trimmed to what `fn` takes (all of them when it takes **kwargs)."""
    parameters = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in parameters}


class Preparer:
    """Subclasses name what they provide (`provides`) and make it in `create(given)`, where `given`
    holds what outer preparers and pytest passed; `remove(made)` undoes it."""

    provides: tuple[str, ...] = ()

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        """What this preparer passes to the test, by keyword."""
        return {}

    def remove(self, made: dict[str, Any]) -> None:
        """Remove what `create` made."""

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                made = self.create(kwargs)
                try:
                    return await fn(*args, **_accepted(fn, {**kwargs, **made}))
                finally:
                    self.remove(made)
            wrapper: Callable[..., Any] = run_async
        else:
            def run(*args: Any, **kwargs: Any) -> Any:
                made = self.create(kwargs)
                try:
                    return fn(*args, **_accepted(fn, {**kwargs, **made}))
                finally:
                    self.remove(made)
            wrapper = run
        functools.update_wrapper(wrapper, fn)
        signature = inspect.signature(fn)
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p for name, p in signature.parameters.items() if name not in self.provides])
        return wrapper
