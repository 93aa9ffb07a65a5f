"""Link addresses as the Azure SDK writes them, parsed into what the broker names."""
from __future__ import annotations

import pytest

from ray_broker.amqp.paths import EntityAddress, is_cbs, parse_address
from ray_broker.errors import InvalidArgumentError


@pytest.mark.parametrize("address, parsed", [
    ("orders", EntityAddress("orders")),
    ("amqps://localhost:5672/orders", EntityAddress("orders")),
    ("sb://ns.example/orders/", EntityAddress("orders")),
    ("orders/$DeadLetterQueue", EntityAddress("orders", sub_queue="deadletter")),
    ("orders/$Transfer/$DeadLetterQueue", EntityAddress("orders", sub_queue="transferdeadletter")),
    ("orders/$management", EntityAddress("orders", management=True)),
    ("orders/$DeadLetterQueue/$management", EntityAddress("orders", sub_queue="deadletter", management=True)),
    ("events/Subscriptions/audit", EntityAddress("events/subscriptions/audit", "events", "audit")),
    ("events/subscriptions/audit/$deadletterqueue",
     EntityAddress("events/subscriptions/audit", "events", "audit", "deadletter")),
    ("a/b/events/Subscriptions/audit/$management",
     EntityAddress("a/b/events/subscriptions/audit", "a/b/events", "audit", management=True)),
])
def test_addresses_parse(address: str, parsed: EntityAddress) -> None:
    assert parse_address(address) == parsed


def test_receive_and_auth_paths_keep_the_sub_queue() -> None:
    dead = parse_address("orders/$DeadLetterQueue/$management")
    assert dead.receive_path == dead.auth_path == "orders/$deadletterqueue"
    assert parse_address("orders").receive_path == "orders"


@pytest.mark.parametrize("address", ["", None, "$cbs", "orders/$weird", "/", "t/Subscriptions/$management/x",
                                     "t/Subscriptions/a/b"])
def test_addresses_that_name_no_entity_are_refused(address: str | None) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_address(address)


def test_the_cbs_node() -> None:
    assert is_cbs("$cbs") and is_cbs("amqps://host/$cbs") and is_cbs("$CBS")
    assert not is_cbs("orders") and not is_cbs(None)


def test_session_filters_and_lock_times_as_the_sdk_writes_and_reads_them() -> None:
    from datetime import datetime, timezone

    from proton import Data, symbol

    from ray_broker.amqp.sessions import NEXT_AVAILABLE, dotnet_ticks, session_filter, session_wait

    def filters(value: object) -> Data:
        data = Data()
        if value is not None:
            data.put_dict(value)  # type: ignore[arg-type]
        return data

    assert session_filter(filters(None)) is None
    assert session_filter(filters({symbol("other"): "x"})) is None
    assert session_filter(filters({symbol("com.microsoft:session-filter"): "s1"})) == "s1"
    assert session_filter(filters({symbol("com.microsoft:session-filter"): None})) is NEXT_AVAILABLE
    assert session_filter(filters({symbol("com.microsoft:session-filter"): ""})) == ""  # the session ""
    with pytest.raises(InvalidArgumentError, match="not 1"):
        session_filter(filters({symbol("com.microsoft:session-filter"): 1}))
    assert dotnet_ticks(datetime(1970, 1, 1, tzinfo=timezone.utc)) == 621_355_968_000_000_000
    assert dotnet_ticks(datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)) - dotnet_ticks(
        datetime(1970, 1, 1, tzinfo=timezone.utc)) == 10_000_000
    assert session_wait({symbol("com.microsoft:timeout"): 2500}, 10.0) == 2.5
    assert session_wait(None, 10.0) == 10.0
