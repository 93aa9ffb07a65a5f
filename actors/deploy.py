"""Deploying and tearing down a namespace's actors; nothing it imports imports it back."""
from __future__ import annotations

from typing import Callable

import ray

import ray_broker.errors as errors
from ray_broker.config import (
    MAX_REPLICAS,
    NamespaceConfig,
    amqp_frontend_actor_name,
    gateway_actor_name,
    partition_actor_name,
    replica_actor_name,
)
from ray_broker.errors import ServiceBusError, unwrap_remote_error

from .amqp_frontend import amqp_frontend
from .gateway_actor import gateway_actor
from .handles import find_actor, partition_actor


def deploy(config: NamespaceConfig, timeout: float = 120.0,
           before_serving: Callable[[NamespaceConfig], None] | None = None) -> None:
    """Create every partition and gateway of a namespace and wait until all answer.

    A partition that fails to start (its store held by another process) fails the whole start:
    every actor created here is removed again and the partition's typed error is raised. With an
    `amqp_port`, the AMQP front end starts last, once the namespace answers (and `before_serving`
    returned: `ray-broker emulator` applies its configuration there, so that its health answer
    means its entities exist); a port it cannot listen on (the AMQP port or the management port)
    fails the start the same way.
    """
    handles = [partition_actor(config, k, r) for k in range(config.partition_count) for r in range(config.replicas)]
    gateways = [gateway_actor(config, i) for i in range(config.gateways)]
    try:
        ray.get([h.pid.remote() for h in handles] + [g.pid.remote() for g in gateways], timeout=timeout)
        if config.replicated:
            ray.get([g.call.remote("routing_table") for g in gateways], timeout=timeout)
        if before_serving is not None:
            before_serving(config)
        if config.amqp_port is not None:
            ray.get(amqp_frontend(config).serve.remote(), timeout=timeout)
    except ray.exceptions.ActorDiedError as exc:
        teardown(config.name, config.partition_count, config.gateways, config.replicas)
        raise creation_failure(exc) or exc from None
    except OSError as exc:
        teardown(config.name, config.partition_count, config.gateways, config.replicas)
        refusal = unwrap_remote_error(exc)  # the front end's own error, not Ray's report of the actor call
        why = getattr(refusal, "strerror", None) or str(refusal)
        raise errors.InvalidOperationError(f"the AMQP front end {why}; pick a free port", entity=config.name) from None


def creation_failure(exc: BaseException) -> ServiceBusError | None:
    """The broker error that made an actor's constructor fail, rebuilt from Ray's report of it.

    Ray reports a constructor's exception only as text (an `ActorDiedError` keeps no cause), whose
    last line is `<module>.<class>: <message>`.
    """
    for line in reversed(str(exc).splitlines()):
        qualified, _, message = line.strip().partition(": ")
        module, _, name = qualified.rpartition(".")
        cls = getattr(errors, name, None) if module == errors.__name__ else None
        if isinstance(cls, type) and issubclass(cls, ServiceBusError):
            return cls(message)
    return None


def teardown(name: str, partition_count: int | None, gateways: int | None, replicas: int | None = None) -> None:
    """Kill a namespace's actors (without restart); their stores stay on disk. Counts not known
    (None) are found by name: up to the first index with no actor."""
    _kill(lambda i: amqp_frontend_actor_name(name, i), None)
    _kill(lambda i: gateway_actor_name(name, i), gateways)
    _kill(lambda k: partition_actor_name(name, k), partition_count)
    for r in range(MAX_REPLICAS if replicas is None else replicas if replicas > 1 else 0):
        _kill(lambda k, r=r: replica_actor_name(name, k, r), partition_count)  # type: ignore[misc]


def _kill(actor_name: Callable[[int], str], count: int | None) -> None:
    """Kill the actors `actor_name` names for 0 .. count - 1 (without restart), or up to the first
    missing one when `count` is None."""
    index = 0
    while count is None or index < count:
        handle = find_actor(actor_name(index))
        if handle is None and count is None:
            break
        if handle is not None:
            ray.kill(handle, no_restart=True)
        index += 1
