"""Shipments cut into pieces that travel inside a Ray call."""
from __future__ import annotations

import pytest

from ray_broker.engine.pieces import PIECE_BYTES, split
from ray_broker.errors import InvalidArgumentError


def test_a_shipment_under_the_limit_is_one_piece_and_a_larger_one_is_cut_under_it() -> None:
    assert split(b"abc") == [b"abc"] and split(b"") == [b""]
    data = bytes(range(256)) * 1000
    pieces = split(data)
    assert len(pieces) == 3 and all(len(p) <= PIECE_BYTES for p in pieces) and b"".join(pieces) == data
    with pytest.raises(InvalidArgumentError, match="at least 1 byte"):
        split(data, 0)
