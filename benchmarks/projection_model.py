"""The projection model: throughput on N cores from the CPU seconds each kind of process spent per message.

    throughput(N) = min( N / total,                      every process's work spread over N cores
                         1 / busiest_partition,          a partition actor runs on one core at a time
                         1 / serial_k for each single process k: gateway, queue actor, raylet, GCS )

where `total` is the CPU seconds per message of every process of the Ray instance together (clients,
partitions, gateway, queue actor, raylet, GCS, driver, Ray's other processes), `busiest_partition`
the CPU seconds per message (of all messages) of the partition process that spent the most, and
`serial_k` the CPU seconds per message of single process k. Assumptions: one node of N cores;
clients scale with the cores (enough of them to keep every core busy, their CPU per message
unchanged); a Python actor process uses at most one core (the GIL); the measured CPU per message
holds at higher rates (idle costs such as timers are spread over more messages there, so the
projection leans low). A variant leaves the CPU of the clients out of `total` (`elsewhere`): the
broker's own processes on N cores, its clients on other machines. Plain Python, no Ray.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SERIAL_KINDS = ("gateway", "queue_actor", "raylet", "gcs_server")
"""Kinds of process of which there is exactly one: each caps throughput at one core's worth."""

PARTITIONS = "partitions"
"""The kind of the partition actors, one process each, each capped at one core."""


@dataclass(frozen=True)
class CpuProfile:
    """CPU seconds (user + system) spent during a timed window that moved `messages` messages."""

    messages: int
    cpu_s_by_kind: dict[str, float]
    partition_cpu_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.messages <= 0:
            raise ValueError(f"a CPU profile needs at least one message moved in its window, got {self.messages}")

    def per_message(self) -> dict[str, float]:
        """CPU seconds per message of each kind."""
        return {kind: max(seconds, 0.0) / self.messages for kind, seconds in self.cpu_s_by_kind.items()}

    def total_per_message(self, elsewhere: tuple[str, ...] = ()) -> float:
        """CPU seconds per message of every process together, but those of the kinds `elsewhere`."""
        return sum(seconds for kind, seconds in self.per_message().items() if kind not in elsewhere)

    def busiest_partition_per_message(self) -> float:
        """CPU seconds per message of the partition process that spent the most (0 with none)."""
        return max(self.partition_cpu_s, default=0.0) / self.messages


def ceilings(profile: CpuProfile) -> dict[str, float]:
    """Messages per second each serial part allows on its own (one core each): the busiest
    partition and every single process that spent any CPU."""
    out: dict[str, float] = {}
    busiest = profile.busiest_partition_per_message()
    if busiest > 0:
        out["busiest_partition"] = 1 / busiest
    per = profile.per_message()
    for kind in SERIAL_KINDS:
        if per.get(kind, 0.0) > 0:
            out[kind] = 1 / per[kind]
    return out


def project(profile: CpuProfile, cores: int, elsewhere: tuple[str, ...] = ()) -> dict[str, Any]:
    """Projected messages per second on `cores` cores and the bound that sets it ("cores" or a
    serial part named as in `ceilings`); the kinds `elsewhere` run on other machines."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    total = profile.total_per_message(elsewhere)
    if total <= 0:
        raise ValueError("the profile spent no CPU: nothing to project from")
    bounds = {"cores": cores / total, **ceilings(profile)}
    bound = min(bounds, key=lambda name: bounds[name])
    return {"msgs_per_s": round(bounds[bound], 1), "bound": bound}


def projections(profile: CpuProfile, cores: list[int], elsewhere: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """`project` for each core count, keyed by the count as text (JSON keys)."""
    return {str(n): project(profile, n, elsewhere) for n in cores}
