"""An entity's `$management` node on one AMQP connection: the request/response operations the
Azure SDKs send there, answered through the namespace's async client.

Operations (`operation` application property; request and response bodies are AMQP maps):
- `com.microsoft:peek-message` (`from-sequence-number`, `message-count`, [`session-id`]) -> `messages`;
  204 when none; with a session id, that session's messages only;
- `com.microsoft:renew-lock` (`lock-tokens`) -> `expirations`, for locks any receiver of the entity
  on the front end holds (on this connection or another, its link open or closed);
- `com.microsoft:receive-by-sequence-number` (`sequence-numbers`, `receiver-settle-mode`,
  [`session-id`]) -> `messages` with `lock-token` (deferred messages, locked; received and deleted,
  without a lock token, when `receiver-settle-mode` is 0); with a session id, through the session
  receiver of this connection that holds that session;
- `com.microsoft:update-disposition` (`disposition-status` completed/abandoned/defered/suspended,
  `lock-tokens`, `deadletter-reason`, `deadletter-description`), for the same locks;
- `com.microsoft:schedule-message` (`messages`, each an encoded `message`) -> `sequence-numbers`;
- `com.microsoft:cancel-scheduled-message` (`sequence-numbers`);
- `com.microsoft:get-session-state`, `set-session-state` (`session-id`, `session-state`) and
  `renew-session-lock` (`session-id`) -> `expiration`, for sessions a receiver of this connection holds.
- `com.microsoft:get-message-sessions` (`skip`, `top`, `last-updated-time`) -> `skip`, `sessions-ids`:
  the sessions with active messages or a stored state; 204 when none;
- `com.microsoft:batch-delete-messages` (`message-count` 1 to 4000, [`enqueued-time-utc`]) ->
  `message-count`: removes about that many of the oldest messages (enqueued before the time when
  given; active, deferred, scheduled or locked) of the entity or its sub-queue, as `ns.purge` does
  one batch (Service Bus's purge, which clients repeat until it removes none; Listen);
- on a subscription: `com.microsoft:add-rule` (`rule-name`, `rule-description`; Manage),
  `com.microsoft:remove-rule` (`rule-name`; Manage), `com.microsoft:enumerate-rules` (`skip`, `top`)
  -> `rules`, each `{"rule-description": ...}` (see `rule_mapping.py`); 204 when none.
Responses carry `statusCode`, `statusDescription` and, on failure, `errorCondition`.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from proton import Delivery, Message, timestamp

from ..errors import InvalidArgumentError, InvalidOperationError
from ..keys.sas import LISTEN, MANAGE, SEND
from ..protocol import ReceiveMode
from .conditions import error_condition, status_code
from .locks import HeldLock, HeldLocks
from .mapping import encode_received, split_sections, wire_envelope
from .paths import EntityAddress
from .rule_mapping import described_rule, rule_from_description

if TYPE_CHECKING:
    from ..aio.handle import Namespace
    from ..aio.receiver import Receiver, ReceiverSession
    from ..aio.sender import Sender
    from ..message import ReceivedMessage


class Host(Protocol):
    """What a management node needs of its connection (`connection.AmqpConnection`)."""

    namespace: Namespace
    locks: HeldLocks[Receiver]

    def authorize(self, target: EntityAddress, right: str) -> None: ...

    def session_receiver(self, session_id: str) -> Receiver: ...

    def respond(self, request_link: Any, response: Message) -> None: ...

    async def settle(self, receiver: Receiver, message: ReceivedMessage, action: str, reason: str | None = None,
                     description: str | None = None, *, confirm: bool = True) -> None: ...

VENDOR = "com.microsoft:"
LIST_ALL_SESSIONS = 253402300800000
"""The `last-updated-time` (epoch milliseconds of .NET's DateTime.MaxValue) that asks for every
session with active messages or a state, rather than those whose state changed since a time."""
RECEIVE_AND_DELETE_SETTLE_MODE = 0
"""The `receiver-settle-mode` of a receive-by-sequence-number from a receive-and-delete receiver."""
_DISPOSITIONS = {"completed": "complete", "abandoned": "abandon", "defered": "defer", "deferred": "defer",
                 "suspended": "dead_letter"}


class ManagementNode:
    """The `$management` node of one entity on one connection: a broker receiver (made on first
    use) for peeking, deferred messages and dispositions, and a sender for scheduling."""

    def __init__(self, connection: Host, target: EntityAddress) -> None:
        self._connection = connection
        self._target = target
        self._receivers: dict[ReceiveMode, Receiver] = {}
        self._sender: Sender | None = None

    async def close(self) -> None:
        """Close the broker receivers and sender this node made."""
        for receiver in self._receivers.values():
            await receiver.close()
        if self._sender is not None:
            await self._sender.close()

    async def _opened_receiver(self, mode: ReceiveMode = ReceiveMode.PEEK_LOCK) -> Receiver:
        """This node's broker receiver in `mode` (made on first use)."""
        receiver = self._receivers.get(mode)
        if receiver is None:
            receiver = self._connection.namespace.get_queue_receiver(self._target.receive_path, receive_mode=mode)
            await receiver.__aenter__()
            self._receivers[mode] = receiver
        return receiver

    async def request(self, delivery: Delivery, payload: bytes) -> None:
        """Answer one request delivered on the node's request link."""
        link = delivery.link
        request = Message()
        try:
            request.decode(payload)
            operation = str((request.properties or {}).get("operation", ""))
            body = request.body if isinstance(request.body, Mapping) else {}
            result = await self._operate(operation, {str(k): v for k, v in body.items()})
            status, description, condition = (200 if result is not None else 204), "OK", None
        except Exception as exc:  # noqa: BLE001 - every failure is answered
            result, status, description = None, status_code(exc), str(exc)
            condition = error_condition(exc).name
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
        properties: dict[str, Any] = {"statusCode": status, "statusDescription": description}
        if condition is not None:
            properties["errorCondition"] = condition
        self._connection.respond(link, Message(body=result, correlation_id=request.id, properties=properties))

    async def _operate(self, operation: str, body: dict[str, Any]) -> dict[str, Any] | None:
        name = operation.removeprefix(VENDOR)
        handlers = {"peek-message": (LISTEN, self._peek), "renew-lock": (LISTEN, self._renew),
                    "receive-by-sequence-number": (LISTEN, self._receive_deferred),
                    "update-disposition": (LISTEN, self._dispose),
                    "schedule-message": (SEND, self._schedule), "cancel-scheduled-message": (SEND, self._cancel),
                    "get-session-state": (LISTEN, self._get_state), "set-session-state": (LISTEN, self._set_state),
                    "renew-session-lock": (LISTEN, self._renew_session),
                    "get-message-sessions": (LISTEN, self._list_sessions), "add-rule": (MANAGE, self._add_rule),
                    "remove-rule": (MANAGE, self._remove_rule), "enumerate-rules": (LISTEN, self._enumerate_rules),
                    "batch-delete-messages": (LISTEN, self._batch_delete)}
        if name not in handlers:
            raise InvalidArgumentError(f"$management operation {operation!r} is not supported by this front end")
        right, handler = handlers[name]
        self._connection.authorize(self._target, right)
        return await handler(body)  # type: ignore[no-any-return]

    async def _request_receiver(self, body: dict[str, Any]) -> Receiver:
        """The receiver a request goes through: with a `session-id` (a session receiver's request),
        the receiver of this connection that holds that session, so that it sees that session's
        messages only; else this node's own, receiving and deleting when the request's
        `receiver-settle-mode` is 0 (AMQP's `first`: a receive-and-delete receiver's request)."""
        session_id = body.get("session-id")
        if session_id is not None:
            return self._connection.session_receiver(str(session_id))
        deleting = body.get("receiver-settle-mode") == RECEIVE_AND_DELETE_SETTLE_MODE
        return await self._opened_receiver(ReceiveMode.RECEIVE_AND_DELETE if deleting else ReceiveMode.PEEK_LOCK)

    async def _peek(self, body: dict[str, Any]) -> dict[str, Any] | None:
        receiver = await self._request_receiver(body)
        start = int(body.get("from-sequence-number") or 0)
        messages = await receiver.peek_messages(int(body.get("message-count") or 1), sequence_number=start)
        if not messages:
            return None
        return {"messages": [{"message": encode_received(m, peeked=True)} for m in messages]}

    async def _held(self, token: uuid.UUID) -> tuple[Receiver, ReceivedMessage, HeldLock[Receiver]]:
        """The receiver to settle or renew lock `token` with, and its message: the receiver that
        locked it, or this node's once that one is closed (the lock is the entity's)."""
        held = self._connection.locks.get(token, self._target.receive_path)
        if not held.receiver.closed:
            return held.receiver, held.message, held
        receiver = await self._opened_receiver()
        return receiver, receiver.adopt(held.message), held

    async def _renew(self, body: dict[str, Any]) -> dict[str, Any]:
        expirations = []
        for token in _tokens(body.get("lock-tokens")):
            receiver, message, held = await self._held(token)
            until: datetime = await receiver.renew_message_lock(message)
            held.message.locked_until_utc = until
            expirations.append(timestamp(int(until.timestamp() * 1000)))
        return {"expirations": expirations}

    async def _receive_deferred(self, body: dict[str, Any]) -> dict[str, Any]:
        receiver = await self._request_receiver(body)
        messages = await receiver.receive_deferred_messages([int(s) for s in body.get("sequence-numbers") or []])
        out = []
        for message in messages:
            self._connection.locks.hold(self._target.receive_path, receiver, message)
            item: dict[str, Any] = {"message": encode_received(message)}
            if message.lock_token is not None:
                item["lock-token"] = message.lock_token
            out.append(item)
        return {"messages": out}

    async def _dispose(self, body: dict[str, Any]) -> dict[str, Any]:
        action = _DISPOSITIONS.get(str(body.get("disposition-status", "")).lower())
        if action is None:
            raise InvalidArgumentError(f"disposition-status {body.get('disposition-status')!r} is not one of "
                                       f"{', '.join(_DISPOSITIONS)}")
        for token in _tokens(body.get("lock-tokens")):
            receiver, message, _ = await self._held(token)
            reason, description = body.get("deadletter-reason"), body.get("deadletter-description")
            await self._connection.settle(receiver, message, action, None if reason is None else str(reason),
                                          None if description is None else str(description))
        return {}

    async def _schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._sender is None:
            self._sender = self._connection.namespace.get_queue_sender(self._target.entity)
        batch = await self._sender.create_message_batch()
        for item in body.get("messages") or []:
            batch.add_envelope(wire_envelope(split_sections(bytes(dict(item)["message"]))))
        times = {e.get("scheduled") for e in batch.envelopes}
        if not batch.envelopes or None in times or len(times) != 1:
            raise InvalidArgumentError("schedule-message takes messages that all carry one x-opt-scheduled-enqueue-time")
        when = datetime.fromtimestamp(times.pop(), tz=timezone.utc)
        return {"sequence-numbers": await self._sender.schedule_messages(batch, when)}

    async def _cancel(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._sender is None:
            self._sender = self._connection.namespace.get_queue_sender(self._target.entity)
        await self._sender.cancel_scheduled_messages([int(s) for s in body.get("sequence-numbers") or []])
        return {}


    async def _batch_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        count = body.get("message-count")
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidArgumentError(f"batch-delete-messages: message-count must be an int, got {count!r}")
        before = body.get("enqueued-time-utc")
        if before is not None and not isinstance(before, (int, datetime)):
            raise InvalidArgumentError("batch-delete-messages: enqueued-time-utc must be a timestamp, not "
                                       f"{type(before).__name__}")
        cutoff = before if before is None or isinstance(before, datetime) else \
            datetime.fromtimestamp(int(before) / 1000, timezone.utc)
        removed = await self._connection.namespace.delete_messages(
            self._target.entity, int(count), before=cutoff, sub_queue=self._target.sub_queue)
        return {"message-count": removed}

    def _session(self, body: dict[str, Any]) -> ReceiverSession:
        """The request's session, as the receiver of this connection that holds its lock has it."""
        session = self._connection.session_receiver(str(body.get("session-id") or "")).session
        assert session is not None, "a session receiver has a session"
        return session

    async def _get_state(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"session-state": await self._session(body).get_state()}

    async def _set_state(self, body: dict[str, Any]) -> dict[str, Any]:
        state = body.get("session-state")
        await self._session(body).set_state(None if state is None else bytes(state))
        return {}

    async def _renew_session(self, body: dict[str, Any]) -> dict[str, Any]:
        until = await self._session(body).renew_lock()
        return {"expiration": timestamp(int(until.timestamp() * 1000))}

    async def _list_sessions(self, body: dict[str, Any]) -> dict[str, Any] | None:
        updated = body.get("last-updated-time")
        if updated is not None and not isinstance(updated, int):
            raise InvalidArgumentError("get-message-sessions: last-updated-time must be a timestamp (epoch "
                                       f"milliseconds), not {type(updated).__name__}")
        after = None if updated is None or int(updated) >= LIST_ALL_SESSIONS else \
            datetime.fromtimestamp(int(updated) / 1000, timezone.utc)
        namespace, target = self._connection.namespace, self._target
        if target.subscription is None:
            sessions = await namespace.list_queue_sessions(target.entity, state_updated_after=after)
        else:
            sessions = await namespace.list_subscription_sessions(target.topic, target.subscription,  # type: ignore[arg-type]
                                                                  state_updated_after=after)
        page = _page(sessions, body)
        return {"skip": _count(body, "skip", 0), "sessions-ids": page} if page else None

    def _subscription(self) -> tuple[str, str]:
        """The topic and subscription of the node (`InvalidOperationError` on a queue's node)."""
        if self._target.topic is None or self._target.subscription is None:
            raise InvalidOperationError(f"{self._target.entity!r} is no subscription: rules belong to "
                                        "subscriptions (<topic>/Subscriptions/<name>/$management)")
        return self._target.topic, self._target.subscription

    async def _add_rule(self, body: dict[str, Any]) -> dict[str, Any]:
        rule = rule_from_description(body.get("rule-name"), body.get("rule-description"))
        await self._connection.namespace.create_rule(*self._subscription(), rule.name, filter=rule.filter,
                                                     action=rule.action)
        return {}

    async def _remove_rule(self, body: dict[str, Any]) -> dict[str, Any]:
        await self._connection.namespace.delete_rule(*self._subscription(), str(body.get("rule-name") or ""))
        return {}

    async def _enumerate_rules(self, body: dict[str, Any]) -> dict[str, Any] | None:
        rules = await self._connection.namespace.list_rules(*self._subscription())
        page = _page(rules, body)
        return {"rules": [{"rule-description": described_rule(rule)} for rule in page]} if page else None


def _page(items: list[Any], body: dict[str, Any]) -> list[Any]:
    """The page of `items` a request asks for with `skip` and `top` (all of them by default)."""
    skip = _count(body, "skip", 0)
    return items[skip:skip + _count(body, "top", len(items))]


def _count(body: dict[str, Any], key: str, default: int) -> int:
    """A request's non-negative int field (`skip`, `top`), `default` when absent."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{key} must be a non-negative int, got {value!r}")
    return int(value)


def _tokens(values: Any) -> list[uuid.UUID]:
    """Lock tokens from a request's array."""
    return [v if isinstance(v, uuid.UUID) else uuid.UUID(bytes=bytes(v)) for v in (values or [])]
