"""What most commands share: the namespace and cluster options, attaching to the namespace, and
naming the entity a command reads from or writes to."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from ..config import check_namespace_name
from ..entities import check_entity_name, check_subscription_name
from ..errors import InvalidOperationError, MessagingEntityNotFoundError

DEFAULT_NAMESPACE = "default"
SUBSCRIPTIONS = "/subscriptions/"

NamespaceOption = Annotated[str, typer.Option(
    "--namespace", "-n", envvar="RAY_BROKER_NAMESPACE", show_envvar=True, callback=check_namespace_name,
    help="Namespace name.")]
AddressOption = Annotated[Optional[str], typer.Option(
    "--address", help="Ray cluster address ('auto': this machine's `ray start` head). "
                      "Default: RAY_ADDRESS, else this machine's `ray start` head.")]

_NAME_HELP = "letters, digits, '.', '-', '_', '/'; 1 to 260 characters"
QueueName = Annotated[str, typer.Argument(
    callback=lambda value: check_entity_name(value, "queue"), help=f"The queue's name: {_NAME_HELP}.")]
TopicName = Annotated[str, typer.Argument(
    callback=lambda value: check_entity_name(value, "topic"), help=f"The topic's name: {_NAME_HELP}.")]
SubscriptionName = Annotated[str, typer.Argument(
    callback=check_subscription_name, help="The subscription's name (letters, digits, '.', '-', '_').")]
"""Names are checked as the command line is parsed, before any cluster is reached; a bad one is
the library's `InvalidArgumentError`."""


def attach(namespace: str, address: str | None) -> Any:
    """A handle to the running namespace `namespace` on the cluster `address` (or RAY_ADDRESS, or
    this machine's `ray start` head) names; its token comes from RAY_BROKER_AUTH_TOKEN. A command
    makes a few calls and exits, so they are relayed through the gateway rather than fetching the
    routing table first."""
    import ray_broker as rb
    from ..client.lifecycle import connect_namespace

    config = connect_namespace(namespace, address, how_to_start=f"`ray-broker start -n {namespace}`")
    return rb.Namespace(config, relay=True)


@dataclass(frozen=True)
class Entity:
    """What a message command names: a queue, a topic, or a topic's subscription."""

    kind: str
    """One of queue, topic and subscription."""
    name: str
    """The queue's or topic's name, or the subscription's topic."""
    subscription: str | None = None

    @property
    def path(self) -> str:
        """The name as given on the command line."""
        return self.name if self.subscription is None else f"{self.name}{SUBSCRIPTIONS}{self.subscription}"

    def __str__(self) -> str:
        return f"{self.kind} {self.path!r}"

    def receiver(self, ns: Any, *, dead_letter: bool, session_id: Any, **options: Any) -> Any:
        """A receiver of this queue or subscription (its dead-letter queue with `dead_letter`)."""
        import ray_broker as rb

        options.update(sub_queue=rb.SubQueue.DEAD_LETTER if dead_letter else None, session_id=session_id)
        if self.subscription is None:
            return ns.get_queue_receiver(self.name, **options)
        return ns.get_subscription_receiver(self.name, self.subscription, **options)


def receivable(ns: Any, path: str, command: str) -> tuple[Entity, Any]:
    """The queue, or the subscription `topic/subscriptions/sub` (the segment in any case, as
    Service Bus's `topic/Subscriptions/sub`), that `path` names, with its
    properties, for `ray-broker <command>`; `InvalidOperationError` (saying to name one of its
    subscriptions) when `path` is a topic, `MessagingEntityNotFoundError` (saying how to list
    them) when there is no such entity."""
    at = path.lower().find(SUBSCRIPTIONS)
    topic, found, subscription = (path, "", "") if at < 0 else (path[:at], SUBSCRIPTIONS,
                                                                path[at + len(SUBSCRIPTIONS):])
    if found:
        entity = Entity("subscription", topic, subscription)
        return entity, _existing(entity, ns.name, lambda: ns.get_subscription(topic, subscription))
    entity = Entity("queue", path)
    try:
        return entity, ns.get_queue(path)
    except MessagingEntityNotFoundError:
        pass
    try:
        ns.get_topic(path)
    except (MessagingEntityNotFoundError, InvalidOperationError):
        raise not_found(entity, ns.name) from None
    raise InvalidOperationError(
        f"{path!r} is a topic: {command} from one of its subscriptions "
        f"(`ray-broker {command} {path}{SUBSCRIPTIONS}SUBSCRIPTION -n {ns.name}`; "
        f"`ray-broker subscription list {path} -n {ns.name}` lists them)", entity=path)


def sendable(ns: Any, name: str) -> Entity:
    """The queue or, failing that, the topic named `name`; `MessagingEntityNotFoundError` when
    neither exists."""
    try:
        ns.get_queue(name)
        return Entity("queue", name)
    except MessagingEntityNotFoundError:
        pass
    try:
        ns.get_topic(name)
        return Entity("topic", name)
    except (MessagingEntityNotFoundError, InvalidOperationError):
        raise MessagingEntityNotFoundError(
            f"namespace {ns.name!r} has no queue or topic named {name!r}: create one "
            f"(`ray-broker queue create {name} -n {ns.name}`) or list them (`ray-broker status -n {ns.name}`)",
            entity=name) from None


def _existing(entity: Entity, namespace: str, get: Any) -> Any:
    try:
        return get()
    except MessagingEntityNotFoundError:
        raise not_found(entity, namespace) from None


def not_found(entity: Entity, namespace: str) -> MessagingEntityNotFoundError:
    """The error for an entity that does not exist, saying how to list those that do."""
    listing = {"queue": "queue list", "topic": "topic list",
               "subscription": f"subscription list {entity.name}"}[entity.kind]
    return MessagingEntityNotFoundError(
        f"{entity} does not exist in namespace {namespace!r} (names are case-insensitive); "
        f"`ray-broker {listing} -n {namespace}` lists them", entity=entity.path)
