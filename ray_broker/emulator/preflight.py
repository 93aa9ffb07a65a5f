"""Everything `ray-broker emulator` checks before it starts anything, and the plan it then follows.

Bad input fails here, in about a second, with one typed error: a `Config.json` that cannot be used,
a host that is no IPv4 address of this machine, a port another process holds, a `--data-dir` that
holds another namespace (another name, tier, partition count or keys) or one that runs. Reads
files and probes ports; starts nothing, writes nothing, no Ray.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ..client.front_end_checks import check_amqp_extra, check_ports_free
from ..config import NamespaceConfig, load_config
from ..engine.store_lock import holder_of, refusal
from ..errors import InvalidArgumentError, InvalidOperationError
from ..keys.keyring import load_keys
from ..keys.sas import SasKey
from .config_file import DEFAULT_NAMESPACE, read_config
from .credentials import WELL_KNOWN_KEY
from .model import EmulatorConfig

SKU = "standard"
"""The tier of the emulator's namespace: Microsoft's emulator offers standard's features."""
PARTITIONS_UNPARTITIONED = 1
"""Partitions when no entity of the file is partitioned: the fastest start."""
PARTITIONS_PARTITIONED = 4
"""Partitions when an entity of the file asks for partitioning (`EnablePartitioning`)."""


@dataclass(frozen=True)
class EmulatorOptions:
    """The command line of `ray-broker emulator`."""

    config_path: str | None = None
    data_dir: str | None = None
    amqp_port: int = 5672
    management_port: int = 5300
    host: str = "127.0.0.1"
    partitions: int | None = None


@dataclass(frozen=True)
class EmulatorPlan:
    """What the emulator will start, once every check passed."""

    config: EmulatorConfig
    source: str
    """How messages name the configuration: its path, or "no --config"."""
    data_dir: str | None
    """The absolute `--data-dir`; None for a fresh temporary directory, removed at exit."""
    partitions: int
    amqp_port: int
    management_port: int
    host: str


def plan_emulator(options: EmulatorOptions) -> EmulatorPlan:
    """Check `options` (and the files and ports they name) and say what to start."""
    config = read_config(options.config_path) if options.config_path else EmulatorConfig(DEFAULT_NAMESPACE)
    source = options.config_path or "no --config"
    check_host(options.host)
    if options.amqp_port == options.management_port:
        raise InvalidArgumentError(f"--amqp-port and --management-port are both {options.amqp_port}; give them "
                                   "different ports (5672 and 5300, as Microsoft's emulator)")
    check_amqp_extra()
    check_ports_free([(options.amqp_port, "the AMQP port"), (options.management_port, "the management port")],
                     options.host)
    data_dir = None if options.data_dir is None else os.path.abspath(os.path.expanduser(options.data_dir))
    stored = None if data_dir is None else stored_namespace(data_dir, config.namespace)
    partitions = options.partitions if options.partitions is not None else \
        stored.partition_count if stored is not None else \
        PARTITIONS_PARTITIONED if config.partitioned else PARTITIONS_UNPARTITIONED
    if stored is not None and stored.partition_count != partitions:
        raise InvalidOperationError(
            f"--data-dir {data_dir} holds namespace {stored.name!r} with {stored.partition_count} partitions, and a "
            f"namespace's partition count never changes; leave out --partitions (or give {stored.partition_count}), "
            "or use another --data-dir", entity=stored.name)
    return EmulatorPlan(config, source, data_dir, partitions, options.amqp_port, options.management_port,
                        options.host)


def check_host(host: str) -> None:
    """`InvalidArgumentError` unless `host` is an IPv4 address (or a name of one) this machine can
    listen on."""
    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError as exc:
        raise InvalidArgumentError(f"--host {host!r} is no IPv4 address this machine can listen on "
                                   f"({exc.strerror or exc}); give 127.0.0.1 (this machine only), 0.0.0.0 (every "
                                   "interface) or one of its addresses") from None


def stored_namespace(data_dir: str, name: str) -> NamespaceConfig | None:
    """The namespace `data_dir` holds, if any, once checked to be one the emulator may serve: named
    as the file names it, standard, holding the published key (keys of its own are never replaced
    by a public one), and not in use by a running process."""
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise InvalidArgumentError(f"--data-dir {data_dir} is a file; give a directory (it is made if missing)")
    stored = load_config(data_dir) if os.path.isdir(data_dir) else None
    if stored is None:
        return None
    if stored.name != name:
        raise InvalidOperationError(
            f"--data-dir {data_dir} holds namespace {stored.name!r}, and the configuration names {name!r}; name "
            f"the namespace {stored.name!r} in the file, or use another --data-dir", entity=name)
    if stored.sku != SKU or stored.replicas != 1:
        raise InvalidOperationError(
            f"--data-dir {data_dir} holds a {stored.sku} namespace with {stored.replicas} replica(s), made by "
            "`ray-broker start`; the emulator serves a standard one with one replica: use another --data-dir",
            entity=name)
    keys = load_keys(data_dir) or stored.shared_access_keys()
    if not _holds_well_known_key(keys):
        raise InvalidOperationError(
            f"--data-dir {data_dir} holds namespace {name!r} with keys of its own (made by `ray-broker start`); "
            "the emulator would open it to anyone with the published key SAS_KEY_VALUE, so it refuses: use "
            "another --data-dir (or `ray-broker start` to serve this one)", entity=name)
    for index, path in stored.store_paths():
        holder = holder_of(path)
        if holder is not None:
            raise refusal(path, holder, index)
    return stored


def _holds_well_known_key(keys: tuple[SasKey, ...]) -> bool:
    return any(k.name == WELL_KNOWN_KEY.name and k.key == WELL_KNOWN_KEY.key for k in keys)
