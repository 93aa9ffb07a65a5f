"""`ray-broker send`, `receive` and `peek`: messages to and from queues, topics and subscriptions."""
from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer

from ..clock import MAX_DURATION_SECONDS
from ..errors import InvalidArgumentError, InvalidOperationError, MessageSizeExceededError
from . import output
from .options import (
    DEFAULT_NAMESPACE,
    SUBSCRIPTIONS,
    AddressOption,
    Entity,
    NamespaceOption,
    attach,
    receivable,
    sendable,
)
from .properties import PROPERTY_HELP, parse_properties

RECEIVE_BATCH = 100

ReceivablePath = Annotated[str, typer.Argument(
    metavar="ENTITY", help=f"A queue, or a topic's subscription as TOPIC{SUBSCRIPTIONS}SUBSCRIPTION.")]
Count = Annotated[int, typer.Option("--count", min=1, help="At most this many messages.")]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON object per message (JSON lines) instead of a table.")]
DeadLetter = Annotated[bool, typer.Option("--dead-letter", help="Read the entity's dead-letter sub-queue.")]
SessionId = Annotated[Optional[str], typer.Option(
    "--session-id", help="Session to read (session entities; default for receive: the next available one).")]


def send(
    ctx: typer.Context,
    entity: Annotated[str, typer.Argument(metavar="ENTITY", help="A queue or a topic.")],
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    body: Annotated[Optional[str], typer.Option("--body", help="The body, as text.")] = None,
    body_file: Annotated[Optional[str], typer.Option(
        "--body-file", metavar="PATH", help="Read the body from this file ('-': standard input), as bytes.")] = None,
    count: Annotated[Optional[int], typer.Option(
        "--count", min=1, help="Messages to send; without --body or --body-file, numbered bodies (`message 0`, ...).  "
                               "[default: 1]")] = None,
    partition_key: Annotated[Optional[str], typer.Option(help="Partition key (at most 128 characters).")] = None,
    session_id: Annotated[Optional[str], typer.Option(help="Session id (at most 128 characters).")] = None,
    content_type: Annotated[Optional[str], typer.Option(help="Content type, e.g. application/json.")] = None,
    subject: Annotated[Optional[str], typer.Option(help="Subject (label).")] = None,
    message_id: Annotated[Optional[str], typer.Option(
        help="Message id of every message sent (at most 128 characters).  [default: a new UUID each]")] = None,
    correlation_id: Annotated[Optional[str], typer.Option(help="Correlation id (at most 128 characters).")] = None,
    ttl: Annotated[Optional[float], typer.Option(
        "--ttl", help="Time to live, seconds (fractions allowed).  [default: the entity's default]")] = None,
    properties: Annotated[Optional[list[str]], typer.Option(
        "--property", metavar="KEY[:TYPE]=VALUE", help=PROPERTY_HELP)] = None,
    batch: Annotated[int, typer.Option(min=1, help="At most this many messages per send call.")] = 100,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds each send call may take.")] = 60.0,
) -> None:
    """Send messages to a queue or a topic, in batches that fit the tier's size limit."""
    import ray_broker as rb

    if body is not None and body_file is not None:
        raise typer.BadParameter("give --body or --body-file, not both", param_hint="'--body-file'")
    content = _read_body(body_file) if body_file is not None else body
    fields = dict(partition_key=partition_key, session_id=session_id, content_type=content_type, subject=subject,
                  correlation_id=correlation_id, time_to_live=_time_to_live(ttl),
                  application_properties=parse_properties(properties or []))
    if body is None and body_file is None and count is None:
        ctx.fail("give --body, --body-file or --count (numbered bodies): a message needs a body")
    count = count or 1
    try:
        messages = [rb.Message(content if content is not None else f"message {i}",
                               message_id=message_id or uuid.uuid4().hex, **fields) for i in range(count)]
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    ns = attach(namespace, address)
    target = sendable(ns, entity)
    sender = ns.get_queue_sender(entity) if target.kind == "queue" else ns.get_topic_sender(entity)
    with sender, output.progress(count, f"sending to {target}") as bar:
        task = bar.add_task("send", total=count)
        for chunk in _batches(sender, messages, batch):
            sender.send_messages(chunk, timeout=timeout)
            bar.advance(task, len(chunk))
    output.out(f"sent {count} message(s) to {target}")


def _time_to_live(seconds: float | None) -> timedelta | None:
    """`--ttl` as a duration; `InvalidArgumentError` unless it is from 1 microsecond to the longest
    time to live."""
    if seconds is None:
        return None
    if not 1e-6 <= seconds <= MAX_DURATION_SECONDS:
        raise InvalidArgumentError(f"--ttl must be from 0.000001 to {MAX_DURATION_SECONDS:.0f} seconds, "
                                   f"got {seconds:g}; leave it out for the entity's default")
    return timedelta(seconds=seconds)


def _read_body(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path!r}: {exc.strerror or exc}", param_hint="'--body-file'") from None


