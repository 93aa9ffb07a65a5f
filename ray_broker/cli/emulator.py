"""`ray-broker emulator`: Microsoft's Service Bus emulator, replaced (see `ray_broker.emulator`)."""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from . import output

if TYPE_CHECKING:
    from ..emulator.host import Emulator

EMULATOR_HTTP_PORT_ENV = "EMULATOR_HTTP_PORT"
"""The variable Microsoft's emulator reads its management port from."""


def emulator(
    config: Annotated[Optional[str], typer.Option(
        "--config", help="The emulator's Config.json (// and /* */ comments allowed): the namespace, its queues, "
                         "topics, subscriptions and rules.  [default: an empty namespace 'sbemulatorns']")] = None,
    data_dir: Annotated[Optional[str], typer.Option(
        help="Keep messages and entities here across restarts.  [default: a temporary directory, removed at "
             "exit]")] = None,
    amqp_port: Annotated[int, typer.Option(min=1, max=65535, help="The AMQP port of the SDKs' clients.")] = 5672,
    management_port: Annotated[int, typer.Option(
        min=1, max=65535, envvar=EMULATOR_HTTP_PORT_ENV, show_envvar=True,
        help="The management API and /health (HTTP, and HTTPS for the Python administration client).")] = 5300,
    host: Annotated[str, typer.Option(
        help="The address to listen on (0.0.0.0: every interface; the published key then admits anyone "
             "who reaches it).")] = "127.0.0.1",
    partitions: Annotated[Optional[int], typer.Option(
        min=1, max=64, help="Partitions of the namespace.  [default: 1, or 4 when the file partitions an entity; "
                            "with --data-dir, as stored]")] = None,
) -> None:
    """Run Microsoft's Service Bus emulator, replaced: in the foreground until Ctrl-C or SIGTERM.

    Applications reach it unchanged with the emulator's published connection strings, printed at start.
    Local use only: anyone who reaches its ports gets in with the published key.
    """
    from ..emulator.host import Emulator
    from ..emulator.preflight import EmulatorOptions, plan_emulator
    from ..emulator.signals import ForegroundSignals, Stopping

    begun = time.monotonic()
    plan = plan_emulator(EmulatorOptions(config, data_dir, amqp_port, management_port, host, partitions))
    run = Emulator(plan)
    with ForegroundSignals(run.abort) as signals:
        try:
            try:
                with signals.ray_starting():
                    run.start(signals.install)
                _report(run, time.monotonic() - begun)
                signals.wait()
            finally:
                if signals.stopping:
                    output.note("stopping")
                run.stop(stuck=_exit_now)
        except Stopping:
            output.note("stopped")


def _exit_now() -> None:
    """End the process once the watchdog has ended Ray's processes (status 0: all is stopped)."""
    output.note("stopped (Ray's processes ended at once)")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _report(run: Emulator, seconds: float) -> None:
    """The lines printed once the emulator serves: what runs, the two connection strings, "ready"."""
    from ..management_http.certificate import certificate_path

    plan, applied = run.plan, run.applied
    kept = plan.data_dir if plan.data_dir is not None else f"{run.data_dir} (temporary, removed at exit)"
    output.out(f"namespace {plan.config.namespace!r}: {plan.partitions} partition(s), "
               f"{plan.config.summary()} from {plan.source}" + (f" ({applied.summary()})" if applied else ""))
    output.out(f"data: {kept}")
    if "File" in plan.config.logging:
        output.out(f"logs: {run.logs_dir()}")
    output.out(f"connection string: {run.connection_string}")
    output.out(f"administration connection string: {run.admin_connection_string}")
    output.out(f"health: {run.health_url}")
    output.out(f"certificate: {certificate_path(plan.config.namespace, run.data_dir)} (trust it for HTTPS on the "
               "management port, and amqps or wss on the AMQP port: the SDK's connection_verify=)")
    output.note(f"started in {seconds:.1f} s; Ctrl-C or SIGTERM stops it")
    output.out("ready")
    sys.stdout.flush()
