"""The AMQP front-end actor: serves a namespace's AMQP 1.0 port to the Azure Service Bus SDKs.

A thin shell: it listens with asyncio on the actor's event loop, and hands each accepted
connection to `ray_broker.amqp.connection.AmqpConnection`, which drives a proton engine and calls
the broker through the namespace's async client (the same routing as every Python client).
"""
from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_broker.aio.handle import Namespace
from ray_broker.config import RAY_NAMESPACE, NamespaceConfig

from .handles import find_actor

logger = logging.getLogger("ray_broker.amqp")

LISTEN_HOST = "0.0.0.0"
"""Where the front end listens: every interface of its node (tokens guard every link)."""


class AmqpFrontend:
    """Listens on `config.amqp_port` once `serve` is called, until the actor ends.

    Args:
        config: the namespace's configuration (`NamespaceConfig.to_dict()`).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = NamespaceConfig(**config)
        self._server: asyncio.Server | None = None

    async def serve(self) -> int:
        """Start listening (once) and return the port; every connection calls the broker through
        one async client handle, made here on the actor's event loop."""
        if self._server is None:
            self._server = await asyncio.start_server(partial(self._accept, Namespace(self._config)), LISTEN_HOST,
                                                      self._config.amqp_port, reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, namespace: Namespace, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        from ray_broker.amqp.connection import AmqpConnection  # python-qpid-proton: the `amqp` extra

        try:
            await AmqpConnection(reader, writer, namespace, namespace.list_shared_access_keys).serve()
        except Exception:  # noqa: BLE001 - one connection's failure never stops the server
            logger.exception("AMQP front end: a connection failed")


def amqp_frontend(config: NamespaceConfig, index: int = 0) -> Any:
    """Get AMQP front end `index` of a namespace, creating it on this node if it does not exist
    (its port is this machine's, so `localhost` in a connection string reaches it). It is not
    restarted when its process dies; stopping and starting the namespace makes it again."""
    existing = find_actor(config.amqp_frontend_name(index))
    if existing is not None:
        return existing
    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(AmqpFrontend).options(
        name=config.amqp_frontend_name(index), namespace=RAY_NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=0, max_task_retries=0, num_cpus=0, max_concurrency=10000, scheduling_strategy=here,
    ).remote(config.to_dict())
