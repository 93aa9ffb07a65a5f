"""A namespace's named shared access keys, as its first gateway keeps them: made, listed and removed
at run time, and kept in the namespace's data directory (`shared_access_keys.msgpack`, beside its
configuration) so they survive a restart; a namespace in memory keeps them while its gateway runs.

A namespace starts with the keys its configuration was created with (`RootManageSharedAccessKey`);
once a key is added or removed, the file holds every key. Pure apart from that file: no Ray.

Example:
    ring = KeyRing(root_keys())
    sender = ring.add("orders-sender", ["send"])      # a new random key with the Send right
    [k.name for k in ring.keys]                       # ['RootManageSharedAccessKey', 'orders-sender']
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Sequence

from .. import codec
from ..errors import InvalidArgumentError, InvalidOperationError, MessagingEntityNotFoundError
from .sas import MANAGE, RIGHTS, SasKey, new_key

KEYS_FILE = "shared_access_keys.msgpack"
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,255}")
"""A key name as Service Bus takes one: letters, digits, ".", "-" and "_", at most 256, starting
with a letter or digit."""


def rights_of(values: Iterable[Any] | str) -> tuple[str, ...]:
    """Rights given in any case (`["send", "Listen"]`, or one text `"send,listen"`) as the keys
    hold them, in `RIGHTS` order; `InvalidArgumentError` for none or an unknown one."""
    given = [str(v).strip().lower() for v in (values.split(",") if isinstance(values, str) else values)]
    unknown = sorted({v for v in given if v not in {r.lower() for r in RIGHTS}})
    if unknown or not given:
        raise InvalidArgumentError(f"a shared access key takes rights among {', '.join(RIGHTS)} (at least one); "
                                   f"got {', '.join(unknown) if unknown else 'none'}")
    return tuple(r for r in RIGHTS if r.lower() in given)


def key_rows(keys: Iterable[SasKey]) -> list[list[Any]]:
    """Keys as the wire and the file carry them: `[name, key, rights]` lists."""
    return [[k.name, k.key, list(k.rights)] for k in keys]


def keys_from_rows(rows: Iterable[Sequence[Any]]) -> tuple[SasKey, ...]:
    """Keys from `key_rows`."""
    return tuple(SasKey(str(name), str(key), tuple(rights)) for name, key, rights in rows)


class KeyRing:
    """A namespace's keys, by name (case-sensitive, as SAS tokens name them)."""

    def __init__(self, keys: Iterable[SasKey]) -> None:
        self._keys = {k.name: k for k in keys}

    @property
    def keys(self) -> tuple[SasKey, ...]:
        """Every key, in the order they were made."""
        return tuple(self._keys.values())

    def add(self, name: str, rights: Iterable[Any] | str) -> SasKey:
        """Make a new random key named `name` with `rights` (`InvalidOperationError` if the name is taken)."""
        if not isinstance(name, str) or not _KEY_NAME.fullmatch(name):
            raise InvalidArgumentError(f"invalid key name {name!r}: use 1 to 256 letters, digits, '.', '-' or '_', "
                                       "starting with a letter or digit")
        if name in self._keys:
            raise InvalidOperationError(f"the namespace already has a key named {name!r}; remove it first to make "
                                        "it again with other rights", entity=name)
        key = new_key(name, rights_of(rights))
        self._keys[name] = key
        return key

    def remove(self, name: str) -> None:
        """Remove a key; tokens it signed are refused from then on (links they opened stay open).
        The last key with the Manage right stays."""
        if name not in self._keys:
            raise MessagingEntityNotFoundError(f"the namespace has no key named {name!r}; it has "
                                               f"{', '.join(self._keys)}", entity=name)
        if self._keys[name].grants(MANAGE) and sum(k.grants(MANAGE) for k in self._keys.values()) == 1:
            raise InvalidOperationError(f"{name!r} is the namespace's last key with the Manage right; add another "
                                        "with Manage before removing it", entity=name)
        del self._keys[name]


def load_keys(directory: str | None) -> tuple[SasKey, ...] | None:
    """The keys kept in `directory`, or None when it keeps none (or is None: a namespace in memory)."""
    if directory is None or not os.path.exists(os.path.join(directory, KEYS_FILE)):
        return None
    with open(os.path.join(directory, KEYS_FILE), "rb") as src:
        return keys_from_rows(codec.unpackb(src.read()))


def save_keys(directory: str | None, keys: Iterable[SasKey]) -> None:
    """Keep `keys` in `directory` (replacing the file whole; nothing for a namespace in memory)."""
    if directory is None:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, KEYS_FILE)
    with open(path + ".new", "wb") as out:
        out.write(codec.packb(key_rows(keys)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(path + ".new", path)
