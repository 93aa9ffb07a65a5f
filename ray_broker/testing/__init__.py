"""Tools for applications' own tests against a broker.

`advance_clock(ns, by)` moves a namespace's clock forward, so that a test of "a message scheduled
an hour ahead is delivered then" does not wait an hour.
"""
from __future__ import annotations

from .clock import advance_clock

__all__ = ["advance_clock"]
