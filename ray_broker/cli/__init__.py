"""The `ray-broker` command line (typer, with rich tables and progress): the demo, a namespace's
lifecycle on a Ray cluster, queues, topics and subscriptions, messages and benchmarks.

Every command except `demo` and `bench` (each on its own local Ray) works against a Ray cluster
that outlives it: `start` joins the cluster named by `--address` / `RAY_ADDRESS`, or the one
`ray start` last started on this machine, and starts a Ray head of its own if none is running;
the other commands attach to it.
"""
from __future__ import annotations

from .app import app, main

__all__ = ["app", "main"]
