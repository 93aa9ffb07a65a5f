"""Replaces the SDK's tests/servicebus_preparer.py (which creates namespaces and entities through
Azure Resource Manager): the same preparer names and parameters, making entities in the ray_broker
namespace the runner started, through its management API (the SDK's administration client), and
shared access keys through `ray-broker keys`.

Every preparer, cached or not, makes a fresh entity for each test and deletes it afterwards (the
SDK's management tests clear every queue and topic of the namespace, so nothing is kept between
tests). The namespace is `localhost` and the endpoint suffix `:<AMQP port>`, so that the tests'
`f"{servicebus_namespace.name}{SERVICEBUS_ENDPOINT_SUFFIX}"` is the front end's address."""
from __future__ import annotations

import base64
import functools
import os
import secrets
import subprocess
import sys
import uuid
from collections import namedtuple
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus.management import AccessRights, AuthorizationRule, ServiceBusAdministrationClient
from devtools_testutils._preparer import Preparer

SERVICEBUS_DEFAULT_AUTH_RULE_NAME = "RootManageSharedAccessKey"
SERVICEBUS_NAMESPACE_PARAM = "servicebus_namespace"
SERVICEBUS_TOPIC_PARAM = "servicebus_topic"
SERVICEBUS_SUBSCRIPTION_PARAM = "servicebus_subscription"
SERVICEBUS_QUEUE_PARAM = "servicebus_queue"
SERVICEBUS_AUTHORIZATION_RULE_PARAM = "servicebus_authorization_rule"
SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM = "servicebus_queue_authorization_rule"

HOST, _, PORT = os.environ["SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"].partition(":")
SERVICEBUS_ENDPOINT_SUFFIX = f":{PORT}"
ALL_RIGHTS = ("Manage", "Send", "Listen")

FakeResource = namedtuple("FakeResource", ["name", "id"])


def _admin() -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(os.environ["SERVICEBUS_CONNECTION_STR"],
                                                                 connection_verify=os.environ["SB_LIVE_CA_FILE"])


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def _connection_string(key_name: str, key: str, entity: str | None = None) -> str:
    entity_path = f";EntityPath={entity}" if entity else ""
    return (f"Endpoint=sb://{HOST}:{PORT}/;SharedAccessKeyName={key_name};SharedAccessKey={key}{entity_path};"
            "UseDevelopmentEmulator=true")


