"""CPU time by process role over a measured stretch: which processes a message costs, and how much.

A benchmark names the processes of each role (`{"client": [pid], "leaders": [...], ...}`), takes a
`CpuSnapshot` before and after the stretch, and divides the difference by the messages it moved.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import psutil


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far (0 for one that is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return float(times.user + times.system)


def descendants_named(names: Iterable[str], root: int | None = None) -> list[int]:
    """The pids of the processes under `root` (default: this one) whose name is one of `names`."""
    wanted = set(names)
    try:
        children = psutil.Process(root or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if child.name() in wanted:
                out.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return out


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds so far of each role's processes."""

    seconds: dict[str, float]

    @classmethod
    def take(cls, roles: dict[str, list[int]]) -> "CpuSnapshot":
        """The CPU seconds of every role now."""
        return cls({role: sum(cpu_seconds(pid) for pid in pids) for role, pids in roles.items()})

    def per_message_us(self, before: "CpuSnapshot", messages: int) -> dict[str, float]:
        """Microseconds of CPU per message of each role between `before` and this snapshot,
        with their sum under "total"."""
        spent = {role: max(0.0, value - before.seconds.get(role, 0.0)) for role, value in self.seconds.items()}
        per = {role: round(value * 1e6 / messages, 1) if messages else 0.0 for role, value in spent.items()}
        per["total"] = round(sum(per.values()), 1)
        return per
