"""Which management operation an HTTP request asks for, from its method and target. Pure.

    GET  /$namespaceinfo                                  the namespace's properties
    GET  /$Resources/queues  /$Resources/topics           a page of queues or topics ($skip, $top)
    GET|PUT|DELETE /<queue or topic>                      one entity
    GET  /<topic>/subscriptions                           a page of its subscriptions
    GET|PUT|DELETE /<topic>/subscriptions/<subscription>  one subscription
    GET  /<topic>/subscriptions/<subscription>/rules      a page of its rules
    GET|PUT|DELETE /<topic>/subscriptions/<subscription>/rules/<rule>

and, without a token, `GET /health`: whether the namespace's partitions answer (`is_health_check`;
with a token it is the entity named "health", as any other).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from ..entities import subscription_path
from ..errors import InvalidArgumentError, MessagingEntityNotFoundError

DEFAULT_PAGE = 100
MAX_PAGE = 1000


class Resource(Enum):
    """What a request is about."""

    NAMESPACE = "namespace"
    QUEUES = "queues"
    TOPICS = "topics"
    ENTITY = "entity"
    SUBSCRIPTIONS = "subscriptions"
    SUBSCRIPTION = "subscription"
    RULES = "rules"
    RULE = "rule"


COLLECTIONS = (Resource.NAMESPACE, Resource.QUEUES, Resource.TOPICS, Resource.SUBSCRIPTIONS, Resource.RULES)
"""Resources that are only read."""


class MethodNotAllowedError(InvalidArgumentError):
    """A method the resource does not take (HTTP 405)."""


@dataclass(frozen=True)
class Route:
    """A request resolved: the method, the resource, the names it gives (entity is the queue or
    topic; subscription and rule when the resource is below a topic) and the page asked for."""

    method: str
    resource: Resource
    entity: str = ""
    subscription: str = ""
    rule: str = ""
    path: str = ""
    """The request's path without its leading slash or query (for links)."""
    skip: int = 0
    top: int = DEFAULT_PAGE

    @property
    def entity_path(self) -> str:
        """The path a token must cover for this request ("" for the namespace)."""
        if self.resource in (Resource.NAMESPACE, Resource.QUEUES, Resource.TOPICS):
            return ""
        if self.resource in (Resource.ENTITY, Resource.SUBSCRIPTIONS):
            return self.entity
        return subscription_path(self.entity, self.subscription)


def _page_number(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name, [str(default)])[0]
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be a whole number, got {text!r}") from None
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be from {low} to {high}, got {value}")
    return value


def _resource(segments: list[str]) -> tuple[Resource, dict[str, str]]:
    lowered = [s.lower() for s in segments]
    if lowered == ["$namespaceinfo"]:
        return Resource.NAMESPACE, {}
    if len(lowered) == 2 and lowered[0] == "$resources" and lowered[1] in ("queues", "topics"):
        return (Resource.QUEUES if lowered[1] == "queues" else Resource.TOPICS), {}
    if "subscriptions" in lowered[1:]:
        at = lowered.index("subscriptions", 1)
        topic, rest = "/".join(segments[:at]), segments[at + 1:]
        below = [s.lower() for s in rest]
        if not rest:
            return Resource.SUBSCRIPTIONS, {"entity": topic}
        if len(rest) == 1:
            return Resource.SUBSCRIPTION, {"entity": topic, "subscription": rest[0]}
        if len(rest) == 2 and below[1] == "rules":
            return Resource.RULES, {"entity": topic, "subscription": rest[0]}
        if len(rest) == 3 and below[1] == "rules":
            return Resource.RULE, {"entity": topic, "subscription": rest[0], "rule": rest[2]}
        raise MessagingEntityNotFoundError(f"no management resource at /{'/'.join(segments)}")
    if segments and not segments[0].startswith("$"):
        return Resource.ENTITY, {"entity": "/".join(segments)}
    raise MessagingEntityNotFoundError(f"no management resource at /{'/'.join(segments)}")


def route(method: str, target: str) -> Route:
    """The operation a request for `target` (path and query) with `method` asks for.
    MessagingEntityNotFoundError for a path that names no resource, MethodNotAllowedError for a
    method the resource does not take, InvalidArgumentError for a bad `$skip` or `$top`."""
    parts = urlsplit(target)
    path = unquote(parts.path).strip("/")
    segments = [s for s in path.split("/") if s]
    resource, names = _resource(segments)
    allowed = ("GET",) if resource in COLLECTIONS else ("GET", "PUT", "DELETE")
    if method not in allowed:
        raise MethodNotAllowedError(f"{method} is not allowed on /{path}; it takes {', '.join(allowed)}")
    query = parse_qs(parts.query)
    return Route(method, resource, path=path, skip=_page_number(query, "$skip", 0, 0, 2**31 - 1),
                 top=_page_number(query, "$top", DEFAULT_PAGE, 1, MAX_PAGE), **names)


HEALTH_PATH = "health"


def is_health_check(method: str, target: str, headers: Mapping[str, str]) -> bool:
    """Whether a request (header names in lower case) is a health probe: `GET /health` without
    an Authorization header (the administration clients always send one, so an entity named
    "health" stays theirs).

    >>> is_health_check("GET", "/health", {}), is_health_check("GET", "/health", {"authorization": "t"})
    (True, False)
    """
    return method == "GET" and "authorization" not in headers and \
        unquote(urlsplit(target).path).strip("/").lower() == HEALTH_PATH
