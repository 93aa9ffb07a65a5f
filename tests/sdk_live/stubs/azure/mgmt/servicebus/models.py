"""Stand-in for the one name the azure-servicebus live tests import from azure-mgmt-servicebus:
the rights a preparer gives a shared access key it makes."""
from __future__ import annotations

from enum import Enum


class AccessRights(str, Enum):
    """A shared access key's rights, as Service Bus names them."""

    manage = "Manage"
    send = "Send"
    listen = "Listen"
