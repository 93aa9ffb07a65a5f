"""The link from a client to its gateway (sync and async): the one gateway caller
(`routing.ray_gateway.GatewayCaller`), moving on to the next gateway when one fails and making a
gateway again when it is gone for good."""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from ..callers import caller_token
from ..config import NamespaceConfig
from ..protocol import PEEK_LOCK
from ..router_requests import (
    ReceiveRequest,
    RouterRequest,
    SettleRequest,
    decode_router_reply,
    decode_router_request,
    encode_router_request,
)
from ..routing.receive_state import release_op
from ..routing.ray_gateway import WAITING_OPERATIONS, GatewayCaller
from .core import CALL_GRACE_S

RELEASE_TIMEOUT_S = 60.0
"""How long the gateway retries releasing what a receive given up on locked."""


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

    def _abandoned(self, operation: str, args: tuple[Any, ...], ref: Any) -> None:
        """The caller stopped waiting for call `ref`: a receive is ended at the gateway (which
        releases what it took), and should its reply come all the same (the gateway answered
        first), the messages it locked are released here, no delivery counted. The call is not
        cancelled through Ray: that would drop a reply already on its way, messages and all."""
        if operation not in WAITING_OPERATIONS:
            return
        request = decode_router_request([operation, *args])
        self.handle().end_receive.remote(request.receiver_id)
        if request.mode == PEEK_LOCK and request.session is None:   # a session's stay with its lock
            ref.future().add_done_callback(lambda reply: threading.Thread(
                target=self._release_late, args=(request, reply), name="ray-broker-release", daemon=True).start())

    def _release_late(self, request: ReceiveRequest, reply: "concurrent.futures.Future[Any]") -> None:
        if reply.cancelled() or reply.exception() is not None:
            return
        messages = decode_router_reply(request, reply.result()).messages
        if not messages:
            return
        settle = SettleRequest(request.entity, request.subq, None, [release_op(r) for r in messages], RELEASE_TIMEOUT_S)
        try:
            self.handle().call.remote(*encode_router_request(settle))
        except Exception:  # noqa: BLE001 - Ray already shut down (the process is ending): the locks lapse instead
            return

    def _submit(self, operation: str, args: tuple[Any, ...]) -> Any:
        """Send one call to the gateway; a waiting one carries this process's `caller_token`."""
        if operation in WAITING_OPERATIONS:
            return self.handle().call.remote(operation, *args, caller=caller_token())
        return self.handle().call.remote(operation, *args)
