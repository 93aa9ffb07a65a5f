"""Tools for applications' own tests against a broker: what Testcontainers gives Java and .NET
teams for Microsoft's emulator, without Docker.

    from ray_broker.testing import emulator
    with emulator(config="Config.json") as broker:      # any test framework
        broker.connection_string          # for the Azure SDKs (AMQP)
        broker.admin_connection_string    # for ServiceBusAdministrationClient
        broker.namespace                  # an rb.Namespace for our own client

The pytest plugin (`ray_broker.testing.pytest_plugin`, loaded by pytest once the package is
installed) offers the same as fixtures. `advance_clock(ns, by)` moves a namespace's clock forward,
so that a test of "a message scheduled an hour ahead is delivered then" does not wait an hour.
"""
from __future__ import annotations

from .clock import advance_clock
from .host import TestBroker, emulator

__all__ = ["TestBroker", "advance_clock", "emulator"]
