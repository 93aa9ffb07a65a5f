"""Stand-ins for what the azure-servicebus live tests import from Azure's test framework
(devtools_testutils), enough to run them live against a ray_broker namespace: no recording, no
resource groups; credentials and the namespace come from the environment the runner sets
(SERVICEBUS_CONNECTION_STR, SERVICEBUS_FULLY_QUALIFIED_NAMESPACE, SERVICEBUS_SAS_POLICY,
SERVICEBUS_SAS_KEY), as the SDK's live pipeline sets them."""
from __future__ import annotations

import os
from typing import Any, Callable

from ._preparer import Preparer


class AzureRecordedTestCase:
    """The base class of recorded tests: nothing to record here."""

    is_live = True

    @staticmethod
    def await_prepared_test(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Async tests run as they are (pytest-asyncio runs coroutines)."""
        return fn


class AzureMgmtRecordedTestCase(AzureRecordedTestCase):
    """The base class of the SDK's test classes."""


def get_credential(is_async: bool = False, **_: Any) -> Any:
    """The namespace's shared access key as the SDK's own SAS credential (the administration client
    signs requests with it; the AMQP clients put its tokens as SAS tokens), where the real framework
    returns an Azure AD credential."""
    policy, key = os.environ["SERVICEBUS_SAS_POLICY"], os.environ["SERVICEBUS_SAS_KEY"]
    if is_async:
        from azure.servicebus.aio._base_handler_async import ServiceBusSharedKeyCredential as AsyncCredential

        return AsyncCredential(policy, key)
    from azure.servicebus._base_handler import ServiceBusSharedKeyCredential

    return ServiceBusSharedKeyCredential(policy, key)


def recorded_by_proxy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Live tests run as they are: no recording proxy."""
    return fn


def set_custom_default_matcher(**_: Any) -> None:
    """No recordings to match."""


class PowerShellPreparer(Preparer):
    """Passes each of `defaults`' names, its value taken from the environment variable of its
    upper-case name when set (as the SDK's live pipeline sets them), else the default."""

    def __init__(self, directory: str, **defaults: str) -> None:
        self.directory = directory
        self.defaults = defaults
        self.provides = tuple(defaults)

    def create(self, given: dict[str, Any]) -> dict[str, Any]:
        return {name: os.environ.get(name.upper(), default) for name, default in self.defaults.items()}


class CachedResourceGroupPreparer(Preparer):
    """No resource groups here: passes nothing."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass


RandomNameResourceGroupPreparer = CachedResourceGroupPreparer
