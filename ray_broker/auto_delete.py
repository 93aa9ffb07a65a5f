"""Which entities `auto_delete_on_idle` deletes now. Pure.

An entity is idle while nothing uses it: no send, receive, settlement or session operation on any
of its partitions (`accessed_at` in their runtime counts), and no management update. A topic counts
as used when any of its subscriptions is, and a subscription when its topic is, so that a topic is
never deleted under a subscription still read, nor a subscription while its topic still gets
messages. An entity whose use is unknown (a partition did not answer) is kept.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping


def last_use(accessed: Iterable[float | None]) -> float | None:
    """The latest use over an entity's partitions' `accessed_at`; None when any is unknown.

    >>> last_use([5.0, 7.0]), last_use([5.0, None])
    (7.0, None)
    """
    times = list(accessed)
    return None if any(t is None for t in times) or not times else max(t for t in times if t is not None)


def _related(definition: Mapping[str, Any], definitions: Iterable[Mapping[str, Any]]) -> list[str]:
    """The entity itself and those whose use counts as its own: a topic's subscriptions, a subscription's topic."""
    name = str(definition["name"]).lower()
    if definition["kind"] == "topic":
        return [name] + [str(d["name"]).lower() for d in definitions
                         if d["kind"] == "subscription" and str(d["topic"]).lower() == name]
    if definition["kind"] == "subscription":
        return [name, str(definition["topic"]).lower()]
    return [name]


def watched(definitions: Iterable[Mapping[str, Any]]) -> set[str]:
    """The lower-case names of the entities whose use `idle_entities` needs: those with an
    `auto_delete_on_idle` and their related entities."""
    listed = list(definitions)
    return {name for d in listed if d["options"].get("auto_delete_on_idle") is not None
            for name in _related(d, listed)}


def idle_entities(definitions: Iterable[Mapping[str, Any]], uses: Mapping[str, float | None],
                  now: float) -> list[str]:
    """The names of the entities with an `auto_delete_on_idle` (seconds) that have been idle that
    long at `now`: since their creation, last update and last use (`uses`, by lower-case name;
    None or missing: unknown, so kept), and those of their related entities.

    >>> queue = {"name": "q", "kind": "queue", "options": {"auto_delete_on_idle": 300.0}, "updated_at": 0.0}
    >>> idle_entities([queue], {"q": 100.0}, 399.0), idle_entities([queue], {"q": 100.0}, 400.0)
    ([], ['q'])
    """
    listed = list(definitions)
    idle = []
    for definition in listed:
        interval = definition["options"].get("auto_delete_on_idle")
        if interval is None:
            continue
        times = [uses.get(name) for name in _related(definition, listed)]
        if any(t is None for t in times):
            continue
        latest = max([float(definition.get("created_at") or 0.0), float(definition.get("updated_at") or 0.0),
                      *(t for t in times if t is not None)])
        if now - latest >= interval:
            idle.append(str(definition["name"]))
    return idle
