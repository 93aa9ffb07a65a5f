"""Entity management on one partition: definitions, runtime counts and the integrity check."""
from __future__ import annotations

from typing import Any, Mapping

from .. import codec
from ..errors import MessagingEntityAlreadyExistsError
from ..protocol import DEAD_LETTER, SCHEDULED, TRANSFER_DEAD_LETTER
from ..routing import COUNTER_MASK
from .state import PartitionState


def create_entity(state: PartitionState, definition: Mapping[str, Any]) -> dict[str, Any]:
    """Store a new entity definition; repeating the same creation (same incarnation) is a no-op."""
    key = str(definition["name"]).lower()
    existing = state.definitions.get(key, None)  # type: ignore[arg-type]
    if existing is not None:
        if existing.get("incarnation") == definition.get("incarnation"):
            return existing
        raise state.error(MessagingEntityAlreadyExistsError, f"{existing['kind']} {existing['name']!r} already "
                          "exists; names are unique regardless of case", existing["name"])
    return _put_definition(state, key, dict(definition))


def update_entity(state: PartitionState, definition: Mapping[str, Any]) -> dict[str, Any]:
    """Replace an existing entity's definition."""
    key = str(definition["name"]).lower()
    if key not in state.definitions:
        raise state.not_found(str(definition["name"]))
    return _put_definition(state, key, dict(definition))


def _put_definition(state: PartitionState, key: str, definition: dict[str, Any]) -> dict[str, Any]:
    entity_id = state.entity_ids.get(key, 0) or _free_entity_id(state)
    with state.store.transaction():
        state.queries.put_entity(key, entity_id, codec.packb(definition))
        state.definitions.set(key, definition)
        state.entity_ids.set(key, entity_id)
    return definition


def _free_entity_id(state: PartitionState) -> int:
    """The lowest entity number not in use (a deleted entity's number is free again: its messages
    went with it)."""
    used = {entity_id for _, entity_id in state.entity_ids.items()}
    return next(n for n in range(1, len(used) + 2) if n not in used)


def delete_entity(state: PartitionState, name: str) -> bool:
    """Remove an entity and everything it holds here; False if it was not here."""
    key = name.lower()
    if key not in state.definitions:
        return False
    with state.store.transaction():
        state.queries.delete_entity(key, state.entity_ids.get(key, 0))
        state.definitions.pop(key)
        state.entity_ids.pop(key)
        state.sizes.pop(key)
        state.counters.pop(key)
    return True


def get_entity(state: PartitionState, name: str) -> dict[str, Any]:
    """The definition of an entity, or `MessagingEntityNotFoundError`."""
    definition = state.definitions.get(name.lower(), None)  # type: ignore[arg-type]
    if definition is None:
        raise state.not_found(name)
    return definition


def list_entities(state: PartitionState) -> list[dict[str, Any]]:
    """Every entity definition this partition holds, in name order."""
    return [definition for _, definition in sorted(state.definitions.items(), key=lambda item: item[0])]


def runtime(state: PartitionState, entity: str) -> dict[str, Any]:
    """This partition's message counts and size for an entity."""
    frag = state.fragment(entity)
    with state.store.transaction():
        state.activate_due(state.clock.now(), frag)
    counts = {"active": 0, "dead_letter": 0, "scheduled": 0, "transfer": 0, "transfer_dead_letter": 0,
              "size": state.sizes.get(frag.key, 0)}
    for subq, message_state, n in state.queries.message_counts(frag.entity_id):
        if subq == DEAD_LETTER:
            counts["dead_letter"] += n
        elif subq == TRANSFER_DEAD_LETTER:
            counts["transfer_dead_letter"] += n
        elif message_state == SCHEDULED:
            counts["scheduled"] += n
        else:
            counts["active"] += n
    return counts


def integrity_check(state: PartitionState) -> dict[str, Any]:
    """Check the store and the engine's invariants: SQLite integrity, sizes, gap-free counters."""
    problems = []
    verdict = state.store.integrity_check()
    if verdict != "ok":
        problems.append(f"sqlite: {verdict}")
    for key, size in state.queries.stored_sizes():
        if state.sizes.get(key, 0) != size:
            problems.append(f"{key}: size counter {state.sizes.get(key, 0)} != stored {size}")
    for key, top in state.queries.highest_sequences():
        counter = top & COUNTER_MASK
        if counter >= state.counters.get(key, 1):
            problems.append(f"{key}: sequence {counter} not below counter {state.counters.get(key, 1)}")
    return {"ok": not problems, "problems": problems}