def _cli(*argv: str) -> str:
    """`ray-broker argv` against the runner's namespace; its standard output."""
    cli = str(Path(sys.executable).with_name("ray-broker"))
    target = ["-n", os.environ["SB_LIVE_NAMESPACE"], "--address", os.environ["SB_LIVE_RAY_ADDRESS"]]
    result = subprocess.run([cli, *argv, *target], capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ray-broker {' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def _rights(access_rights: Any) -> list[str]:
    return [str(getattr(r, "value", r)) for r in access_rights]


class ServiceBusResourceGroupPreparer(Preparer):
    """No resource groups here: passes nothing."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass


class ServiceBusNamespacePreparer(Preparer):
    """The runner's namespace, with its root key's connection string, name and key."""

    def __init__(self, name_prefix: str = "", parameter_name: str = SERVICEBUS_NAMESPACE_PARAM, **_: Any) -> None:
        self.parameter_name = parameter_name
        self.provides = (parameter_name, f"{parameter_name}_connection_string", f"{parameter_name}_key_name",
                         f"{parameter_name}_primary_key")

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        return dict(zip(self.provides, (FakeResource(HOST, HOST), os.environ["SERVICEBUS_CONNECTION_STR"],
                                        os.environ["SERVICEBUS_SAS_POLICY"], os.environ["SERVICEBUS_SAS_KEY"])))


class ServiceBusQueuePreparer(Preparer):
    """A fresh queue with the preparer's options."""

    def __init__(self, name_prefix: str = "", requires_duplicate_detection: bool = False,
                 dead_lettering_on_message_expiration: bool = False, requires_session: bool = False,
                 enable_partitioning: bool = False, lock_duration: str = "PT30S",
                 parameter_name: str = SERVICEBUS_QUEUE_PARAM, **_: Any) -> None:
        self.prefix = name_prefix or "sbqueue"
        self.options = dict(requires_duplicate_detection=requires_duplicate_detection,
                            dead_lettering_on_message_expiration=dead_lettering_on_message_expiration,
                            requires_session=requires_session, enable_partitioning=enable_partitioning,
                            lock_duration=lock_duration)
        self.parameter_name = parameter_name
        self.provides = (parameter_name,)

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        name = _name(self.prefix)
        with _admin() as admin:
            admin.create_queue(name, **self.options)
        return {self.parameter_name: FakeResource(name, name)}

    def remove(self, made: dict[str, Any]) -> None:
        with _admin() as admin:
            try:
                admin.delete_queue(made[self.parameter_name].name)
            except ResourceNotFoundError:
                pass


class ServiceBusTopicPreparer(Preparer):
    """A fresh topic."""

    def __init__(self, name_prefix: str = "", parameter_name: str = SERVICEBUS_TOPIC_PARAM, **_: Any) -> None:
        self.prefix = name_prefix or "sbtopic"
        self.parameter_name = parameter_name
        self.provides = (parameter_name,)

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        name = _name(self.prefix)
        with _admin() as admin:
            admin.create_topic(name)
        return {self.parameter_name: FakeResource(name, name)}

    def remove(self, made: dict[str, Any]) -> None:
        with _admin() as admin:
            try:
                admin.delete_topic(made[self.parameter_name].name)
            except ResourceNotFoundError:
                pass


class ServiceBusSubscriptionPreparer(Preparer):
    """A fresh subscription of the topic an outer preparer made."""

    def __init__(self, name_prefix: str = "", parameter_name: str = SERVICEBUS_SUBSCRIPTION_PARAM,
                 servicebus_topic_parameter_name: str = SERVICEBUS_TOPIC_PARAM, requires_session: bool = False,
                 lock_duration: str = "PT60S", **_: Any) -> None:
        self.prefix = name_prefix or "sbsub"
        self.parameter_name = parameter_name
        self.topic_parameter = servicebus_topic_parameter_name
        self.options = dict(requires_session=requires_session, lock_duration=lock_duration)
        self.provides = (parameter_name,)

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        name = _name(self.prefix)
        with _admin() as admin:
            admin.create_subscription(given[self.topic_parameter].name, name, **self.options)
        return {self.parameter_name: FakeResource(name, name)}


class ServiceBusNamespaceAuthorizationRulePreparer(Preparer):
    """A new shared access key of the namespace with `access_rights`, and its connection string."""

    def __init__(self, name_prefix: str = "", access_rights: Any = ALL_RIGHTS,
                 parameter_name: str = SERVICEBUS_AUTHORIZATION_RULE_PARAM, **_: Any) -> None:
        self.prefix = name_prefix or "sbnameauth"
        self.rights = _rights(access_rights)
        self.parameter_name = parameter_name
        self.provides = (parameter_name, f"{parameter_name}_connection_string")

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        name = _name(self.prefix)
        _cli("keys", "add", name, "--rights", ",".join(r.lower() for r in self.rights))
        connection_string = _cli("connection-string", "--key", name).strip().splitlines()[-1]
        return {self.parameter_name: FakeResource(name, name),
                f"{self.parameter_name}_connection_string": connection_string}

    def remove(self, made: dict[str, Any]) -> None:
        _cli("keys", "remove", made[self.parameter_name].name)


class ServiceBusQueueAuthorizationRulePreparer(Preparer):
    """A new authorization rule on the queue an outer preparer made (a key for that queue alone,
    with `access_rights`), and its connection string."""

    def __init__(self, name_prefix: str = "", access_rights: Any = ALL_RIGHTS,
                 parameter_name: str = SERVICEBUS_QUEUE_AUTHORIZATION_RULE_PARAM,
                 servicebus_queue_parameter_name: str = SERVICEBUS_QUEUE_PARAM, **_: Any) -> None:
        self.prefix = name_prefix or "sbqueueauth"
        self.rights = [AccessRights(r) for r in _rights(access_rights)]
        self.parameter_name = parameter_name
        self.queue_parameter = servicebus_queue_parameter_name
        self.provides = (parameter_name, f"{parameter_name}_connection_string")

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        name, queue_name = _name(self.prefix), given[self.queue_parameter].name
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        with _admin() as admin:
            queue = admin.get_queue(queue_name)
            rules = list(queue.authorization_rules or [])
            rules.append(AuthorizationRule(claim_type="SharedAccessKey", claim_value="None", rights=self.rights,
                                           key_name=name, primary_key=key,
                                           secondary_key=base64.b64encode(secrets.token_bytes(32)).decode()))
            queue.authorization_rules = rules
            admin.update_queue(queue)
        return {self.parameter_name: FakeResource(name, name),
                f"{self.parameter_name}_connection_string": _connection_string(name, key, queue_name)}


CachedServiceBusResourceGroupPreparer = functools.partial(ServiceBusResourceGroupPreparer, use_cache=True)
CachedServiceBusNamespacePreparer = functools.partial(ServiceBusNamespacePreparer, use_cache=True)
CachedServiceBusQueuePreparer = functools.partial(ServiceBusQueuePreparer, use_cache=True)
CachedServiceBusTopicPreparer = functools.partial(ServiceBusTopicPreparer, use_cache=True)
CachedServiceBusSubscriptionPreparer = functools.partial(ServiceBusSubscriptionPreparer, use_cache=True)
