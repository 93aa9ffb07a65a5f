"""A broker for an application's own tests: Microsoft's emulator replaced, started in one line.

`emulator()` starts what `ray-broker emulator` starts (a local Ray of its own, the namespace, the
AMQP front end and the management port, the emulator's `Config.json` applied, its published key)
on free ports unless told which, and stops all of it at the end. It needs no Ray of the calling
process: the test process must not be attached to another Ray (it becomes this one's driver).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator

from ..emulator.host import Emulator
from ..management_http.certificate import certificate_path
from ..emulator.preflight import EmulatorOptions, plan_emulator
from .clock import advance_clock
from .ports import free_port

SUBSCRIPTIONS = "/Subscriptions/"


@dataclass
class TestBroker:
    """A running broker for tests."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    connection_string: str
    """For the Azure SDKs' clients (AMQP): the emulator's published key, `UseDevelopmentEmulator=true`."""
    admin_connection_string: str
    """For `ServiceBusAdministrationClient`: the management port."""
    health_url: str
    """The management port's `/health`, as the emulator answers it."""
    namespace: Any
    """The namespace as our own client sees it (`rb.Namespace`)."""
    certificate_path: str
    """The PEM file of the management port's self-signed certificate, which the Python
    administration client (it speaks HTTPS) trusts when given it: `connection_verify=` it, or
    `REQUESTS_CA_BUNDLE`."""

    def advance_clock(self, by: timedelta | float) -> None:
        """Move the broker's clock forward (`ray_broker.testing.advance_clock`)."""
        advance_clock(self.namespace, by)

    def entity_paths(self) -> list[str]:
        """Every queue, and every subscription as `TOPIC/Subscriptions/SUB`."""
        ns = self.namespace
        paths = [q.name for q in ns.list_queues()]
        for topic in ns.list_topics():
            paths.extend(f"{topic.name}{SUBSCRIPTIONS}{s.name}" for s in ns.list_subscriptions(topic.name))
        return paths

    def empty(self, *paths: str) -> int:
        """Remove every message (dead letters too) of the queues and subscriptions named, or of all
        of them when none is named; how many were removed."""
        import ray_broker as rb

        removed = 0
        for path in paths or self.entity_paths():
            removed += self.namespace.purge(path) + self.namespace.purge(path, sub_queue=rb.SubQueue.DEAD_LETTER)
        return removed


@contextlib.contextmanager
def emulator(config: str | None = None, *, amqp_port: int | None = None, management_port: int | None = None,
             data_dir: str | None = None, partitions: int | None = None) -> Iterator[TestBroker]:
    """A broker for the block, stopped at its end.

    Args:
        config: the emulator's `Config.json` (comments allowed) to create the entities from.
        amqp_port: where AMQP listens (default: a free port).
        management_port: where the management API listens (default: a free port).
        data_dir: keep stores there (default: a temporary directory, removed at the end).
        partitions: the namespace's partition count (default: as `ray-broker emulator` picks).

    Example:
        ```python
        with emulator(config="Config.json") as broker:
            client = ServiceBusClient.from_connection_string(broker.connection_string)
        ```
    """
    amqp = amqp_port or free_port()
    management = management_port or free_port(frozenset({amqp}))
    running = Emulator(plan_emulator(EmulatorOptions(config_path=config, data_dir=data_dir, amqp_port=amqp,
                                                     management_port=management, partitions=partitions)))
    try:
        running.start()
        yield TestBroker(running.connection_string, running.admin_connection_string, running.health_url,
                         running.namespace, certificate_path(running.plan.config.namespace, running.data_dir))
    finally:
        running.stop()
