"""One AMQP 1.0 connection of the front end: a proton engine driven by a byte stream (an accepted
socket's, the one inside TLS, or the one a WebSocket carries: see `streams.py`).

Bytes from the socket go into a `proton.Transport`, the engine's events come out of a
`proton.Collector`, and what the engine has to say goes back to the socket; no proton reactor or
thread is involved. Every broker call goes through the namespace's async client (`ray_broker.aio`:
the same routing as any Python client), so the rules live in one place. Between the socket and
proton, `frames.py` puts the client's transfers in the delivery-id order proton insists on (the
SDKs' threads and async client do not keep it; Service Bus does not ask them to) and gives the
errors proton closes with the info field the SDKs read.

What a connection serves:
- `$cbs`: `put-token` with a SAS token, checked (signature, expiry, audience) against the
  namespace's keys (asked for at each put-token, so keys made or removed count at once) and the
  authorization rules of the entity its audience names, and answered 202, 401, or 404 when that
  entity does not exist (as Service Bus answers); each link to an entity needs a token covering it with
  the right it uses (Send to send, Listen to receive), else it is refused with
  `amqp:unauthorized-access`.
- links the client sends on (to a queue or topic): single and batched transfers, settled with
  `accepted` once the broker stored them (`rejected` with the broker's error otherwise).
- links the client receives on (a queue, `topic/Subscriptions/sub`, their `/$DeadLetterQueue`):
  credit-based, peek-lock (lock tokens as delivery tags) or receive-and-delete (pre-settled); the
  client's outcomes (see `outcomes.py`) settle through the link's broker receiver; drain. An
  outcome the client waits for is echoed once the settlement is checked and buffered, as the
  Python client's own `complete_message` returns: it reaches the partition with the receiver's
  next call or within 50 ms; one that meets an expired lock there only makes the message come
  back (at least once). A deferral is echoed once the partition applied it. The dispositions read
  in one pass over the engine's events are settled by one task, in the order they came, and their
  echoes leave in one write.
- `<entity>/$management`: see `management.py`.

Limits (see `limits.py`): the Open advertises the tier's frame size and an idle timeout (a
connection silent for longer is closed); every link advertises the tier's message size, and a
transfer that grows past it is refused with `amqp:link:message-size-exceeded` without being held
in memory; a transfer the client aborts, or leaves unfinished when it goes, stores nothing.

An unknown entity is refused with `amqp:not-found`; bytes that are no AMQP close this connection
only. When the connection goes, its receivers close: messages fetched but never delivered are
released at once, delivered ones stay locked until their lock expires.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

from proton import Collector, Condition, Connection, Delivery, Endpoint, Event, Link, Message, Terminus, Transport

from ..errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusError,
    SessionLockLostError,
    UnauthorizedError,
)
from ..keys.sas import LISTEN, SEND, Claim, SasKey, audience_path, covers, token_audience_path, verify_token
from ..protocol import ReceiveMode
from ..sku import get_sku
from .conditions import error_condition
from .frames import FrameMender
from .limits import ConnectionLimits, limits_for
from .locks import HeldLocks
from .management import ManagementNode
from .mapping import decode_transfer, delivery_tag, encode_received
from .outcomes import dead_letter_reason, settle_action
from .sessions import SESSION_FILTER, SESSION_LOCKED_UNTIL, dotnet_ticks, session_filter, session_wait
from .paths import EntityAddress, is_cbs, parse_address

if TYPE_CHECKING:
    from ..aio.handle import Namespace
    from .streams import ByteReader, ByteWriter
    from ..aio.receiver import Receiver
    from ..aio.sender import Sender
    from ..message import ReceivedMessage

logger = logging.getLogger("ray_broker.amqp")

READ_BYTES = 64 * 1024
INCOMING_CREDIT = 100
"""Transfers a client may send on a link before the front end gives more credit."""
RECEIVE_WAIT_S = 1.0
"""How long one broker receive waits for messages while a client holds credit."""
MAX_RECEIVE_BATCH = 100
DELIVERY_SLICE = 25
"""Messages a receive link sends before the loop serves other connections: with many
connections at once, each gets its first messages soon instead of after every other's batch."""
SESSION_WAIT_S = 10.0
"""How long a session receiver's attach waits for a session to lock when the SDK does not say."""
CBS_OK, CBS_UNAUTHORIZED, CBS_NOT_FOUND = 202, 401, 404
NON_SESSION_RECEIVER = ("It is not possible for an entity that requires sessions to create a non-sessionful message "
                        "receiver: open a session receiver (a session id, or the next available session)")
