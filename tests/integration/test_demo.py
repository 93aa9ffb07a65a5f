"""The demo: its message plan, and a reduced run on the test session's Ray."""
from __future__ import annotations

import pytest

from ray_broker.demo import build_plan, run_demo


def test_plan_covers_the_requested_messages_once() -> None:
    plan = build_plan(20_000)
    orders = plan.orders()
    ids = [m.message_id for m in plan.in_send_order()]
    assert plan.total == 20_000 == len(ids) == len(set(ids))
    assert [m.application_properties["index"] for m in plan.in_send_order()] == list(range(20_000))
    assert len({m.partition_key for m in orders if m.partition_key}) == 400
    assert all(m.partition_key is None and m.session_id is None for m in plan.restart_pool)
    assert all(m.session_id is not None for m in plan.sessions)
    keyed = sum(m.partition_key is not None for m in orders)
    assert 0.4 * len(orders) < keyed < 0.6 * len(orders)


def test_demo_refuses_too_few_messages() -> None:
    with pytest.raises(ValueError):
        run_demo(messages=10)


@pytest.mark.ray
def test_reduced_demo_passes_every_check(ray_instance: None, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_demo(messages=2000, name="demo-test")
    out = capsys.readouterr().out
    assert report.ok, report.checks
    assert report.sent == report.received == 2000
    assert report.victim_kept == report.victim_before_kill > 0
    assert "demo PASSED" in out and "(raylet)" not in out
