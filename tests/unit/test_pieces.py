"""Shipments cut into pieces that travel inside Ray calls, and put together again."""
from __future__ import annotations

import pytest

from ray_broker.engine.pieces import PIECE_BYTES, Assembly, split
from ray_broker.errors import InvalidArgumentError


def test_a_shipment_under_the_limit_is_one_piece_and_a_larger_one_is_cut_under_it() -> None:
    assert split(b"abc") == [b"abc"] and split(b"") == [b""]
    data = bytes(range(256)) * 1000
    pieces = split(data)
    assert len(pieces) == 3 and all(len(p) <= PIECE_BYTES for p in pieces) and b"".join(pieces) == data
    with pytest.raises(InvalidArgumentError, match="at least 1 byte"):
        split(data, 0)


def test_pieces_arriving_in_any_order_give_the_shipment_once() -> None:
    data = bytes(range(256)) * 1000
    pieces = split(data)
    assembly = Assembly()
    assert assembly.add(1, 2, 3, pieces[2]) is None and assembly.add(1, 0, 3, pieces[0]) is None
    assert assembly.add(1, 1, 3, pieces[1]) == data
    assert assembly.add(2, 0, 1, b"next") == b"next"


def test_a_new_shipment_drops_the_pieces_of_one_given_up_on() -> None:
    assembly = Assembly()
    assert assembly.add(1, 0, 2, b"old") is None
    assert assembly.add(2, 1, 2, b"B") is None
    assert assembly.add(2, 0, 2, b"A") == b"AB"
    with pytest.raises(InvalidArgumentError, match="piece 2 of 2 does not exist"):
        assembly.add(3, 2, 2, b"")
