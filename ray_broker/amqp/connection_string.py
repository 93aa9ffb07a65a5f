"""Connection strings as the Azure SDKs read them, for a namespace's AMQP front end. Pure."""
from __future__ import annotations

from ..keys.sas import SasKey


def connection_string(host: str, port: int, key: SasKey) -> str:
    """What an SDK needs to reach the front end on `host:port` with `key`: plain AMQP (no TLS), as
    with Microsoft's emulator, which `UseDevelopmentEmulator=true` selects.

    Example:
        connection_string("localhost", 5672, key)
        # 'Endpoint=sb://localhost:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=...;UseDevelopmentEmulator=true'
    """
    return (f"Endpoint=sb://{host}:{port};SharedAccessKeyName={key.name};SharedAccessKey={key.key};"
            "UseDevelopmentEmulator=true")
