"""Checks made before a namespace's AMQP front end is started, so that a start that could not
serve fails in seconds with a typed error, before any actor is created or any file written: the
`amqp` extra is importable, and the ports the front end would listen on are free on this machine
(the front end runs on the node of the process that starts the namespace). Ray-free."""
from __future__ import annotations

import importlib
import socket
from typing import Callable, Sequence

from ..errors import MissingDependencyError, PortUnavailableError

AMQP_EXTRA_MODULES = (("proton", "python-qpid-proton"), ("h11", "h11"), ("wsproto", "wsproto"),
                      ("cryptography", "cryptography"))
"""The modules the AMQP front end imports that come with `pip install 'ray-broker[amqp]'`, each
with the package that provides it."""


def check_amqp_extra(importer: Callable[[str], object] = importlib.import_module) -> None:
    """`MissingDependencyError` unless every module of `AMQP_EXTRA_MODULES` imports here."""
    missing = []
    for module, package in AMQP_EXTRA_MODULES:
        try:
            importer(module)
        except ImportError as exc:
            missing.append(f"{package} ({exc})")
    if missing:
        raise MissingDependencyError(
            f"the AMQP front end needs `pip install 'ray-broker[amqp]'`: {'; '.join(missing)}. Install that "
            "extra, or start without amqp_port")


def check_ports_free(ports: Sequence[tuple[int | None, str]], host: str) -> None:
    """`PortUnavailableError` naming the first of `ports` (`(port, what it serves)`, None for none)
    that cannot be bound on `host` here, as the front end binds it (with SO_REUSEADDR, so a port
    whose last connections are winding down counts as free)."""
    for port, role in ports:
        if port is None:
            continue
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise PortUnavailableError(
                    f"port {port} ({role}) cannot be listened on: {exc.strerror or exc}; another process may "
                    "hold it: pick a free port, or stop what listens there") from None
