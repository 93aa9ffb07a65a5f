"""The management operations behind the HTTP API: a request is checked (its SAS token must grant
Manage), routed, and carried out through the namespace's async client (`ray_broker.aio`), so the
broker's own rules decide; the answer is an ATOM entry, a feed or an error the SDKs map (404 ->
ResourceNotFoundError, 409 -> ResourceExistsError, 401 -> ClientAuthenticationError, other
statuses -> HttpResponseError with the detail). Plain Python: the namespace handle is passed in.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from ..errors import (
    InvalidOperationError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityNotFoundError,
    PartitionUnavailableError,
    QuotaExceededError,
    ServerBusyError,
    ServiceBusError,
    UnauthorizedError,
)
from ..keys.sas import SasKey
from . import atom
from .authorization import authorize, check_forwarding
from .codecs import amqp_address
from .descriptions import (
    DEFAULT_RULE_ELEMENTS,
    QUEUE,
    SIZE_OPTION,
    SUBSCRIPTION,
    TOPIC,
    DescriptionKind,
    Fixed,
    message_size_fixed,
    read_options,
    replacement,
    shown_size,
    stored_size,
    write_description,
)
from .routes import MethodNotAllowedError, Resource, Route, is_health_check, route
from .rule_xml import read_rule, write_rule

if TYPE_CHECKING:
    from ..aio.handle import Namespace

logger = logging.getLogger("ray_broker.amqp")

_STATUSES: tuple[tuple[type[BaseException], int], ...] = (
    (UnauthorizedError, 401),
    (MessagingEntityNotFoundError, 404),
    (MessagingEntityAlreadyExistsError, 409),
    (MethodNotAllowedError, 405),
    (InvalidOperationError, 400),
    (QuotaExceededError, 403),
    (ServerBusyError, 503),
    (PartitionUnavailableError, 503),
)


@dataclass(frozen=True)
class Request:
    """An HTTP request as the service needs it: header names in lower case."""

    method: str
    target: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Reply:
    """An HTTP answer, with any headers it carries beyond its type and length (name, value)."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def status_of(error: BaseException) -> int:
    """The HTTP status a broker error answers with (500 for anything unforeseen)."""
    return next((status for kind, status in _STATUSES if isinstance(error, kind)), 500)


def error_reply(error: BaseException) -> Reply:
    """The answer to a request that failed with `error`."""
    status = status_of(error)
    detail = str(error) if isinstance(error, ServiceBusError) else f"the management request failed: {error}"
    return Reply(status, atom.ERROR_CONTENT_TYPE, atom.error_body(status, detail))


PartitionsDown = Callable[[], Awaitable[list[int]]]
"""Gives the partitions that do not answer now."""


