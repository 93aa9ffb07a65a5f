"""What a failed gateway call means to its caller (`routing.gateway_retry`), decided without Ray:
the gateway's own error is raised, Ray's passing errors are waited out with the shared back-off, a
gateway gone for good is found again, a client moves on between gateways, and a call ends in
`OperationTimeoutError` when its time is up."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ray_broker.errors import MessagingEntityNotFoundError, OperationTimeoutError
from ray_broker.routing.gateway_retry import MIN_WAIT_S, Failure, GatewayRetry, Retry
from ray_broker.routing.health import RETRY_BACKOFF


def _retry(gateways: int = 1, timeout: float = 10.0, index: int = 0) -> tuple[GatewayRetry, list[float]]:
    now = [0.0]
    return GatewayRetry("ns", "routing_table", index=index, gateways=gateways, timeout=timeout,
                        clock=lambda: now[0]), now


def test_the_decision_imports_no_ray() -> None:
    code = "import sys; sys.modules['ray'] = None; import ray_broker.routing.gateway_retry"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_the_gateway_s_own_error_is_raised_as_it_is() -> None:
    error = MessagingEntityNotFoundError("queue 'q' does not exist", entity="q")
    retry, _ = _retry()
    with pytest.raises(MessagingEntityNotFoundError) as raised:
        retry.after(Failure.TYPED, error)
    assert raised.value is error and raised.value.__suppress_context__


def test_a_restarting_gateway_is_waited_out_on_the_same_handle_with_the_shared_back_off() -> None:
    retry, _ = _retry()
    steps = [retry.after(Failure.PASSING, RuntimeError("restarting")) for _ in range(4)]
    assert steps == [Retry(RETRY_BACKOFF.delay(a), 0, find=False) for a in range(4)]


def test_a_gateway_gone_for_good_is_found_again() -> None:
    retry, _ = _retry()
    assert retry.after(Failure.GONE, RuntimeError("died")) == Retry(RETRY_BACKOFF.delay(0), 0, find=True)


def test_with_several_gateways_the_caller_moves_on_to_the_next_one_round_the_ring() -> None:
    retry, _ = _retry(gateways=3, index=1)
    steps = [retry.after(failure, RuntimeError()) for failure in (Failure.PASSING, Failure.GONE, Failure.PASSING)]
    assert [(s.index, s.find) for s in steps] == [(2, True), (0, True), (1, True)]


def test_no_answer_in_time_is_a_time_out_naming_the_gateway_and_operation() -> None:
    retry, _ = _retry(timeout=7.5)
    with pytest.raises(OperationTimeoutError, match=r"gateway 0 of namespace 'ns' did not answer routing_table in 7.5 s"):
        retry.after(Failure.UNANSWERED, TimeoutError())


def test_a_gateway_that_stays_away_past_the_deadline_is_a_time_out() -> None:
    retry, now = _retry(timeout=1.0)
    assert retry.remaining() == 1.0
    now[0] = 0.97
    assert retry.remaining() == MIN_WAIT_S, "a try is always given a little time"
    with pytest.raises(OperationTimeoutError, match="stayed unavailable"):
        retry.after(Failure.PASSING, RuntimeError("restarting"))
