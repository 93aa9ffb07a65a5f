"""MkDocs hook: the command-line reference, generated from the `ray-broker` commands themselves.

A page holding the line `<!-- ray-broker commands -->` gets, in its place, one section per command
(and per sub-command of a group): its help text, its usage line and a table of its options and
arguments, read from the command that typer builds from `ray_broker.cli.app`.
"""
from __future__ import annotations

from typing import Any, Iterator

import typer

MARKER = "<!-- ray-broker commands -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the reference, on the page that has it."""
    if MARKER not in markdown:
        return markdown
    from ray_broker.cli.app import PROG, app

    root = typer.main.get_command(app)
    return markdown.replace(MARKER, "\n".join(_sections(root, [PROG])))


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Each command under `command` (a group has `list_commands`), depth first, with its path."""
    yield path, command
    if hasattr(command, "list_commands"):
        context = typer.Context(command)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name])


def _sections(root: Any, prog: list[str]) -> Iterator[str]:
    for path, command in _commands(root, prog):
        if len(path) == 1:
            continue
        context = typer.Context(command, info_name=" ".join(path))
        yield f"{'#' * min(len(path), 4)} `{' '.join(path)}`\n"
        help_text = (command.help or "").replace("\b\n", "").strip()
        if help_text:
            yield help_text + "\n"
        yield f"```text\n{command.get_usage(context).strip()}\n```\n"
        rows = [_row(parameter) for parameter in command.get_params(context)]
        rows = [row for row in rows if row is not None]
        if rows:
            yield "| option or argument | what it does |\n| --- | --- |"
            yield from rows
            yield ""


def _row(parameter: Any) -> str | None:
    if parameter.param_type_name == "option":
        if parameter.hidden or parameter.name == "help":
            return None
        names = ", ".join(f"`{n}`" for n in [*parameter.opts, *parameter.secondary_opts])
        text = parameter.help or ""
    else:
        names = f"`{(parameter.name or '').upper()}`"
        text = getattr(parameter, "help", None) or ("required" if parameter.required else "optional")
    return f"| {names} | {' '.join(text.split()).replace('|', '&#124;')} |"
