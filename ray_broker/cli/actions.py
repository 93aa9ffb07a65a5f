"""`ray-broker purge` and `ray-broker deadletter resubmit`: the operator's destructive actions,
confirmed before they start (or with --yes), with progress, and one summary line or JSON."""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Annotated, Any, Iterator, Optional

import click
import typer

from ..errors import MessageNotFoundError
from . import output
from .options import DEFAULT_NAMESPACE, SUBSCRIPTIONS, AddressOption, Entity, NamespaceOption, attach, receivable, \
    sendable

INTERRUPTED = 130

deadletter_app = typer.Typer(help="Act on a queue's or subscription's dead-letter queue.", no_args_is_help=True)

ReceivablePath = Annotated[str, typer.Argument(
    metavar="ENTITY", help=f"A queue, or a topic's subscription as TOPIC{SUBSCRIPTIONS}SUBSCRIPTION "
                           "(or TOPIC/Subscriptions/SUBSCRIPTION).")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking for confirmation.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the summary as a JSON document.")]


def purge(
    entity: ReceivablePath,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    dead_letter: Annotated[bool, typer.Option("--dead-letter", help="Purge the dead-letter queue instead.")] = False,
    yes: Yes = False,
    as_json: AsJson = False,
) -> None:
    """Remove every message of a queue or subscription (active, deferred, scheduled and locked
    ones), or of its dead-letter queue, in batches; Ctrl-C stops between batches."""
    import ray_broker as rb

    ns = attach(namespace, address)
    target, _ = receivable(ns, entity, "purge")
    where = f"{target}" + (" (dead-letter)" if dead_letter else "")
    total = _count(ns, target, dead_letter)
    _confirm(yes, f"Remove all {total} message(s) of {where}? This cannot be undone.")
    batches = ns.purge_batches(target.path, sub_queue=rb.SubQueue.DEAD_LETTER if dead_letter else None)
    stopped = _run_batches(batches, total, f"purging {where}")
    removed = stopped.done
    _summary(as_json, {"entity": target.path, "dead_letter": dead_letter, "removed": removed,
                       "interrupted": stopped.interrupted},
             f"removed {removed} message(s) from {where}")
    if stopped.interrupted:
        raise typer.Exit(INTERRUPTED)


@deadletter_app.command()
def resubmit(
    entity: ReceivablePath,
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    to: Annotated[Optional[str], typer.Option(
        "--to", metavar="OTHER", help="Send them to this queue or topic instead of back to their entity "
                                      "(a subscription's go back to its topic).")] = None,
    sequence_numbers: Annotated[Optional[list[int]], typer.Option(
        "--sequence-number", metavar="N", min=0, help="Only the dead letter with this sequence number (repeatable).  "
                                                      "[default: all]")] = None,
    sql_filter: Annotated[Optional[str], typer.Option(
        "--filter", metavar="SQL", help="Only the dead letters this SQL filter selects, over their properties as a "
                                        "subscription rule reads them, e.g. \"user.region = 'eu'\" or "
                                        "\"DeadLetterReason = 'bad'\".  [default: all]")] = None,
    yes: Yes = False,
    as_json: AsJson = False,
) -> None:
    """Move dead-lettered messages back to their entity (or --to another queue or topic) as new
    messages with the same body and properties; each leaves the dead-letter queue once its copy is stored."""
    from ..client.operating import selector

    selector(sql_filter)  # a filter that does not parse fails here, before anything is read
    ns = attach(namespace, address)
    target, _ = receivable(ns, entity, "deadletter resubmit")
    destination = sendable(ns, to) if to is not None else None
    total = _count(ns, target, True)
    if total == 0:
        raise MessageNotFoundError(f"{target} has no dead letters to resubmit")
    what = f"{len(sequence_numbers)} of the {total}" if sequence_numbers else f"all {total}"
    chosen = f" that match {sql_filter!r}" if sql_filter is not None else ""
    towards = f"{destination}" if destination is not None else "their entity"
    _confirm(yes, f"Resubmit {what} dead letter(s) of {target}{chosen} to {towards}?")
    batches = ns.resubmit_batches(target.path, sequence_numbers=sequence_numbers or None, filter=sql_filter, to=to)
    stopped = _run_batches(batches, len(sequence_numbers) if sequence_numbers else total,
                           f"resubmitting from {target}")
    if stopped.done == 0 and not stopped.interrupted:
        raise MessageNotFoundError(_nothing_matched(ns.name, target, sequence_numbers, sql_filter))
    _summary(as_json, {"entity": target.path, "to": to, "filter": sql_filter, "resubmitted": stopped.done,
                       "interrupted": stopped.interrupted},
             f"resubmitted {stopped.done} dead letter(s) of {target} to {towards}")
    if stopped.interrupted:
        raise typer.Exit(INTERRUPTED)


def _nothing_matched(namespace: str, target: Entity, sequence_numbers: list[int] | None,
                     sql_filter: str | None) -> str:
    """Why a resubmit moved nothing from a dead-letter queue that holds dead letters."""
    wanted = []
    if sequence_numbers:
        wanted.append(f"sequence number(s) {', '.join(map(str, sequence_numbers))}")
    if sql_filter is not None:
        wanted.append(f"the filter {sql_filter!r}")
    return (f"{target} has no dead letter with {' and '.join(wanted)}; nothing was resubmitted; peek them with "
            f"`ray-broker peek {target.path} --dead-letter -n {namespace}`")


class Stopped:
    """How a run of batches ended: how many items they did, and whether Ctrl-C stopped them."""

    def __init__(self) -> None:
        self.done = 0
        self.interrupted = False


def _run_batches(batches: Iterator[int], total: int, what: str) -> Stopped:
    """Run `batches` to the end or until Ctrl-C, which takes effect between batches (the batch
    under way finishes), with a progress bar of `total` items."""
    stopped = Stopped()
    with _deferred_interrupt(stopped), output.progress(total, what) as bar:
        task = bar.add_task(what, total=total)
        try:
            for count in batches:
                stopped.done += count
                bar.update(task, advance=count)
                if stopped.interrupted:
                    break
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
    if stopped.interrupted:
        output.note("interrupted: stopped after the batch under way")
    return stopped


@contextmanager
def _deferred_interrupt(stopped: Stopped) -> Iterator[None]:
    """Ctrl-C (SIGINT) marks `stopped` interrupted instead of raising, so work stops between batches."""
    def note(signum: int, frame: Any) -> None:
        stopped.interrupted = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _count(ns: Any, target: Entity, dead_letter: bool) -> int:
    """How many messages the entity (or its dead-letter queue) holds now."""
    if target.subscription is None:
        counts = ns.get_queue_runtime_properties(target.name)
    else:
        counts = ns.get_subscription_runtime_properties(target.name, target.subscription)
    if dead_letter:
        return int(counts.dead_letter_message_count)
    return int(counts.active_message_count + counts.scheduled_message_count)


def _confirm(yes: bool, question: str) -> None:
    """Ask `question` on the terminal unless `yes`; without a terminal, a usage error asking for --yes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("this command removes or moves messages and asks for confirmation, but there is no "
                               "terminal to ask on: pass --yes")
    if not typer.confirm(question, default=False, err=True):
        output.note("nothing done")
        raise typer.Exit(1)


def _summary(as_json: bool, document: dict[str, Any], line: str) -> None:
    """The command's one summary line on standard output, or `document` as JSON with --json."""
    if as_json:
        output.json_document(document)
    else:
        output.out(line)

