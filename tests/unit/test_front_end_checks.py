"""The checks made before an AMQP front end is started: the `amqp` extra imports, its ports are free."""
from __future__ import annotations

import socket

import pytest

from ray_broker.client.front_end_checks import check_amqp_extra, check_ports_free
from ray_broker.errors import MissingDependencyError, PortUnavailableError


def test_the_extra_imports_here() -> None:
    check_amqp_extra()


def test_a_module_that_does_not_import_names_its_package_and_the_extra() -> None:
    def importer(module: str) -> object:
        if module == "proton":
            raise ModuleNotFoundError("No module named 'proton'")
        return object()

    with pytest.raises(MissingDependencyError) as raised:
        check_amqp_extra(importer)
    assert str(raised.value) == ("the AMQP front end needs `pip install 'ray-broker[amqp]'`: python-qpid-proton "
                                 "(No module named 'proton'). Install that extra, or start without amqp_port")


def test_a_port_another_socket_listens_on_is_named_with_its_role() -> None:
    with socket.socket() as holder, socket.socket() as other:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        other.bind(("0.0.0.0", 0))
        busy, free = holder.getsockname()[1], other.getsockname()[1]
        other.close()
        check_ports_free([(free, "the AMQP port"), (None, "the management port")], "0.0.0.0")
        with pytest.raises(PortUnavailableError, match=rf"^port {busy} \(the management port\) cannot be listened "
                                                       "on: Address already in use; "):
            check_ports_free([(free, "the AMQP port"), (busy, "the management port")], "0.0.0.0")
