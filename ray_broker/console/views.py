"""The JSON documents the console's pages show, made from the client's records (runtime
properties, partition statuses, rules, received messages). Pure: no I/O, no Ray."""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from ..cli.output import body_text, plain

HEX_PREVIEW_BYTES = 4096
"""A body's hex dump shows at most this many bytes."""
HEX_ROW_BYTES = 16
SEQUENCE_MASK = (1 << 48) - 1
"""A partitioned entity's sequence numbers carry the partition's index above their 48 low bits,
which count the partition's messages."""
MESSAGE_FIELDS = ("message_id", "session_id", "partition_key", "correlation_id", "subject", "content_type", "to",
                  "reply_to", "reply_to_session_id", "delivery_count", "enqueued_sequence_number",
                  "enqueued_time_utc", "scheduled_enqueue_time_utc", "time_to_live", "expires_at_utc",
                  "dead_letter_reason", "dead_letter_error_description", "dead_letter_source")
"""The broker's and the sender's fields a message's detail lists, besides its body and application
properties."""


def counts_row(kind: str, path: str, runtime: Any) -> dict[str, Any]:
    """A queue's, topic's or subscription's line in the overview: its counts in all and per
    partition (a partition that did not answer is `available: false`)."""
    return {
        "kind": kind, "path": path,
        "active": runtime.active_message_count, "scheduled": runtime.scheduled_message_count,
        "dead_letter": runtime.dead_letter_message_count, "transfer": runtime.transfer_message_count,
        "transfer_dead_letter": runtime.transfer_dead_letter_message_count,
        "total": runtime.total_message_count, "size_in_bytes": runtime.size_in_bytes,
        "availability": runtime.availability,
        "partitions": [{"index": p.index, "available": p.available, "active": p.active_message_count,
                        "dead_letter": p.dead_letter_message_count, "scheduled": p.scheduled_message_count}
                       for p in runtime.partitions],
    }


def partition_rows(statuses: Sequence[Any], rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each partition's health (from `ray-broker status`'s `PartitionStatus`) and the messages it
    holds over the entities' `rows`, with its share of the busiest partition's total (0 to 1, for
    the chart). A partition is down when it does not answer or an entity's count could not reach it."""
    entity_rows = list(rows)
    out = []
    for status in statuses:
        held = [p for row in entity_rows for p in row["partitions"] if p["index"] == status.index]
        active = sum(p["active"] for p in held)
        dead = sum(p["dead_letter"] for p in held)
        scheduled = sum(p["scheduled"] for p in held)
        unreached = any(not p["available"] for p in held)
        out.append({"index": status.index, "health": status.health if not unreached or status.health != "up"
                    else "not answering", "down": status.health != "up" or unreached, "node": status.node,
                    "pid": status.pid, "restarts": status.restarts, "active": active, "dead_letter": dead,
                    "scheduled": scheduled, "total": active + dead + scheduled})
    busiest = max((p["total"] for p in out), default=0)
    for p in out:
        p["share"] = p["total"] / busiest if busiest else 0.0
    return out


REPLICA_KEYS = ("partition", "replica", "node", "role", "epoch", "position", "behind", "in_sync")


