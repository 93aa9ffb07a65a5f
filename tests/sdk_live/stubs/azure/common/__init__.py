"""Stand-in for the two names the azure-servicebus live tests import from azure-common (and do
not use in any test that runs here): its old HTTP errors."""
from __future__ import annotations


class AzureHttpError(Exception):
    """An HTTP error of Azure's older libraries."""

    def __init__(self, message: str = "", status_code: int = 0) -> None:
        super().__init__(message)
        self.status_code = status_code


class AzureConflictHttpError(AzureHttpError):
    """A 409 of Azure's older libraries."""