class ManagementService:
    """Answers management requests for one namespace.

    Args:
        namespace: the namespace's async client handle.
        keys: gives the namespace's shared access keys, asked at each request (as the AMQP
            connection asks at each put-token), so keys made or removed count at once.
        clock: epoch seconds now (token expiry).
        partitions_down: when given, health probes (`GET /health` without a token) are answered
            from it: 200 when every partition answers, 503 naming those that do not.
    """

    def __init__(self, namespace: Namespace, keys: Callable[[], Awaitable[Iterable[SasKey]]],
                 clock: Callable[[], float] = time.time, partitions_down: PartitionsDown | None = None) -> None:
        self._namespace = namespace
        self._keys = keys
        self._clock = clock
        self._partitions_down = partitions_down
        self._message_size = message_size_fixed(namespace.sku.max_message_bytes // 1024)
        self._partitions = namespace.sku.fixed_partitions or 1
        """How many partitions a partitioned entity has, where the tier fixes it (its size shows times this)."""

    async def handle(self, request: Request, host: str) -> Reply:
        """Answer `request`, which reached the server as `host` (host:port, for links)."""
        if self._partitions_down is not None and is_health_check(request.method, request.target, request.headers):
            return await self._health(self._partitions_down)
        try:
            target = route(request.method, request.target)
            keys = tuple(await self._keys())
            authorize(request.headers, target.entity_path, keys, self._clock())
            return await self._serve(target, request, host, keys)
        except ServiceBusError as exc:
            return error_reply(exc)
        except Exception as exc:  # noqa: BLE001 - the server answers 500 and keeps serving
            logger.exception("management API: %s %s failed", request.method, request.target)
            return error_reply(exc)

    async def _health(self, partitions_down: PartitionsDown) -> Reply:
        """200 and "healthy" when every partition answers, else 503 and "unhealthy" with those that
        do not (a JSON object either way)."""
        down = await partitions_down()
        report = {"status": "unhealthy" if down else "healthy", "namespace": self._namespace.config.name,
                  "partitions": self._namespace.partition_count, "partitions_down": down}
        return Reply(503 if down else 200, "application/json", json.dumps(report).encode())

    # ------------------------------------------------------------------ routing

    async def _serve(self, target: Route, request: Request, host: str, keys: tuple[SasKey, ...]) -> Reply:
        base = f"https://{host}"
        host = amqp_address(host, self._namespace.config.amqp_port)  # forwarding targets name the AMQP address
        if target.resource is Resource.NAMESPACE:
            return self._entry_reply(200, atom.entry(base, "$namespaceinfo", self._namespace.config.name,
                                                     self._namespace_info(), None))
        if target.resource in (Resource.QUEUES, Resource.TOPICS, Resource.SUBSCRIPTIONS, Resource.RULES):
            return await self._list(target, base, host)
        if target.method == "DELETE":
            await self._delete(target)
            return Reply(200, atom.ENTRY_CONTENT_TYPE, b"")
        if target.method == "GET":
            title, description, updated = await self._get(target, host)
            return self._entry_reply(200, atom.entry(base, target.path, title, description, updated))
        return await self._put(target, request, base, host, keys)

    @staticmethod
    def _entry_reply(status: int, element: ET.Element) -> Reply:
        return Reply(status, atom.ENTRY_CONTENT_TYPE, atom.to_bytes(element))

    def _namespace_info(self) -> ET.Element:
        info = ET.Element(atom.sb("NamespaceInfo"))
        ET.SubElement(info, atom.sb("MessagingSKU")).text = self._namespace.sku.name.capitalize()
        ET.SubElement(info, atom.sb("Name")).text = self._namespace.config.name
        ET.SubElement(info, atom.sb("NamespaceType")).text = "Messaging"
        return info

    # ------------------------------------------------------------------ reading

    async def _described(self, resource: Resource, entity: str, subscription: str, host: str,
                         kind_hint: DescriptionKind | None = None) -> tuple[str, ET.Element, Any]:
        """The title, description and update time of one queue, topic or subscription, with its
        runtime properties. A bare entity name is looked up as a queue, then as a topic."""
        ns = self._namespace
        if resource is Resource.SUBSCRIPTION:
            properties, runtime = await asyncio.gather(ns.get_subscription(entity, subscription),
                                                       ns.get_subscription_runtime_properties(entity, subscription))
            return subscription, write_description(SUBSCRIPTION, properties, host, (), runtime), properties.updated_at_utc
        if kind_hint is not TOPIC:
            try:
                properties, runtime = await asyncio.gather(ns.get_queue(entity), ns.get_queue_runtime_properties(entity))
                return entity, write_description(QUEUE, properties, host, self._extra(QUEUE), runtime,
                                                 self._shown_size(properties)), \
                    properties.updated_at_utc
            except MessagingEntityNotFoundError:
                if kind_hint is QUEUE:
                    raise
        properties, runtime = await asyncio.gather(ns.get_topic(entity), ns.get_topic_runtime_properties(entity))
        return entity, write_description(TOPIC, properties, host, self._extra(TOPIC), runtime,
                                         self._shown_size(properties)), \
            properties.updated_at_utc

    def _shown_size(self, properties: Any) -> dict[str, int]:
        return {SIZE_OPTION: shown_size(properties.max_size_in_megabytes, properties.enable_partitioning,
                                        self._partitions)}

    def _stored_size(self, options: dict[str, Any], partitioned: bool) -> dict[str, Any]:
        """`options` with a size a client sent as Service Bus shows it turned into the size per partition."""
        if SIZE_OPTION not in options:
            return options
        return {**options, SIZE_OPTION: stored_size(options[SIZE_OPTION], partitioned, self._partitions)}

    def _extra(self, kind: DescriptionKind) -> tuple[Fixed, ...]:
        return () if kind is SUBSCRIPTION else (self._message_size,)

    async def _get(self, target: Route, host: str) -> tuple[str, ET.Element, Any]:
        if target.resource is Resource.RULE:
            rule = await self._namespace.get_rule(target.entity, target.subscription, target.rule)
            return rule.name, write_rule(rule), rule.created_at_utc
        return await self._described(target.resource, target.entity, target.subscription, host)

    async def _list(self, target: Route, base: str, host: str) -> Reply:
        ns = self._namespace
        if target.resource is Resource.RULES:
            rules = await ns.list_rules(target.entity, target.subscription)
            page = rules[target.skip:target.skip + target.top]
            entries = [atom.entry(base, f"{target.path}/{rule.name}", rule.name, write_rule(rule), rule.created_at_utc)
                       for rule in page]
            total = len(rules)
        else:
            if target.resource is Resource.SUBSCRIPTIONS:
                names = [s.name for s in await ns.list_subscriptions(target.entity)]
                resource, kind = Resource.SUBSCRIPTION, SUBSCRIPTION
            else:
                kind = QUEUE if target.resource is Resource.QUEUES else TOPIC
                listed = await (ns.list_queues() if kind is QUEUE else ns.list_topics())
                names, resource = [p.name for p in listed], Resource.ENTITY
            total = len(names)
            page = names[target.skip:target.skip + target.top]
            described = await asyncio.gather(*(
                self._described(resource, target.entity if resource is Resource.SUBSCRIPTION else name, name, host,
                                kind) for name in page))
            prefix = f"{target.path}/" if resource is Resource.SUBSCRIPTION else ""
            entries = [atom.entry(base, prefix + title, title, description, updated)
                       for title, description, updated in described]
        after = target.skip + target.top
        next_link = f"{base}/{target.path}?$skip={after}&$top={target.top}" if after < total else None
        return Reply(200, atom.FEED_CONTENT_TYPE, atom.to_bytes(atom.feed(base, target.path, target.path, entries,
                                                                          next_link)))

    # ------------------------------------------------------------------ changing

    async def _delete(self, target: Route) -> None:
        ns = self._namespace
        if target.resource is Resource.RULE:
            await ns.delete_rule(target.entity, target.subscription, target.rule)
        elif target.resource is Resource.SUBSCRIPTION:
            await ns.delete_subscription(target.entity, target.subscription)
        else:
            try:
                await ns.delete_queue(target.entity)
            except MessagingEntityNotFoundError:
                await ns.delete_topic(target.entity)

    async def _put(self, target: Route, request: Request, base: str, host: str,
                   keys: tuple[SasKey, ...]) -> Reply:
        updating = request.headers.get("if-match", "").strip() == "*"
        if target.resource is Resource.RULE:
            rule = read_rule(atom.entry_content(request.body, ("RuleDescription",)), target.rule)
            if updating:
                await self._namespace.update_rule(target.entity, target.subscription, rule)
                rule = await self._namespace.get_rule(target.entity, target.subscription, target.rule)
            else:
                rule = await self._namespace.create_rule(target.entity, target.subscription, target.rule,
                                                         filter=rule.filter, action=rule.action)
            return self._entry_reply(200 if updating else 201,
                                     atom.entry(base, target.path, rule.name, write_rule(rule), rule.created_at_utc))
        kinds = (SUBSCRIPTION,) if target.resource is Resource.SUBSCRIPTION else (QUEUE, TOPIC)
        description = atom.entry_content(request.body, [k.element for k in kinds])
        kind = next(k for k in kinds if description.tag == atom.sb(k.element))
        options = read_options(kind, description, self._extra(kind), DEFAULT_RULE_ELEMENTS)
        check_forwarding(request.headers, options, keys, self._clock())
        if updating:
            await self._update(kind, target, options)
        else:
            await self._create(kind, target, options, description)
        title, element, updated = await self._described(target.resource, target.entity, target.subscription, host,
                                                        kind)
        return self._entry_reply(200 if updating else 201, atom.entry(base, target.path, title, element, updated))

    async def _create(self, kind: DescriptionKind, target: Route, options: dict[str, Any],
                      description: ET.Element) -> None:
        ns = self._namespace
        if kind is QUEUE:
            await ns.create_queue(target.entity, **self._stored_size(options, options.get("enable_partitioning", False)))
        elif kind is TOPIC:
            await ns.create_topic(target.entity, **self._stored_size(options, options.get("enable_partitioning", False)))
        else:
            first = next((found for name in DEFAULT_RULE_ELEMENTS
                          if (found := description.find(atom.sb(name))) is not None), None)
            rule = None if first is None else read_rule(first, "$Default")
            if rule is not None and rule.action is not None:
                raise InvalidOperationError("an action on a subscription's first rule is not supported at creation; "
                                            "create the subscription, then update its $Default rule with the action")
            await ns.create_subscription(target.entity, target.subscription, rule=None if rule is None else rule.filter,
                                         **options)

    async def _update(self, kind: DescriptionKind, target: Route, options: dict[str, Any]) -> None:
        ns = self._namespace
        if kind is SUBSCRIPTION:
            current: Any = await ns.get_subscription(target.entity, target.subscription)
        else:
            current = await (ns.get_queue(target.entity) if kind is QUEUE else ns.get_topic(target.entity))
        if kind is not SUBSCRIPTION:
            options = self._stored_size(options, current.enable_partitioning)
        changes = {option: value for option, value in replacement(kind, options).items()
                   if getattr(current, option) != value}
        if kind is QUEUE:
            await ns.update_queue(target.entity, **changes)
        elif kind is TOPIC:
            await ns.update_topic(target.entity, **changes)
        else:
            await ns.update_subscription(target.entity, target.subscription, **changes)

