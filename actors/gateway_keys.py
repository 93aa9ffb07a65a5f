"""The namespace's shared access keys as its gateways serve them: the first gateway keeps them (a
`KeyRing`, saved in the namespace's data directory on every change); the others ask it, so that
every caller sees one set of keys."""
from __future__ import annotations

from typing import Any, Callable

from ray_broker.config import NamespaceConfig
from ray_broker.keys.keyring import KeyRing, key_rows, load_keys, save_keys


class GatewayKeys:
    """The key operations of gateway `index` (`first` gives the first gateway's actor handle).

    Keys travel as `[name, key, rights]` rows (`keyring.key_rows`)."""

    def __init__(self, config: NamespaceConfig, index: int, first: Callable[[], Any]) -> None:
        self._directory = config.data_dir
        self._ring = KeyRing(load_keys(config.data_dir) or config.shared_access_keys()) if index == 0 else None
        self._first = first

    async def listed(self) -> list[list[Any]]:
        """Every key."""
        if self._ring is None:
            return list(await self._first().call.remote("shared_access_keys"))
        return key_rows(self._ring.keys)

    async def add(self, name: str, rights: list[str]) -> list[Any]:
        """Make a key named `name` with `rights` and keep it; returns its row."""
        if self._ring is None:
            return list(await self._first().call.remote("add_shared_access_key", name, rights))
        key = self._ring.add(name, rights)
        save_keys(self._directory, self._ring.keys)
        return key_rows([key])[0]

    async def remove(self, name: str) -> None:
        """Remove the key named `name`."""
        if self._ring is None:
            await self._first().call.remote("remove_shared_access_key", name)
            return
        self._ring.remove(name)
        save_keys(self._directory, self._ring.keys)
