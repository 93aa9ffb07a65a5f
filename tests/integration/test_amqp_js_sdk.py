"""The official JavaScript SDK (`@azure/service-bus`, unmodified, pinned in js/package.json)
against a namespace's AMQP front end: one node process (js/sdk_round_trip.js) sends, receives,
settles, schedules and uses sessions, and reports what it saw as JSON; this module checks the
report and what the broker holds afterwards through the Python client.

The SDK is installed by `npm ci --prefix tests/integration/js` (done by `.ci/run`)."""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

import ray_broker as rb

from .helpers import amqp_connection_string

pytestmark = pytest.mark.ray
PROGRAM_DIR = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")
NODE_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def js_report(amqp_namespace: rb.Namespace) -> tuple[dict[str, Any], rb.Namespace, str, str]:
    """Run the JS program once against the module's namespace: its report, the namespace and the
    two queues it used (a plain one and one that requires sessions)."""
    if NODE is None:
        pytest.skip("node is not installed: the JavaScript SDK test needs Node.js 18 or later")
    if not (PROGRAM_DIR / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.fail(f"the JavaScript SDK is not installed: run `npm ci --prefix {PROGRAM_DIR}` first")
    ns = amqp_namespace
    queue, session_queue = f"js-{uuid.uuid4().hex[:8]}", f"js-s-{uuid.uuid4().hex[:8]}"
    ns.create_queue(queue, max_delivery_count=5)
    ns.create_queue(session_queue, requires_session=True)
    run = subprocess.run([NODE, str(PROGRAM_DIR / "sdk_round_trip.js"), amqp_connection_string(ns), queue,
                          session_queue], capture_output=True, text=True, timeout=NODE_TIMEOUT_S, cwd=PROGRAM_DIR)
    assert run.returncode == 0, f"the JS program failed:\n{run.stderr}"
    return json.loads(run.stdout), ns, queue, session_queue


def by_id(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["messageId"]: m for m in messages}


def test_single_batched_and_listed_sends_arrive_with_their_properties(js_report) -> None:  # type: ignore[no-untyped-def]
    report = js_report[0]
    assert report["sent"]["batchCount"] == 3
    assert report["sent"]["batchMaxSizeInBytes"] == 256 * 1024  # the standard tier's limit, from the link
    received = by_id(report["settled"]["received"])
    assert sorted(received) == ["b-0", "b-1", "b-2", "l-abandon", "l-dead", "m-1"]
    first = received["m-1"]
    assert (first["body"], first["correlationId"], first["contentType"], first["subject"], first["to"],
            first["replyTo"], first["partitionKey"]) == \
        ("first", "c-1", "text/plain", "greeting", "someone", "back", "key-1")
    assert first["timeToLive"] == 420000
    assert first["applicationProperties"] == {"n": 7, "s": "text", "f": 1.5, "b": True}
    assert [received[f"b-{i}"]["body"] for i in range(3)] == [f"batched {i}" for i in range(3)]
    assert received["l-dead"]["body"] == {"kind": "json", "n": 1}
    for message in received.values():
        assert message["deliveryCount"] == 0 and message["hasLockToken"]
        assert message["lockedUntilUtc"] > message["enqueuedTimeUtc"]
    sequence_numbers = [int(m["sequenceNumber"]) for m in received.values()]
    assert len(set(sequence_numbers)) == 6 and min(sequence_numbers) >= 1


def test_an_abandoned_message_comes_again_and_the_queue_ends_empty(js_report) -> None:  # type: ignore[no-untyped-def]
    report, ns, queue, _ = js_report
    abandoned, again = report["settled"]["abandoned"], report["settled"]["again"]
    assert (again["messageId"], again["sequenceNumber"]) == (abandoned["messageId"], abandoned["sequenceNumber"])
    # the header counts earlier deliveries (as Service Bus sends it): this is the second delivery
    assert (abandoned["deliveryCount"], again["deliveryCount"]) == (0, 1)
    properties = ns.get_queue_runtime_properties(queue)
    assert (properties.active_message_count, properties.scheduled_message_count,
            properties.dead_letter_message_count) == (0, 0, 1)


def test_the_dead_lettered_message_is_read_from_the_dead_letter_queue(js_report) -> None:  # type: ignore[no-untyped-def]
    report, ns, queue, _ = js_report
    dead = report["settled"]["deadLettered"]
    assert (dead["messageId"], dead["deadLetterReason"], dead["deadLetterErrorDescription"]) == \
        ("l-dead", "bad-format", "not what was expected")
    with ns.get_queue_receiver(queue, sub_queue=rb.SubQueue.DEAD_LETTER) as receiver:
        [held] = receiver.peek_messages(10)
    assert (held.message_id, held.dead_letter_reason, held.dead_letter_error_description) == \
        ("l-dead", "bad-format", "not what was expected")
    assert str(held.sequence_number) == dead["sequenceNumber"]


def test_a_scheduled_message_arrives_when_due_and_a_cancelled_one_never(js_report) -> None:  # type: ignore[no-untyped-def]
    scheduled = js_report[0]["scheduled"]
    assert int(scheduled["keptSequenceNumber"]) != int(scheduled["cancelledSequenceNumber"])
    assert [m["messageId"] for m in scheduled["peekedBeforeDue"]] == ["s-kept"]
    assert scheduled["peekedBeforeDue"][0]["state"] == "scheduled"
    arrived = scheduled["arrived"]
    assert (arrived["messageId"], arrived["body"]) == ("s-kept", "scheduled")
    # once due it is enqueued anew, with a new sequence number (as Service Bus does)
    assert int(arrived["sequenceNumber"]) != int(scheduled["keptSequenceNumber"])
    assert arrived["enqueuedTimeUtc"] >= scheduled["scheduledFor"] - 1000  # enqueued when due, not before
    assert scheduled["receivedAt"] >= scheduled["scheduledFor"]


def test_sessions_by_id_and_next_available_with_state(js_report) -> None:  # type: ignore[no-untyped-def]
    report, ns, _, session_queue = js_report
    sessions = report["sessions"]
    assert [m["body"] for m in sessions["byId"]] == ["s1-a", "s1-b"]
    assert {m["sessionId"] for m in sessions["byId"]} == {"s-1"}
    assert sessions["state"] == "state of s-1"
    assert sessions["nextSessionId"] == "s-2" and sessions["nextLockedUntilUtc"] is not None
    assert [m["body"] for m in sessions["next"]] == ["s2-a"]
    assert ns.get_queue_runtime_properties(session_queue).active_message_count == 0
    with ns.get_queue_receiver(session_queue, session_id="s-1", max_wait_time=5) as receiver:
        assert receiver.session.get_state() == b'"state of s-1"'  # the JS SDK stores a state as JSON



def test_subscribe_receive_and_delete_and_the_size_limit(js_report) -> None:  # type: ignore[no-untyped-def]
    report, ns, queue, _ = js_report
    streamed = report["streamed"]
    assert streamed["streamed"] == [f"streamed {i}" for i in range(3)]
    bodies = sorted(streamed["deleted"], key=lambda m: m["bodyType"])
    assert bodies == [  # each body section kind comes back as it was sent
        {"body": "deleted 0", "bodyType": "data", "hasLockToken": False},
        {"body": [[1, 2], ["three"]], "bodyType": "sequence", "hasLockToken": False},
        {"body": {"kind": "value", "list": [1, "two"]}, "bodyType": "value", "hasLockToken": False}]
    assert streamed["tooLarge"] == {"code": "MessageSizeExceeded", "name": "ServiceBusError"}
    assert ns.get_queue_runtime_properties(queue).active_message_count == 0


def test_a_lock_renewed_and_a_message_deferred_then_received_by_sequence_number(js_report) -> None:  # type: ignore[no-untyped-def]
    report, ns, queue, _ = js_report
    deferred = report["deferred"]
    assert deferred["renewedUntil"] > deferred["lockedUntil"]
    assert (deferred["deferred"]["messageId"], deferred["deferred"]["body"], deferred["deferredState"]) == \
        ("d-1", "defer me", "deferred")
    assert ns.get_queue_runtime_properties(queue).total_message_count == 1  # only the dead-lettered one
