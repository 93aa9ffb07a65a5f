"""The link from a client to its gateway (sync and async): the one gateway caller
(`routing.ray_gateway.GatewayCaller`), moving on to the next gateway when one fails and making a
gateway again when it is gone for good."""
from __future__ import annotations

from typing import Any

from ..callers import caller_token
from ..config import NamespaceConfig
from ..router_requests import RouterRequest, decode_router_reply, encode_router_request
from ..routing.ray_gateway import WAITING_OPERATIONS, GatewayCaller
from .core import CALL_GRACE_S


def make_gateway(config: NamespaceConfig, index: int) -> Any:
    """Gateway `index` of `config`'s namespace, created if it does not exist (or is gone for good)."""
    from actors.gateway_actor import gateway_actor

    return gateway_actor(config, index)


class GatewayLink(GatewayCaller):
    """Calls one gateway of a namespace; a client sticks to it, moving to the next one when it
    fails (with a single gateway: waiting while it restarts, re-creating it if it is gone).
    Router requests cross as `encode_router_request` gives them; a waiting one carries this
    process's token."""

    def __init__(self, config: NamespaceConfig, index: int) -> None:
        super().__init__(config, index, lambda i: make_gateway(config, i), moves=True, grace=CALL_GRACE_S)

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        """Run a router request at the gateway's router (the relay path); its typed reply."""
        return decode_router_reply(request, self.call(*encode_router_request(request), timeout=timeout))

    async def route_async(self, request: RouterRequest, *, timeout: float) -> Any:
        """`route` for an event loop."""
        return decode_router_reply(request, await self.call_async(*encode_router_request(request), timeout=timeout))

    def _submit(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Send one call to the gateway; a waiting one carries this process's `caller_token`."""
        if operation in WAITING_OPERATIONS:
            return self.handle().call.remote(operation, *args, caller=caller_token())
        return self.handle().call.remote(operation, *args)