def _batches(sender: Any, messages: list[Any], most: int) -> Iterator[Any]:
    """`messages` packed into batches of at most `most` that fit the tier's batch size; a message
    too large on its own goes alone, so that sending it reports its size."""
    current = sender.create_message_batch()
    for message in messages:
        if len(current) >= most:
            yield current
            current = sender.create_message_batch()
        try:
            current.add_message(message)
        except MessageSizeExceededError:
            if len(current) == 0:
                yield [message]
                continue
            yield current
            current = sender.create_message_batch()
            try:
                current.add_message(message)
            except MessageSizeExceededError:
                yield [message]
    if len(current):
        yield current


def receive(
    entity: ReceivablePath,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    count: Count = 10,
    wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for messages before giving up.")] = 5.0,
    complete: Annotated[bool, typer.Option(
        "--complete/--no-complete", help="Complete each message, or hold them all and abandon them at the end "
                                         "(back to the entity, one more delivery counted).")] = True,
    dead_letter: DeadLetter = False,
    session_id: SessionId = None,
    as_json: AsJson = False,
) -> None:
    """Receive up to --count messages (peek-lock), print each once, and complete them (or abandon them)."""
    import ray_broker as rb

    from ..client.receiver import abandon_held

    ns = attach(namespace, address)
    target, properties = receivable(ns, entity, "receive")
    session = _session(target, properties, dead_letter, session_id, "receive")
    if session is None and not dead_letter and properties.requires_session:
        session = rb.NEXT_AVAILABLE_SESSION
    receiver = target.receiver(ns, dead_letter=dead_letter, session_id=session, max_wait_time=wait)
    shown: list[Any] = []
    held: dict[tuple[int, int], Any] = {}
    """Each message received, by partition and sequence number: the copy received last, whose lock
    the command holds until the end without --complete."""
    with receiver:
        try:
            while len(shown) < count:
                batch = receiver.receive_messages(min(RECEIVE_BATCH, count - len(shown)), max_wait_time=wait)
                fresh = [m for m in batch if _identity(m) not in held]
                held.update((_identity(m), m) for m in batch)
                if not fresh:  # nothing came, or only messages held before whose lock lapsed meanwhile
                    break
                for message in fresh:
                    if complete:
                        receiver.complete_message(message)
                    if as_json:
                        print(output.message_json(message), flush=True)
                shown.extend(fresh)
        finally:
            if not complete:
                abandon_held(receiver, held.values())
    if not as_json and shown:
        output.table(output.MESSAGE_HEADERS, [output.message_row(m) for m in shown])
    where = f"{target}" + (" (dead-letter)" if dead_letter else "")
    output.note(f"received and {'completed' if complete else 'abandoned'} {len(shown)} message(s) from {where}")


def _identity(message: Any) -> tuple[int, int]:
    """What tells a message apart from every other one of its entity, however often it is received."""
    return message.partition_index, message.sequence_number


def _session(target: Entity, properties: Any, dead_letter: bool, session_id: str | None, command: str) -> str | None:
    """The session `--session-id` names; `InvalidOperationError` when it is given for an entity
    without sessions or for a dead-letter sub-queue (which has none), before anything is read."""
    if session_id is None:
        return None
    if dead_letter:
        raise InvalidOperationError(f"the dead-letter sub-queue of {target} has no sessions: {command} it without "
                                    "--session-id", entity=target.path)
    if not properties.requires_session:
        raise InvalidOperationError(f"{target} does not require sessions, so it has no session {session_id!r}: "
                                    f"{command} it without --session-id", entity=target.path)
    return session_id


def peek(
    entity: ReceivablePath,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    count: Count = 10,
    from_sequence: Annotated[int, typer.Option(min=0, help="Start at this sequence number.")] = 0,
    sql_filter: Annotated[Optional[str], typer.Option(
        "--filter", metavar="SQL", help="Only messages this SQL filter selects, over their properties as a "
                                        "subscription rule reads them, e.g. \"user.amount > 100 AND sys.label = "
                                        "'order'\" (reads on until --count are found or the end).")] = None,
    partition: Annotated[Optional[int], typer.Option(
        "--partition", min=0, help="Only this partition's messages.  [default: every partition's, merged in "
                                   "sequence-number order]")] = None,
    dead_letter: DeadLetter = False,
    session_id: SessionId = None,
    as_json: AsJson = False,
) -> None:
    """Browse up to --count messages without locking or settling them."""
    import ray_broker as rb

    from ..client.operating import peek_range, selector

    selector(sql_filter)  # a filter that does not parse fails here, before any cluster is reached
    ns = attach(namespace, address)
    peek_range(from_sequence, partition, ns.partition_count)
    target, properties = receivable(ns, entity, "peek")
    session = _session(target, properties, dead_letter, session_id, "peek")
    messages = ns.peek_messages(target.path, count, sequence_number=from_sequence,
                                sub_queue=rb.SubQueue.DEAD_LETTER if dead_letter else None, session_id=session,
                                filter=sql_filter, partition=partition)
    if as_json:
        for message in messages:
            print(output.message_json(message))
    elif messages:
        output.table(output.MESSAGE_HEADERS, [output.message_row(m) for m in messages])
    where = f"{target}" + (" (dead-letter)" if dead_letter else "") + \
        (f", partition {partition}" if partition is not None else "")
    matching = f" matching {sql_filter!r}" if sql_filter is not None else ""
    output.note(f"peeked {len(messages)} message(s){matching} in {where}")
