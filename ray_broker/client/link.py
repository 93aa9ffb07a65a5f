"""The link from a client to its gateway (sync and async): the one gateway caller
(`routing.ray_gateway.GatewayCaller`), moving on to the next gateway when one fails and making a
gateway again when it is gone for good."""
from __future__ import annotations

from typing import Any

from ..callers import caller_token
from ..config import NamespaceConfig
from ..routing.ray_gateway import WAITING_OPERATIONS, GatewayCaller
from ..wire import encode_router_args
from .core import CALL_GRACE_S


def make_gateway(config: NamespaceConfig, index: int) -> Any:
    """Gateway `index` of `config`'s namespace, created if it does not exist (or is gone for good)."""
    from actors.gateway_actor import gateway_actor

    return gateway_actor(config, index)


class GatewayLink(GatewayCaller):
    """Calls one gateway of a namespace; a client sticks to it, moving to the next one when it
    fails (with a single gateway: waiting while it restarts, re-creating it if it is gone).
    Data operations carry their records as lists; a waiting one carries this process's token."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        super().__init__(config, index, lambda i: make_gateway(config, i), moves=True, grace=CALL_GRACE_S)

    def _submit(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Send one call to the gateway, its records as lists (`wire.encode_router_args`); a waiting
        one carries this process's `caller_token`."""
        wired = encode_router_args(operation, args)
        if operation in WAITING_OPERATIONS:
            return self.handle().call.remote(operation, *wired, caller=caller_token())
        return self.handle().call.remote(operation, *wired)
