"""Entity management on one partition: definitions, runtime counts and the integrity check."""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import MessagingEntityAlreadyExistsError
from ..protocol import COUNTER_MASK, DEAD_LETTER, MAIN, SCHEDULED, TRANSFER, TRANSFER_DEAD_LETTER
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
    if definition["kind"] == "subscription" and str(definition["topic"]).lower() not in state.definitions:
        raise state.not_found(str(definition["topic"]))
    return state.put_definition(dict(definition))


def update_entity(state: PartitionState, definition: Mapping[str, Any]) -> dict[str, Any]:
    """Replace an existing entity's definition (a subscription keeps its rules: those change
    through `topics`)."""
    key = str(definition["name"]).lower()
    current = state.definitions.get(key, None)  # type: ignore[arg-type]
    if current is None:
        raise state.not_found(str(definition["name"]))
    if current["kind"] == "subscription":
        definition = {**definition, "rules": current.get("rules", [])}
    return state.put_definition(dict(definition))


def delete_entity(state: PartitionState, name: str) -> bool:
    """Remove an entity and everything it holds here (a topic's subscriptions too); False if it
    was not here."""
    key = name.lower()
    definition = state.definitions.get(key, None)  # type: ignore[arg-type]
    if definition is None:
        return False
    try:
        with state.store.transaction():
            if definition["kind"] == "topic":
                for sub_key, sub in list(state.definitions.items()):
                    if sub["kind"] == "subscription" and str(sub["topic"]).lower() == key:
                        _drop(state, sub_key)
            _drop(state, key)
            if definition["kind"] == "subscription":
                topic = str(definition["topic"]).lower()
                freed = state.queries.delete_unreferenced_bodies(state.entity_ids.get(topic, 0))
                state.sizes.add(topic, -freed)
    finally:
        state.definitions_changed()
    return True


def _drop(state: PartitionState, key: str) -> None:
    """Delete one entity's definition and rows (inside a transaction)."""
    state.queries.delete_entity(key, state.entity_ids.get(key, 0))
    state.definitions.pop(key)
    state.entity_ids.pop(key)
    state.sizes.pop(key)
    state.counters.pop(key)


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
    """This partition's message counts and size for an entity, and when it was last used here
    (`accessed_at`, epoch seconds)."""
    frag = state.fragment(entity)
    with state.store.transaction():
        state.activate_due(state.clock.now(), frag)
    counts = {"active": 0, "dead_letter": 0, "scheduled": 0, "transfer": 0, "transfer_dead_letter": 0,
              "size": state.sizes.get(frag.key, 0),
              "next_sequence": frag.seq_base | state.counters.get(_counter_key(frag.definition, frag.key), 1),
              "accessed_at": state.accessed.get(frag.key, state.opened_at)}
    if frag.kind == "topic":
        counts["subscriptions"] = len(state.subscribers(frag))
    forwards = bool(frag.options.get("forward_to"))
    for subq, message_state, n in state.queries.message_counts(frag.entity_id):
        if message_state == TRANSFER or (forwards and subq == MAIN and message_state != SCHEDULED):
            counts["transfer"] += n
        elif subq == DEAD_LETTER:
            counts["dead_letter"] += n
        elif subq == TRANSFER_DEAD_LETTER:
            counts["transfer_dead_letter"] += n
        elif message_state == SCHEDULED:
            counts["scheduled"] += n
        else:
            counts["active"] += n
    return counts


def _counter_key(definition: Mapping[str, Any], key: str) -> str:
    """Whose sequence counter numbers an entity's messages: a subscription's are its topic's."""
    return str(definition.get("topic", key)).lower()


def integrity_check(state: PartitionState) -> dict[str, Any]:
    """Check the store and the engine's invariants: SQLite integrity, sizes (a topic's: its bodies),
    sequence numbers below their counters (a subscription's: its topic's)."""
    problems = []
    verdict = state.store.integrity_check()
    if verdict != "ok":
        problems.append(f"sqlite: {verdict}")
    definitions = dict(state.definitions.items())
    stored = dict(state.queries.stored_sizes())
    for key, definition in definitions.items():
        expected = stored.get(key, 0)
        if definition["kind"] == "topic":
            expected = state.queries.body_bytes(state.entity_ids.get(key, 0))
        if state.sizes.get(key, 0) != expected:
            problems.append(f"{key}: size counter {state.sizes.get(key, 0)} != stored {expected}")
    for key, top in state.queries.highest_sequences():
        counter_key = _counter_key(definitions[key], key)
        counter = top & COUNTER_MASK
        if counter >= state.counters.get(counter_key, 1):
            problems.append(f"{key}: sequence {counter} not below counter {state.counters.get(counter_key, 1)}")
    return {"ok": not problems, "problems": problems}
