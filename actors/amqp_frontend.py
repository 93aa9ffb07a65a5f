"""The AMQP front-end actor: serves a namespace's AMQP 1.0 port to the Azure Service Bus SDKs (plain,
inside TLS, and over a WebSocket, plain or inside TLS), and on the same port the management API
(ATOM over HTTPS, or plain HTTP) of their administration clients; with a `management_port`, the
management API on that port too, over plain HTTP (where applications written for Microsoft's
emulator send it: its port 5300) or HTTPS (where the Python administration client sends it,
whatever the connection string says), told apart by the first bytes.

A thin shell: it listens with asyncio on the actor's event loop
(`ray_broker.management_http.listener`, which tells each connection's protocol from its first
bytes, and inside TLS from the first bytes it carries), and hands each AMQP connection to
`ray_broker.amqp.connection.AmqpConnection`, which drives a proton engine, and each HTTP one to
`ray_broker.management_http`, where a request to switch to a WebSocket becomes an AMQP connection
over it (`ray_broker.amqp.websocket`); both call the broker through the namespace's async client
(the same routing as every Python client).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_broker.aio.handle import Namespace
from ray_broker.config import RAY_NAMESPACE, NamespaceConfig
from ray_broker.replies import RoutingTable

from .handles import find_actor

if TYPE_CHECKING:
    import ssl

    from ray_broker.amqp.streams import ByteReader, ByteWriter, StreamHandler
    from ray_broker.management_http.listener import SniffingListener
    from ray_broker.management_http.sniff import WireProtocol

logger = logging.getLogger("ray_broker.amqp")

RELISTEN_WITHIN_S = 60.0
"""How long a restarted front end keeps trying to start listening again."""
HEALTH_TIMEOUT_S = 2.0
"""How long a health probe waits for the routing table, and for each partition."""
LISTEN_HOST = "0.0.0.0"
"""Where the front end listens: every interface of its node (tokens guard every link)."""


class AmqpFrontend:
    """Listens on `config.amqp_port` (and `config.management_port`, if any) once `serve` is
    called, until the actor ends, on `config.listen_host` (else every interface). Ray restarts it
    when its process dies, and a restarted front end listens again by itself.

    Args:
        config: the namespace's configuration (`NamespaceConfig.to_dict()`).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = NamespaceConfig(**config)
        self._listeners: list[SniffingListener] = []
        self._locks: Any = None
        """The message locks of every AMQP connection (`ray_broker.amqp.locks.HeldLocks`)."""
        self._starting = asyncio.Lock()
        self._port = 0
        if ray.get_runtime_context().was_current_actor_reconstructed:
            threading.Thread(target=self._listen_again, name="amqp-listen-again", daemon=True).start()

    def _listen_again(self) -> None:
        """After a restart: call `serve` on this actor once it takes calls (a call made while Ray
        still reports it restarting is tried again)."""
        me = ray.get_runtime_context().current_actor
        deadline = time.monotonic() + RELISTEN_WITHIN_S
        while True:
            try:
                ray.get(me.serve.remote(), timeout=RELISTEN_WITHIN_S)
                return
            except (ActorUnavailableError, GetTimeoutError):
                if time.monotonic() > deadline:
                    logger.error("AMQP front end: restarted, but could not listen again within %s s",
                                 RELISTEN_WITHIN_S)
                    return
                time.sleep(0.2)

    async def pid(self) -> int:
        """The process id (for operators and failure tests)."""
        return os.getpid()

    async def serve(self) -> int:
        """Start listening (once) and return the AMQP port; every connection calls the broker
        through one async client handle, made here on the actor's event loop. The TLS certificate
        is made first if the namespace has none yet (see `ray_broker.management_http.certificate`).
        A port that cannot be listened on raises `OSError` naming it, and nothing listens."""
        async with self._starting:
            if not self._listeners:
                await self._start_listening()
        return self._port

    async def _start_listening(self) -> None:
        """Listen on the AMQP port, then on the management port if there is one."""
        # cryptography, h11 and wsproto, like python-qpid-proton, come with the `amqp` extra
        from ray_broker.management_http.certificate import certificate_dir, ensure_certificate, server_context
        from ray_broker.management_http.http import serve_http
        from ray_broker.management_http.service import ManagementService
        from ray_broker.management_http.sniff import WireProtocol

        from ray_broker.amqp.locks import HeldLocks

        config = self._config
        namespace = Namespace(config)
        self._locks = HeldLocks()
        names = (socket.gethostname(), ray.util.get_node_ip_address())
        tls = server_context(*ensure_certificate(certificate_dir(config.name, config.data_dir), config.name, names))
        service = ManagementService(namespace, namespace.list_shared_access_keys,
                                    partitions_down=self._partitions_down)

        def http(port: int | None, websocket: StreamHandler | None = None) -> Any:
            return partial(serve_http, handler=service.handle, default_host=f"localhost:{port}", websocket=websocket)

        amqp = partial(self._accept, namespace)
        self._port = await self._listen({WireProtocol.AMQP: amqp, WireProtocol.HTTP: http(config.amqp_port, amqp)},
                                        tls, config.amqp_port, "the AMQP port")
        if config.management_port is not None:
            await self._listen({WireProtocol.HTTP: http(config.management_port)}, tls,
                               config.management_port, "the management port")

    async def _listen(self, handlers: dict[WireProtocol, StreamHandler], tls: ssl.SSLContext | None,
                      port: int | None, role: str) -> int:
        """Listen on `port` with a listener of `handlers`; on failure, stop every listener started
        and raise `OSError` saying which port (`role`) could not be listened on and why."""
        from ray_broker.management_http.listener import SniffingListener

        listener = SniffingListener(handlers, tls)
        try:
            bound = await listener.listen(self._config.listen_host or LISTEN_HOST, port or 0)
        except OSError as exc:
            for started in self._listeners:
                started.close()
            self._listeners.clear()
            raise OSError(exc.errno, f"cannot listen on port {port} ({role}): {exc.strerror}") from None
        self._listeners.append(listener)
        return bound

    async def _partitions_down(self) -> list[int]:
        """The partitions whose actor (a replicated one's leader) does not answer within
        `HEALTH_TIMEOUT_S`; every one when the namespace's routing table cannot be had."""
        config = self._config
        everyone = list(range(config.partition_count))
        gateway = find_actor(config.gateway_name(0))
        if gateway is None:
            return everyone
        try:
            table = RoutingTable.decode(await asyncio.wait_for(gateway.call.remote("routing_table"), HEALTH_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - no routing table: no partition is known to answer
            return everyone

        async def answers(handle: Any) -> bool:
            try:
                await asyncio.wait_for(handle.pid.remote(), HEALTH_TIMEOUT_S)
                return True
            except Exception:  # noqa: BLE001 - dead, restarting or too slow: down
                return False

        answered = await asyncio.gather(*(answers(h) for h in table.handles))
        return [k for k, ok in enumerate(answered) if not ok]

    async def _accept(self, namespace: Namespace, reader: ByteReader, writer: ByteWriter) -> None:
        from ray_broker.amqp.connection import AmqpConnection  # python-qpid-proton: the `amqp` extra

        try:
            await AmqpConnection(reader, writer, namespace, namespace.list_shared_access_keys,
                                 locks=self._locks).serve()
        except Exception:  # noqa: BLE001 - one connection's failure never stops the server
            logger.exception("AMQP front end: a connection failed")


def amqp_frontend(config: NamespaceConfig, index: int = 0) -> Any:
    """Get AMQP front end `index` of a namespace, creating it on this node if it does not exist
    (its port is this machine's, so `localhost` in a connection string reaches it). Ray restarts it
    when its process dies (on this node while it is there), and it listens again on the same port."""
    existing = find_actor(config.amqp_frontend_name(index))
    if existing is not None:
        return existing
    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
    return ray.remote(AmqpFrontend).options(
        name=config.amqp_frontend_name(index), namespace=RAY_NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, max_concurrency=10000, scheduling_strategy=here,
    ).remote(config.to_dict())
