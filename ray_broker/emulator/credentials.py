"""The credentials Microsoft's emulator publishes in every sample, and the connection strings that
carry them. Pure.

`SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE` is public text: a
namespace holding this key is open to anyone who can reach its ports. Only `ray-broker emulator`
gives a namespace this key (it listens on 127.0.0.1 unless told otherwise); every other namespace
is created with random keys.
"""
from __future__ import annotations

from ..keys.sas import RIGHTS, ROOT_KEY_NAME, SasKey

WELL_KNOWN_KEY_VALUE = "SAS_KEY_VALUE"
"""The key value in Microsoft's emulator connection strings."""
WELL_KNOWN_KEY = SasKey(ROOT_KEY_NAME, WELL_KNOWN_KEY_VALUE, RIGHTS)
"""`RootManageSharedAccessKey` with the published value and every right."""
AMQP_PORT = 5672
"""The AMQP port, which a connection string leaves out (the SDKs' default with `UseDevelopmentEmulator`)."""
LOCAL_ADDRESSES = ("127.0.0.1", "0.0.0.0", "localhost", "::1", "::", "")
"""Listening addresses that a client on this machine reaches as `localhost`."""


def client_host(listen_host: str) -> str:
    """The host a connection string names for a front end listening on `listen_host`.

    >>> client_host("127.0.0.1"), client_host("0.0.0.0"), client_host("10.1.2.3")
    ('localhost', 'localhost', '10.1.2.3')
    """
    return "localhost" if listen_host in LOCAL_ADDRESSES else listen_host


def connection_string(host: str, port: int) -> str:
    """A connection string as Microsoft's emulator documents it, for `host:port` (the port left out
    when it is the AMQP port, as in its samples); with the management port it is the one the
    administration client takes.

    >>> connection_string("localhost", 5672)
    'Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;'
    >>> connection_string("localhost", 5300).split(";")[0]
    'Endpoint=sb://localhost:5300'
    """
    endpoint = host if port == AMQP_PORT else f"{host}:{port}"
    return (f"Endpoint=sb://{endpoint};SharedAccessKeyName={WELL_KNOWN_KEY.name};"
            f"SharedAccessKey={WELL_KNOWN_KEY.key};UseDevelopmentEmulator=true;")