"""Why a link without a session filter to an entity that requires sessions is refused (as
Service Bus says it, with `amqp:not-allowed`)."""


class ReceiveLink:
    """A link the client receives on: its broker receiver, the credit loop and the deliveries it
    has out (lock token -> message)."""

    def __init__(self, link: Link, receiver: Receiver, settled: bool, path: str) -> None:
        self.link = link
        self.receiver = receiver
        self.path = path
        """The entity path it receives from (where its lock tokens are good)."""
        self.settled = settled
        self.credit = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.unsettled: dict[Delivery, ReceivedMessage] = {}
        self.undelivered: list[ReceivedMessage] = []
        """Messages received from the broker and not yet sent to the client."""


class AmqpConnection:
    """Serves one accepted AMQP connection until it closes.

    Args:
        reader, writer: the connection's byte streams.
        namespace: the namespace's async client handle, which every broker call goes through.
        keys: gives the namespace's shared access keys (tokens are checked against them).
        clock: epoch seconds now (token expiry).
        limits: frame size, message size and idle timeout (default: those of the namespace's tier).
        locks: the message locks of every connection of the front end (default: this connection's own).
    """

    def __init__(self, reader: ByteReader, writer: ByteWriter, namespace: Namespace,
                 keys: Callable[[], Awaitable[Iterable[SasKey]]], clock: Callable[[], float] = time.time,
                 limits: ConnectionLimits | None = None, locks: HeldLocks[Receiver] | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self.namespace = namespace
        self._keys = keys
        self._clock = clock
        self.limits = limits or limits_for(get_sku(namespace.config.sku))
        self.transport = Transport(Transport.SERVER)
        self.transport.max_frame_size = self.limits.max_frame_bytes
        self.transport.idle_timeout = self.limits.idle_timeout_s
        self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.connection = Connection()
        self._collector = Collector()
        self.connection.collect(self._collector)
        self.transport.bind(self.connection)
        self._frames = FrameMender()
        """Renumbers the client's transfers for proton and completes the errors proton sends."""
        self._claims: list[Claim] = []
        self._senders: dict[Link, tuple[Sender, asyncio.Lock]] = {}
        self._receivers: dict[Link, ReceiveLink] = {}
        self._management: dict[Link, ManagementNode] = {}
        self._oversized: dict[Delivery, BaseException] = {}
        """Transfers being received that are already too large: their bytes are dropped as they come."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._outcomes: list[tuple[ReceiveLink, Delivery]] = []
        """Dispositions of received messages that arrived in this pass over the engine's events."""
        self.locks: HeldLocks[Receiver] = HeldLocks() if locks is None else locks
        """The messages the front end's receivers hold locks on, by lock token (for `$management`)."""
        self._closed = False
        self._next_tick = 0.0
        """When the engine next wants to run its timers (monotonic seconds), 0 for never."""

    # ------------------------------------------------------------------ the socket

    async def serve(self) -> None:
        """Run the connection until the client or the engine closes it."""
        try:
            self.pump()
            while not self._closed:
                try:
                    data = await asyncio.wait_for(self._reader.read(READ_BYTES), self._until_tick())
                except asyncio.TimeoutError:
                    self.pump()  # the engine's timers: heartbeats to send, a peer gone idle
                    continue
                if not data:
                    self.transport.close_tail()
                    self.pump()
                    break
                self._push(data)
                await self._writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await self._shut()

    def _until_tick(self) -> float | None:
        """Seconds until the engine's next timer (None: no timer), for the socket read to wait."""
        return None if not self._next_tick else max(0.0, self._next_tick - time.monotonic())

    def _push(self, data: bytes) -> None:
        """Feed bytes read from the socket to the engine, handling its events after each piece it
        takes (and after bytes it refuses, which close the connection)."""
        data = self._frames.inbound(data)
        while data and not self._closed:
            room = self.transport.capacity()
            if room <= 0:
                self._closed = True
            else:
                try:
                    self.transport.push(data[:room])
                except Exception:  # noqa: BLE001 - proton reports bad bytes as a transport error event
                    self._closed = True
                data = data[room:]
            self.pump()

    def pump(self) -> None:
        """Handle the engine's events and write what it has to send."""
        while (event := self._collector.peek()) is not None:
            try:
                self._dispatch(event)
            except Exception:  # noqa: BLE001 - one bad event must not kill the connection's loop
                logger.exception("AMQP front end: handling %s failed", event.type)
            self._collector.pop()
        if self._outcomes:
            self.spawn(self._settle_outcomes(self._outcomes))
            self._outcomes = []
        self._next_tick = self.transport.tick(time.monotonic())
        if self._writer.is_closing():
            return
        while True:
            pending = self.transport.pending()
            if pending < 0:
                self._closed = True
                break
            if pending == 0:
                break
            self._writer.write(self._frames.outbound(bytes(self.transport.peek(pending))))
            self.transport.pop(pending)

    def spawn(self, work: Any) -> None:
        """Run a coroutine on the loop as part of this connection (cancelled when it closes)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("AMQP front end: a task failed", exc_info=task.exception())

    async def _shut(self) -> None:
        """Close the socket and every broker client of the connection (receivers release what
        they fetched and never delivered)."""
        self._closed = True
        self._writer.close()
        for task in list(self._tasks):
            task.cancel()
        for state in list(self._receivers.values()):
            await self._close_receiver(state)
        for client in [*self._management.values(), *(sender for sender, _ in self._senders.values())]:
            try:
                await client.close()
            except Exception as exc:  # noqa: BLE001 - every client is closed; the rest go on
                logger.info("AMQP front end: closing %s: %s", type(client).__name__, exc)

    # ------------------------------------------------------------------ engine events

    def _dispatch(self, event: Event) -> None:
        kind = event.type
        if kind == Event.CONNECTION_REMOTE_OPEN and event.connection.state & Endpoint.LOCAL_UNINIT:
            event.connection.container = "ray-broker"
            event.connection.open()
        elif kind == Event.SESSION_REMOTE_OPEN and event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()
        elif kind == Event.LINK_REMOTE_OPEN and event.link.state & Endpoint.LOCAL_UNINIT:
            self._attach(event.link)
        elif kind == Event.LINK_FLOW and event.link in self._receivers:
            if event.link.credit > 0 or event.link.drain_mode:
                self._receivers[event.link].credit.set()
        elif kind == Event.DELIVERY:
            self._delivery(event.delivery)
        elif kind == Event.LINK_REMOTE_CLOSE:
            self.spawn(self._detach(event.link))
        elif kind == Event.SESSION_REMOTE_CLOSE:
            event.session.close()
        elif kind == Event.CONNECTION_REMOTE_CLOSE:
            event.connection.close()
        elif kind in (Event.TRANSPORT_ERROR, Event.TRANSPORT_CLOSED):
            self._closed = True

    def _attach(self, link: Link) -> None:
        address = link.remote_target.address if link.is_receiver else link.remote_source.address
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        link.max_message_size = self.limits.max_message_bytes
        if is_cbs(address):
            link.open()
            if link.is_receiver:
                link.flow(INCOMING_CREDIT)
            return
        self.spawn(self._attach_entity(link, address))

    async def _attach_entity(self, link: Link, address: str | None) -> None:
        try:
            target = parse_address(address)
            if not target.management:
                self.authorize(target, SEND if link.is_receiver else LISTEN)
            entity = await self._check_exists(target, link.is_receiver)
            if target.management:
                self._management[link] = ManagementNode(self, target)
            elif link.is_receiver:
                self._senders[link] = (self._new_sender(target), asyncio.Lock())
            else:
                await self._start_receiving(link, target, bool(getattr(entity, "requires_session", False)))
        except Exception as exc:  # noqa: BLE001 - every refusal is answered on the link
            if not link.state & Endpoint.REMOTE_CLOSED:
                self._refuse(link, exc)
            return
        link.open()
        if link.is_receiver:
            link.flow(INCOMING_CREDIT)
        self.pump()

    def _refuse(self, link: Link, error: BaseException) -> None:
        """Refuse a link as AMQP says: attach with no source or target, then detach with the error."""
        link.source.type = Terminus.UNSPECIFIED
        link.target.type = Terminus.UNSPECIFIED
        link.open()
        link.condition = error_condition(error)
        link.close()
        self.pump()

    def authorize(self, target: EntityAddress, right: str) -> None:
        """Raise `UnauthorizedError` unless a token this connection put covers `target` with `right`."""
        now = self._clock()
        if not any(c.allows(target.auth_path, right, now) for c in self._claims):
            raise UnauthorizedError(f"no valid token with the {right} right for {target.entity!r} was put on "
                                    "$cbs for this connection")

    async def _check_exists(self, target: EntityAddress, sending: bool) -> Any:
        """The properties of the entity a link is attached to (a queue, subscription or topic);
        `MessagingEntityNotFoundError` if there is none, `InvalidOperationError` if the link cannot
        be attached to that kind of entity."""
        if target.subscription is not None:
            if sending and not target.management:
                raise InvalidOperationError(f"{target.entity!r} is a subscription: send to its topic "
                                            f"{target.topic!r}")
            return await self.namespace.get_subscription(target.topic, target.subscription)  # type: ignore[arg-type]
        try:
            return await self.namespace.get_queue(target.entity)
        except MessagingEntityNotFoundError:
            if not sending and not target.management:
                await self.namespace.get_topic(target.entity)
                raise InvalidOperationError(f"{target.entity!r} is a topic: receive from one of its subscriptions "
                                            f"({target.entity}/Subscriptions/<name>)") from None
            return await self.namespace.get_topic(target.entity)

    def _new_sender(self, target: EntityAddress) -> Sender:
        return self.namespace.get_queue_sender(target.entity)

    async def _start_receiving(self, link: Link, target: EntityAddress, requires_session: bool) -> None:
        """Open the broker receiver of a link the client receives on (locking its session first,
        for a session receiver) and start its credit loop. A link without a session filter on an
        entity that requires sessions is refused, as Service Bus refuses it (its dead-letter
        sub-queues take such links)."""
        settled = link.remote_snd_settle_mode == Link.SND_SETTLED
        mode = ReceiveMode.RECEIVE_AND_DELETE if settled else ReceiveMode.PEEK_LOCK
        wanted = session_filter(link.remote_source.filter)
        if wanted is None and requires_session and target.sub_queue is None:
            raise InvalidOperationError(NON_SESSION_RECEIVER)
        if wanted is None:
            receiver = self.namespace.get_queue_receiver(target.receive_path, receive_mode=mode,
                                                         max_wait_time=RECEIVE_WAIT_S)
        else:
            receiver = self.namespace.get_queue_receiver(
                target.receive_path, receive_mode=mode,
                max_wait_time=session_wait(link.remote_properties, SESSION_WAIT_S),
                session_id=wanted)
        await _opened(receiver)
        if link.state & Endpoint.REMOTE_CLOSED:
            await receiver.close()
            raise SessionLockLostError("the client closed the link while its receiver was opening; its session "
                                       "is released")
        if receiver.session is not None:
            link.source.filter.clear()
            link.source.filter.put_dict({SESSION_FILTER: receiver.session.session_id})
            link.properties = {SESSION_LOCKED_UNTIL: dotnet_ticks(receiver.session.locked_until_utc)}
        state = ReceiveLink(link, receiver, settled, target.receive_path)
        self._receivers[link] = state
        state.task = asyncio.ensure_future(self._receive_loop(state))

    def session_receiver(self, session_id: str) -> Receiver:
        """The receiver of this connection that holds the lock of session `session_id`
        (`SessionLockLostError` if none does)."""
        for state in self._receivers.values():
            session = state.receiver.session
            if session is not None and session.session_id == session_id:
                return state.receiver
        raise SessionLockLostError(f"session {session_id!r} is not locked by a receiver of this connection")

    async def _detach(self, link: Link) -> None:
        # the closes are shielded: a connection that goes right after the detach cancels this
        # task, and a receiver closed halfway would keep its session and messages locked
        state = self._receivers.pop(link, None)
        if state is not None:
            await asyncio.shield(self._close_receiver(state))
        node = self._management.pop(link, None)
        if node is not None:
            await asyncio.shield(node.close())
        sender = self._senders.pop(link, None)
        if sender is not None:
            await sender[0].close()
        link.close()
        self.pump()

    async def _close_receiver(self, state: ReceiveLink) -> None:
        """Stop a link's credit loop (and wait until it has stopped: a receive it was awaiting
        releases what it brought), release what it received and never sent (no delivery
        counted), and close its broker receiver."""
        if state.task is not None:
            state.task.cancel()
            await asyncio.gather(state.task, return_exceptions=True)
        undelivered, state.undelivered = state.undelivered, []
        try:
            for message in undelivered:
                await state.receiver.release_message(message)
            await state.receiver.close()
        except Exception as exc:  # noqa: BLE001 - the connection's other clients are closed all the same
            logger.info("AMQP front end: closing a receiver: %s", exc)

    # ------------------------------------------------------------------ deliveries

    def _delivery(self, delivery: Delivery) -> None:
        link = delivery.link
        if link.is_receiver:
            if delivery.aborted:  # the client gave the transfer up: nothing of it is kept
                self._oversized.pop(delivery, None)
                link.advance()
                delivery.settle()
            elif self._whole(delivery):
                self._take(link, delivery)
            else:
                return
            if link.credit < INCOMING_CREDIT // 2:
                link.flow(INCOMING_CREDIT - link.credit)
        elif delivery.updated and link in self._receivers:
            self._outcomes.append((self._receivers[link], delivery))

    def _take(self, link: Link, delivery: Delivery) -> None:
        """Handle a complete transfer from the client: a `$cbs` or `$management` request, or
        messages to store (refused at once if it grew too large)."""
        payload = link.recv(delivery.pending)
        link.advance()
        too_large = self._oversized.pop(delivery, None)
        if too_large is not None:
            self._answer(delivery, error_condition(too_large))
        elif is_cbs(link.remote_target.address):
            self.spawn(self._put_token(link, delivery, payload))
        elif link in self._management:
            self.spawn(self._management[link].request(delivery, payload))
        elif link in self._senders:
            self.spawn(self._store(link, delivery, payload))

    def _whole(self, delivery: Delivery) -> bool:
        """Whether an incoming transfer is complete and readable; the bytes of one that has grown
        past the message size limit are dropped as they come, and it is remembered as too large."""
        if not delivery.readable:
            return False
        if delivery in self._oversized:
            delivery.link.recv(delivery.pending)
        else:
            try:
                self.limits.check_transfer(delivery.pending)
            except MessageSizeExceededError as exc:
                self._oversized[delivery] = exc
                delivery.link.recv(delivery.pending)
        return not delivery.partial

    def respond(self, request_link: Link, response: Message) -> None:
        """Send a response on the session's link whose source is the request link's target (the
        reply link of a `$cbs` or `$management` request/response pair)."""
        node = request_link.remote_target.address
        reply = next((lk for lk in _links(request_link.session) if lk.is_sender
                      and lk.remote_source.address == node and lk.state & Endpoint.LOCAL_ACTIVE), None)
        if reply is None:
            logger.info("AMQP front end: no reply link for %s; response dropped", node)
            return
        delivery = reply.delivery(uuid.uuid4().bytes)
        reply.send(bytes(response.encode()))
        reply.advance()
        delivery.settle()
        self.pump()

    async def _put_token(self, link: Link, delivery: Delivery, payload: bytes) -> None:
        request = Message()
        status, description = CBS_UNAUTHORIZED, "bad request"
        try:
            request.decode(payload)
            properties = request.properties or {}
            if properties.get("operation") != "put-token":
                raise UnauthorizedError(f"$cbs operation {properties.get('operation')!r} is not supported")
            token = str(request.body)
            try:
                entity_keys, missing = await self._entity_keys(token_audience_path(token)), None
            except MessagingEntityNotFoundError as exc:
                entity_keys, missing = (), exc
            claim = verify_token(token, (*await self._keys(), *entity_keys), self._clock())
            audience = properties.get("name")
            if audience is not None and not covers(claim.path, audience_path(str(audience))):
                raise UnauthorizedError(f"the token's audience does not cover {audience!r}")
            if missing is not None:
                raise missing
            self._claims.append(claim)
            status, description = CBS_OK, "Accepted"
        except UnauthorizedError as exc:
            description = str(exc)
        except MessagingEntityNotFoundError as exc:
            status = CBS_NOT_FOUND
            description = f"The messaging entity could not be found ({exc}); create it first"
        except ServiceBusError as exc:
            description = f"the namespace's keys could not be read to check the token ({exc}); try again"
        except Exception as exc:  # noqa: BLE001 - a malformed request is answered, not raised
            description = f"malformed put-token request: {exc}"
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        self.respond(link, Message(correlation_id=request.id, properties={
            "status-code": status, "status-description": description}))

    async def _entity_keys(self, path: str) -> tuple[SasKey, ...]:
        """The keys of the authorization rules of the queue or topic a token's audience path names
        (a subscription's and a sub-queue's are their queue's or topic's); none for the namespace or
        a path that is no entity address; `MessagingEntityNotFoundError` when the entity it names
        does not exist (Service Bus refuses such a token with 404)."""
        try:
            address = parse_address(path) if path else None
        except InvalidArgumentError:
            address = None
        if address is None:
            return ()
        owner = address.topic or address.entity
        if address.subscription is not None:
            await self.namespace.get_subscription(owner, address.subscription)
        try:
            entity: Any = await self.namespace.get_queue(owner)
        except MessagingEntityNotFoundError:
            entity = await self.namespace.get_topic(owner)
        return tuple(key for rule in entity.authorization_rules for key in rule.keys(entity.name))

    async def _store(self, link: Link, delivery: Delivery, payload: bytes) -> None:
        sender, order = self._senders[link]
        async with order:
            try:
                batch = await sender.create_message_batch()
                for envelope in decode_transfer(payload):
                    batch.add_envelope(envelope)
                await sender.send_messages(batch)
                outcome = None
            except Exception as exc:  # noqa: BLE001 - every failure is answered on the delivery
                outcome = error_condition(exc)
            self._answer(delivery, outcome)

    def _answer(self, delivery: Delivery, refusal: Condition | None) -> None:
        """Settle a transfer the client sent: accepted, or rejected with `refusal`."""
        if not delivery.settled:
            if refusal is None:
                delivery.update(Delivery.ACCEPTED)
            else:
                delivery.local.condition = refusal
                delivery.update(Delivery.REJECTED)
            delivery.settle()
        self.pump()

    async def _receive_loop(self, state: ReceiveLink) -> None:
        """While the link is open: receive as many messages as the client gives credit for and
        deliver them; a drain is answered at once with what there is."""
        link = state.link
        try:
            while link.state & Endpoint.LOCAL_ACTIVE or link.state & Endpoint.LOCAL_UNINIT:
                if link.credit <= 0:
                    state.credit.clear()
                    await state.credit.wait()
                    continue
                wanted = min(link.credit, MAX_RECEIVE_BATCH)
                wait = 0.0 if link.drain_mode else RECEIVE_WAIT_S
                try:
                    messages = await state.receiver.receive_messages(wanted, max_wait_time=wait)
                except MessageLockLostError as exc:
                    # a settlement echoed to the client met an expired lock when it reached the
                    # partition: the message comes back (at least once); the link goes on (a lost
                    # session lock, by contrast, ends a session link below)
                    logger.info("AMQP front end: a settlement on %s was too late: %s", link.name, exc)
                    continue
                state.undelivered = list(messages)
                while state.undelivered:
                    for message in state.undelivered[:DELIVERY_SLICE]:
                        self._deliver(state, message)
                    del state.undelivered[:DELIVERY_SLICE]
                    self.pump()
                    if state.undelivered:
                        await asyncio.sleep(0)
                if len(messages) < wanted and link.drain_mode:
                    link.drained()
                    self.pump()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the link ends with the broker's error
            logger.info("AMQP front end: receiving on %s failed: %s", link.name, exc)
            link.condition = error_condition(exc)
            link.close()
            self.pump()

    def _deliver(self, state: ReceiveLink, message: ReceivedMessage) -> None:
        link = state.link
        delivery = link.delivery(delivery_tag(message))
        link.send(encode_received(message))
        link.advance()
        if state.settled:
            delivery.settle()
            return
        state.unsettled[delivery] = message
        self.locks.hold(state.path, state.receiver, message)

    async def _settle_outcomes(self, outcomes: list[tuple[ReceiveLink, Delivery]]) -> None:
        """Settle delivered messages as the client's dispositions say, in the order they came,
        then echo every outcome (or error) the client waits for in one write."""
        for state, delivery in outcomes:
            await self._outcome(state, delivery)
        self.pump()

    async def _outcome(self, state: ReceiveLink, delivery: Delivery) -> None:
        """Settle one delivered message as the client's disposition says, and answer it."""
        message = state.unsettled.pop(delivery, None)
        if message is None:
            delivery.settle()
            return
        remote = delivery.remote
        outcome = delivery.remote_state
        action = settle_action(outcome, remote.undeliverable)
        try:
            # a deferral is answered once applied: the client's next step is to receive the message
            # by its sequence number through `$management`, which must find it deferred
            await self.settle(state.receiver, message, action,
                              *dead_letter_reason(remote.condition) if outcome == Delivery.REJECTED else (),
                              confirm=action == "defer")
            if not delivery.settled:
                delivery.update(outcome)
        except Exception as exc:  # noqa: BLE001 - answered on the delivery
            if not delivery.settled:
                delivery.local.condition = error_condition(exc)
                delivery.update(Delivery.REJECTED)
        delivery.settle()

    async def settle(self, receiver: Receiver, message: ReceivedMessage, action: str, reason: str | None = None,
                     description: str | None = None, *, confirm: bool = True) -> None:
        """Settle a locked message (complete, abandon, defer, release or dead_letter) through its receiver;
        with `confirm`, wait until the broker has applied it (its errors raised)."""
        self.locks.drop(message.lock_token)
        if action == "complete":
            await receiver.complete_message(message)
        elif action == "abandon":
            await receiver.abandon_message(message)
        elif action == "defer":
            await receiver.defer_message(message)
        elif action == "release":
            await receiver.release_message(message)
        else:
            await receiver.dead_letter_message(message, reason, description)
        if confirm:
            await receiver.flush()


async def _opened(receiver: Receiver) -> None:
    """Open a broker receiver (a session receiver locks its session). Should the connection go
    meanwhile (the client gave up waiting: its task is cancelled), the receiver is closed once it
    has opened, so that a session it locked is released at once, not when its lock expires."""
    opening = asyncio.ensure_future(receiver.__aenter__())
    try:
        await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(partial(_close_if_opened, receiver))
        raise


_CLOSING: set[asyncio.Task[None]] = set()
"""Closes of receivers whose connection went while they opened (held here until they finish)."""


def _close_if_opened(receiver: Receiver, opening: asyncio.Future[Any]) -> None:
    """Close `receiver` once `opening` (its opening) has succeeded."""
    if not opening.cancelled() and opening.exception() is None:
        closing = asyncio.ensure_future(receiver.close())
        _CLOSING.add(closing)
        closing.add_done_callback(_CLOSING.discard)


def _links(session: Any) -> list[Link]:
    """The links of a session's connection that belong to `session`."""
    links = []
    link = session.connection.link_head(0)
    while link is not None:
        if link.session == session:
            links.append(link)
        link = link.next(0)
    return links
