"""The `ray-broker` application: its commands, global options, and how a run ends.

Every failure ends the run with one line on standard error, `error: <ErrorType>: <what went wrong
and what to do>`, and a non-zero status: 1 when the broker or the cluster refused or failed, 2
when the command line does not parse, 130 when interrupted. `--debug` adds the traceback.

Run as the program, Ctrl-C ends a command at once: Ray looks for signals during a wait every
`SIGNAL_CHECK_MS` (not every second), and an interrupted run ends the process without Ray's orderly
disconnect (a second or more), as a killed driver would; the command has released what it held by
then, and the cluster releases whatever a vanished driver held.
"""
from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Sequence

import typer

from ..ray_head import SIGNAL_CHECK_ENV
from . import console, emulator, entities, keys, messages, namespaces, actions, rule_commands, tools
from .failures import error_line, exit_code, is_help_shown
from .quiet import quiet_ray

PROG = "ray-broker"
INTERRUPTED = 130
"""The exit status of a run that Ctrl-C interrupted."""
SIGNAL_CHECK_MS = 50
"""How often Ray, waiting on the cluster for the program, looks whether Ctrl-C was pressed (Ray's
default: every second)."""


@dataclass
class RunSettings:
    """Settings of the current run that outlive its click context (read when it fails)."""

    debug: bool = False


settings = RunSettings()

app = typer.Typer(name=PROG, help="Service Bus partitioned queues and topics on Ray actors.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def package_version() -> str:
    """The installed version of ray-broker."""
    try:
        return version("ray-broker")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        print(f"{PROG} {package_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", envvar="RAY_BROKER_DEBUG", show_envvar=True,
                                        help="Print the traceback of a failure.")] = False,
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Service Bus partitioned queues and topics on Ray actors."""
    settings.debug = debug


app.command()(namespaces.start)
app.command()(namespaces.stop)
app.command()(namespaces.status)
app.command(name="connection-string")(namespaces.connection_string)
app.add_typer(entities.queue_app, name="queue")
app.add_typer(entities.topic_app, name="topic")
app.add_typer(entities.subscription_app, name="subscription")
app.add_typer(rule_commands.rule_app, name="rule")
app.add_typer(keys.keys_app, name="keys")
app.command()(messages.send)
app.command()(messages.receive)
app.command()(messages.peek)
app.command()(actions.purge)
app.add_typer(actions.deadletter_app, name="deadletter")
app.command()(tools.demo)
app.command()(emulator.emulator)
app.command()(console.console)
app.command(add_help_option=False, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    tools.bench)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ray-broker` with `argv` (default: the process's arguments, as the program); returns the
    exit status. Run as the program, an interrupted run ends the process at once with status 130."""
    as_program = argv is None
    if as_program:
        os.environ.setdefault(SIGNAL_CHECK_ENV, str(SIGNAL_CHECK_MS))
    arguments = list(sys.argv[1:] if argv is None else argv)
    settings.debug = False
    command = typer.main.get_command(app)
    _untyped_flags(command, typer.Context(command, info_name=PROG, help_option_names=["-h", "--help"]))
    try:
        with quiet_ray():
            status = command.main(args=arguments, prog_name=PROG, standalone_mode=False)
        if status == INTERRUPTED:  # typer's answer to Ctrl-C during a command
            return _interrupted(as_program)
        return int(status or 0)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        return _interrupted(as_program)
    except Exception as exc:  # noqa: BLE001 - every failure ends as one line and an exit status
        if settings.debug:
            traceback.print_exc()
        if not is_help_shown(exc):
            print(error_line(exc), file=sys.stderr)
        return exit_code(exc)


def _untyped_flags(command: Any, ctx: typer.Context) -> None:
    """Show no value type after a flag in the help of `command` and its subcommands (typer shows
    `<bool>`, as if a flag took a value)."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for name, sub in getattr(command, "commands", {}).items():
        _untyped_flags(sub, typer.Context(sub, info_name=name, parent=ctx))


def _interrupted(as_program: bool) -> int:
    """End a run that Ctrl-C interrupted: one line, status 130; run as the program, the process
    ends here, without the at-exit work (Ray's disconnect) that would hold it up."""
    print("error: interrupted", file=sys.stderr)
    if as_program:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    return INTERRUPTED
