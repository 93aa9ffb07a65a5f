"""SKU rules: what each tier allows, its size limits and quotas."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError, InvalidOperationError

MAX_ENTITIES = 10_000
MAX_PARTITIONED_ENTITIES = 100
MAX_PREMIUM_PARTITIONS = 64
STANDARD_PARTITIONS = 16


@dataclass(frozen=True)
class Sku:
    """The rules of one tier."""

    name: str
    max_message_bytes: int
    fixed_partitions: int | None
    advanced_features: bool
    all_entities_partitioned: bool
    partitioned_entity_quota: int | None

    def require(self, feature: str, entity: str | None = None) -> None:
        """Raise `InvalidOperationError` if this tier lacks `feature`."""
        if not self.advanced_features:
            raise InvalidOperationError(
                f"the {self.name} tier does not offer {feature}; start the namespace with "
                "sku='standard' or sku='premium' instead",
                entity=entity,
            )


SKUS = {
    "basic": Sku("basic", 256 * 1024, STANDARD_PARTITIONS, False, False, MAX_PARTITIONED_ENTITIES),
    "standard": Sku("standard", 256 * 1024, STANDARD_PARTITIONS, True, False, MAX_PARTITIONED_ENTITIES),
    "premium": Sku("premium", 1024 * 1024, None, True, True, None),
}


def get_sku(name: str) -> Sku:
    """Look a tier up by name."""
    if not isinstance(name, str) or name.lower() not in SKUS:
        raise InvalidArgumentError(f"unknown sku {name!r}; use 'basic', 'standard' or 'premium'")
    return SKUS[name.lower()]


def partition_count_for(sku: Sku, partitions: int | None, *, any_tier: bool = False) -> int:
    """The namespace's partition count: fixed for basic/standard, 1..64 (default 1) for premium;
    1..64 (default 1) on every tier with `any_tier` (the small namespaces of `ray-broker emulator`)."""
    if sku.fixed_partitions is not None and not any_tier:
        if partitions not in (None, sku.fixed_partitions):
            raise InvalidArgumentError(
                f"the {sku.name} tier always has {sku.fixed_partitions} partitions; leave partitions=None"
            )
        return sku.fixed_partitions
    if partitions is None:
        return 1
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PREMIUM_PARTITIONS:
        raise InvalidArgumentError(f"premium partitions must be an int from 1 to {MAX_PREMIUM_PARTITIONS}, got {partitions!r}")
    return partitions
