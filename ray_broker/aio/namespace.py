"""Deploying and attaching to a namespace from an event loop; the async `Namespace` handle is in
`handle.py` (which the AMQP front end uses without the lifecycle)."""
from __future__ import annotations

from typing import Any, Mapping

from ..client.lifecycle import connect_flow, ray_flow, run_awaiting, start_flow, stop_flow
from .handle import Namespace


async def start(name: str, *, sku: str = "standard", partitions: int | None = None, data_dir: str | None = None,
                gateways: int = 1, durability: str = "normal", address: str | None = None,
                auth_token: str | None = None, replicas: int = 1, amqp_port: int | None = None,
                management_port: int | None = None, min_in_sync: int | None = None) -> Namespace:
    """`ray_broker.start`, awaited: start a namespace (or return the running one of that name).

    Ray object refs are awaited on this loop; joining or starting Ray and creating the actors,
    which Ray offers no awaitable form of, run on a thread that lives as long as the process.
    `amqp_port` starts the AMQP 1.0 front end for the Azure SDKs (and `management_port` a plain-HTTP
    port of its management API), as in `ray_broker.start`.
    """
    return Namespace(await run_awaiting(start_flow(name, sku=sku, partitions=partitions, data_dir=data_dir,
                                                   gateways=gateways, durability=durability, address=address,
                                                   auth_token=auth_token, replicas=replicas, amqp_port=amqp_port,
                                                   management_port=management_port, min_in_sync=min_in_sync)))


async def connect(name: str, *, address: str | None = None, auth_token: str | None = None) -> Namespace:
    """`ray_broker.connect`, awaited: attach to a running namespace (`NamespaceNotRunningError` if none,
    `UnauthorizedError` without its auth token)."""
    return Namespace(await run_awaiting(connect_flow(name, address,
                                                     how_to_start=f"await ray_broker.aio.start({name!r})",
                                                     auth_token=auth_token)))


async def stop(name: str, *, delete_data: bool = False) -> None:
    """`ray_broker.stop`, awaited: stop a namespace's actors; with `delete_data`, remove its stores too."""
    await run_awaiting(stop_flow(name, delete_data=delete_data))


async def init_ray(address: str | None = None, *, num_cpus: int | None = None,
                   system_config: Mapping[str, Any] | None = None) -> None:
    """`ray_broker.init_ray`, awaited: join the Ray cluster `start` would join, or start the local
    Ray it would start (`num_cpus` and `system_config` apply to that one only); nothing once this
    process joined Ray. Joining or starting Ray runs on the thread that lives as long as the
    process, as for `start`."""
    await run_awaiting(ray_flow(address, num_cpus=num_cpus, system_config=system_config))


__all__ = ["start", "connect", "stop", "init_ray", "Namespace"]
