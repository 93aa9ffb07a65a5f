"""`ray-broker demo` and `ray-broker bench`: the demonstration and the benchmark suite, each on a
local Ray of its own."""
from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer

from ..errors import InvalidOperationError


def demo(messages: Annotated[int, typer.Option(help="Messages to send (at least 1000).")] = 20_000) -> None:
    """Run the end-to-end demo on an embedded local Ray: load, a partition killed, nothing lost."""
    from ..demo import run_demo

    if not run_demo(messages=messages).ok:
        raise typer.Exit(1)


def bench(ctx: typer.Context) -> None:
    """Run the benchmark suite (benchmarks/suite.py); every later argument goes to it (`bench --help`)."""
    code = int(benchmark_suite().main(list(ctx.args)) or 0)
    if code:
        raise typer.Exit(code)


def benchmark_suite() -> Any:
    """The `benchmarks.suite` module, installed with this package."""
    try:
        return importlib.import_module("benchmarks.suite")
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.suite"):
            raise
    raise InvalidOperationError("the benchmark suite (the benchmarks package) is not installed: reinstall ray-broker "
                                "(`pip install ray-broker`, or `pip install -e .` in its source checkout)")
