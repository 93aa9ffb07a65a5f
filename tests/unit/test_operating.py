"""What operator actions decide without Ray: which messages a filter selects, which dead letters a
resubmit takes, and the sequence numbers a peek browses."""
from __future__ import annotations

from typing import Any

import pytest

from ray_broker import CorrelationFilter, SqlFilter
from ray_broker.client.operating import Picking, peek_range, selector
from ray_broker.errors import InvalidArgumentError, RuleSyntaxError
from ray_broker.message import ReceivedMessage
from ray_broker.protocol import make_sequence_number


def received(seq: int, **fields: Any) -> ReceivedMessage:
    return ReceivedMessage({"body": b"x", "sequence_number": seq, **fields}, peeked=True)


def test_selector_reads_user_and_system_properties() -> None:
    message = received(5, subject="order", application_properties={"Region": "eu", "amount": 250})
    assert selector(None) is None
    assert selector("region = 'eu' AND sys.label = 'order' AND amount > 100")(message)  # type: ignore[misc]
    assert not selector(SqlFilter("sys.SequenceNumber > 5"))(message)  # type: ignore[misc]
    assert selector(CorrelationFilter(subject="order"))(message)  # type: ignore[misc]
    assert not selector("amount / 0 > 1")(message), "an evaluation error selects nothing"  # type: ignore[misc]


def test_selector_reads_a_dead_letters_reason_as_service_bus_properties() -> None:
    dead = received(3, dead_letter_reason="bad", dead_letter_error_description="broken",
                    application_properties={"n": 1})
    reads_both = selector("DeadLetterReason = 'bad' AND user.DeadLetterErrorDescription LIKE 'bro%'")
    assert reads_both is not None and reads_both(dead)
    assert not selector("DeadLetterReason = 'bad'")(received(4))  # type: ignore[misc]


def test_selector_refuses_bad_sql_and_other_types() -> None:
    with pytest.raises(RuleSyntaxError):
        selector("region = ")
    with pytest.raises(InvalidArgumentError, match="filter must be"):
        selector(42)


def test_picking_takes_the_wanted_numbers_the_filter_selects_and_ends_when_nothing_is_new() -> None:
    picking = Picking([1, 2, 3], "n > 1")
    batch = [received(seq, application_properties={"n": seq}) for seq in (1, 2, 4)]
    assert [m.sequence_number for m in picking.take(batch) or []] == [2]
    assert sorted(picking.passed) == [1, 4] and picking.more
    assert picking.take([received(1, application_properties={"n": 1})]) is None, "only seen ones came back"
    assert [m.sequence_number for m in picking.take([received(3, application_properties={"n": 3})]) or []] == [3]
    assert not picking.more


def test_picking_checks_its_arguments_first() -> None:
    with pytest.raises(InvalidArgumentError, match="sequence_numbers"):
        Picking([], None)
    with pytest.raises(RuleSyntaxError):
        Picking(None, "(")


def test_peek_range_of_a_partition() -> None:
    assert peek_range(7, None, 4) == (7, None)
    assert peek_range(0, 2, 4) == (make_sequence_number(2, 0), make_sequence_number(3, 0))
    assert peek_range(make_sequence_number(2, 9), 2, 4)[0] == make_sequence_number(2, 9)
    for bad in (4, -1, True):
        with pytest.raises(InvalidArgumentError, match="partition must be"):
            peek_range(0, bad, 4)
    with pytest.raises(InvalidArgumentError, match="sequence_number"):
        peek_range(-1, None, 4)