def replica_rows(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """Replica rows of `ray-broker status` (`ReplicaSurvey.rows`) as objects."""
    return [dict(zip(REPLICA_KEYS, row)) for row in rows]


@dataclass(frozen=True)
class Sample:
    """The broker's message counters at one time: how many messages the entities ever took in
    (their partitions' next sequence numbers) and how many they hold."""

    at: float
    enqueued: int
    held: int


def sample(at: float, runtimes: Iterable[Any]) -> Sample:
    """The counters of `runtimes` (the queues' and subscriptions'), read at `at` (seconds)."""
    enqueued = held = 0
    for runtime in runtimes:
        enqueued += sum(p.next_sequence_number & SEQUENCE_MASK for p in runtime.partitions)
        held += runtime.active_message_count + runtime.scheduled_message_count + runtime.dead_letter_message_count
    return Sample(at, enqueued, held)


def throughput(before: Sample | None, now: Sample) -> dict[str, float | None]:
    """Messages per second in (enqueued) and out (enqueued less the growth of what is held)
    between two samples; None for both without an earlier one."""
    seconds = now.at - before.at if before is not None else 0.0
    if before is None or seconds <= 0:
        return {"in_per_s": None, "out_per_s": None}
    taken = max(0, now.enqueued - before.enqueued)
    removed = max(0, taken - (now.held - before.held))
    return {"in_per_s": taken / seconds, "out_per_s": removed / seconds}


def rule_row(rule: Any) -> dict[str, Any]:
    """A subscription's rule: its name, filter (type and expression or correlation fields) and
    action, with a one-line summary of the filter."""
    wire = plain(rule.to_wire())
    fil = wire.get("filter") or {}
    if fil.get("type") == "correlation":
        fields = {k: v for k, v in fil.items() if k != "type" and v not in (None, {}, [])}
        summary = ", ".join(f"{k}={v!r}" for k, v in fields.items()) or "(matches every message)"
    else:
        summary = fil.get("sql_expression") or fil.get("type", "")
    action = wire.get("action") or None
    return {"name": rule.name, "filter_type": fil.get("type"), "filter": summary,
            "action": (action or {}).get("sql_expression") if isinstance(action, dict) else action}


def properties_document(properties: Any) -> dict[str, Any]:
    """An entity's properties as JSON (durations in seconds, None for never)."""
    return plain(properties)


def body_views(body: bytes) -> dict[str, Any]:
    """A body shown every way the detail pane offers: its size, text (None unless UTF-8), JSON
    pretty-printed (None unless the text parses), a hex dump of its first `HEX_PREVIEW_BYTES`, and
    base64 (for copying it whole)."""
    raw = bytes(body)
    text = body_text(raw)
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    return {"size": len(raw), "text": text, "json": pretty, "hex": hex_dump(raw[:HEX_PREVIEW_BYTES]),
            "hex_truncated": len(raw) > HEX_PREVIEW_BYTES, "base64": base64.b64encode(raw).decode("ascii")}


def hex_dump(data: bytes) -> str:
    """`data` as rows of offset, 16 hex bytes and their printable characters."""
    lines = []
    for offset in range(0, len(data), HEX_ROW_BYTES):
        chunk = data[offset:offset + HEX_ROW_BYTES]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        chars = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<{HEX_ROW_BYTES * 3 - 1}}  {chars}")
    return "\n".join(lines)


def typed_property(value: Any) -> dict[str, Any]:
    """An application property's value as JSON has it, with its type's name (as `--property KEY:TYPE`
    writes it where it is one of those)."""
    kind = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}.get(type(value))
    if kind is None:
        kind = "datetime" if isinstance(value, datetime) else type(value).__name__
    if isinstance(value, bytes):
        return {"type": kind, "value": base64.b64encode(value).decode("ascii")}
    return {"type": kind, "value": plain(value) if not isinstance(value, datetime) else value.isoformat()}


def message_document(message: Any) -> dict[str, Any]:
    """A peeked message with everything the detail pane shows: its sequence number, partition and
    state, every field, its application properties with their types, and its body's views."""
    fields: dict[str, Any] = {}
    for name in MESSAGE_FIELDS:
        value = getattr(message, name, None)
        fields[name] = value.isoformat() if isinstance(value, datetime) else plain(value)
    state = getattr(message, "state", None)
    return {"sequence_number": message.sequence_number, "partition": message.partition_index,
            "state": getattr(state, "name", None) and state.name.lower(), "fields": fields,
            "application_properties": {str(k): typed_property(v)
                                       for k, v in message.application_properties.items()},
            "body": body_views(message.body)}
