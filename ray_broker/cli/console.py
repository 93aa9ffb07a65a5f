"""`ray-broker console -n NAME`: the web console (`ray_broker.console`) of a running namespace, in
the foreground until Ctrl-C or SIGTERM."""
from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from . import output
from .options import DEFAULT_NAMESPACE, AddressOption, NamespaceOption, attach

DEFAULT_PORT = 5380


def console(
    namespace: NamespaceOption = DEFAULT_NAMESPACE,
    address: AddressOption = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="The port to listen on (0: any free one).")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(
        "--host", help="The address to listen on; any but a loopback address makes it ask for a token.")] = "127.0.0.1",
    require_token: Annotated[bool, typer.Option(
        "--require-token", help="Ask for a token on a loopback address too: the namespace's auth token, or a "
                                "shared access key with the Manage right (`ray-broker keys list --show-keys`).")
    ] = False,
) -> None:
    """Serve the namespace's web console: entities, partitions, messages, and the operator's actions.

    Runs in the foreground until Ctrl-C or SIGTERM; prints its address once it listens.
    """
    from ..console.auth import needs_token
    from ..console.operations import ConsoleOperations
    from ..console.server import ConsoleSettings, serve

    settings = ConsoleSettings(host, port, needs_token(host, require_token))
    operations = ConsoleOperations(attach(namespace, address))

    def ready(url: str) -> None:
        guarded = " (asks for a token)" if settings.require_token else ""
        output.out(f"console of namespace {namespace!r} at {url}{guarded}")
        output.note("Ctrl-C or SIGTERM stops it")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(operations, settings, ready, stop)

    try:
        asyncio.run(run())
    except OSError as exc:
        from ..errors import PortUnavailableError

        raise PortUnavailableError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another "
                                    "--port (0: any free one) or --host") from None
    output.note("stopped")
