"""The lock renewal policy (`client/renewal.py`) on a manual clock: due times, margins, limits, endings.

That the policy imports without Ray is checked in test_ray_free.py.
"""
from __future__ import annotations

from datetime import timedelta

import pytest

from ray_broker.client.renewal import (
    MAX_MARGIN_S,
    Ending,
    LockView,
    Registration,
    RenewalBook,
    failure_callback,
    max_renewal_seconds,
    renewal_margin,
)
from ray_broker.clock import ManualClock
from ray_broker.errors import InvalidArgumentError


class Lock:
    """A lock holder as a probe sees it: an expiry that renewals move, and settled/closed flags."""

    def __init__(self, clock: ManualClock, duration: float) -> None:
        self.clock = clock
        self.duration = duration
        self.locked_until = clock.now() + duration
        self.settled = False
        self.closed = False

    def renew(self) -> float:
        self.locked_until = self.clock.now() + self.duration
        return self.locked_until


def probe(registration: Registration[Lock]) -> LockView:
    lock = registration.renewable
    return LockView(lock.locked_until, lock.settled, lock.closed)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def book() -> RenewalBook[Lock]:
    return RenewalBook(probe)


def run_until(book: RenewalBook[Lock], clock: ManualClock, end: float) -> list[float]:
    """Drive the book as its owner would, jumping the clock to each wake-up; returns the renewal times."""
    times: list[float] = []
    while clock.now() < end:
        plan = book.plan(clock.now())
        for registration in plan.due:
            times.append(clock.now())
            book.renewed(registration, clock.now(), registration.renewable.renew())
        if plan.due:
            continue
        if plan.wake_at is None:
            break
        clock.advance(min(plan.wake_at, end) - clock.now())
    return times


def test_the_margin_is_ten_seconds_or_half_of_a_short_lock() -> None:
    assert renewal_margin(60.0) == MAX_MARGIN_S == 10.0
    assert renewal_margin(20.0) == 10.0
    assert renewal_margin(5.0) == 2.5
    assert renewal_margin(-1.0) == 0.0


def test_a_long_lock_is_renewed_ten_seconds_before_it_expires(book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    lock = Lock(clock, 60.0)
    registration = book.add(lock, "receiver", now=start, max_duration=300)
    plan = book.plan(start)
    assert plan.due == [] and plan.wake_at == start + 50.0
    clock.advance(49.9)
    assert book.plan(clock.now()).due == []
    clock.advance(0.1)
    assert book.plan(clock.now()).due == [registration]


def test_a_short_lock_is_renewed_every_half_lock(book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=start, max_duration=300)
    times = run_until(book, clock, start + 12.0)
    assert [t - start for t in times] == [2.5, 5.0, 7.5, 10.0]
    assert registration.renewals == 4 and registration in book
    assert lock.locked_until > clock.now()


def test_the_margin_follows_the_lock_span_a_renewal_returns(book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    lock = Lock(clock, 60.0)
    lock.locked_until = start + 4.0          # registered late: 4 s of a 60 s lock remain
    book.add(lock, "receiver", now=start, max_duration=300)
    times = run_until(book, clock, start + 60.0)
    assert [t - start for t in times] == [2.0, 52.0]


def test_renewing_stops_at_the_max_duration(book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=start, max_duration=6.0)
    times = run_until(book, clock, start + 30.0)
    assert [t - start for t in times] == [2.5, 5.0]
    assert registration not in book and len(book) == 0
    assert lock.locked_until == start + 10.0  # the last lock runs out on its own
    assert clock.now() == start + 10.0        # and the book let go of it when it had


def test_a_lock_left_to_expire_after_the_max_duration_is_reported_lapsed(
        book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    registration = book.add(Lock(clock, 60.0), "receiver", now=start, max_duration=30.0)
    assert book.plan(start).wake_at == start + 30.0
    clock.advance(30.0)
    plan = book.plan(clock.now())
    assert (plan.due, plan.ended, plan.wake_at) == ([], [], start + 60.0)  # watched until its lock expires
    assert registration in book
    clock.advance(30.0)
    plan = book.plan(clock.now())
    assert plan.due == [] and plan.ended == [(registration, Ending.LAPSED)] and plan.wake_at is None
    assert plan.lapsed == [registration] and registration not in book


@pytest.mark.parametrize("flag, ending", [("settled", Ending.SETTLED), ("closed", Ending.RECEIVER_CLOSED)])
def test_settling_after_the_max_duration_but_before_the_lock_expires_is_no_lapse(
        book: RenewalBook[Lock], clock: ManualClock, flag: str, ending: Ending) -> None:
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=clock.now(), max_duration=10.0)
    run_until(book, clock, clock.now() + 11.0)
    assert registration in book and lock.locked_until > clock.now()
    setattr(lock, flag, True)
    clock.advance(10.0)
    plan = book.plan(clock.now())
    assert plan.ended == [(registration, ending)] and plan.lapsed == []


@pytest.mark.parametrize("flag, ending", [("settled", Ending.SETTLED), ("closed", Ending.RECEIVER_CLOSED)])
def test_settling_or_closing_the_receiver_ends_a_registration(book: RenewalBook[Lock], clock: ManualClock,
                                                              flag: str, ending: Ending) -> None:
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=clock.now(), max_duration=300)
    setattr(lock, flag, True)
    clock.advance(3.0)
    plan = book.plan(clock.now())
    assert plan.due == [] and plan.ended == [(registration, ending)]
    assert registration not in book and book.plan(clock.now()).ended == []


def test_a_failure_ends_the_registration_and_is_reported_once(book: RenewalBook[Lock], clock: ManualClock) -> None:
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=clock.now(), max_duration=300)
    clock.advance(2.5)
    assert book.plan(clock.now()).due == [registration]
    assert book.failed(registration) is Ending.FAILED
    assert book.failed(registration) is None
    assert registration not in book and book.plan(clock.now()).due == []
    book.renewed(registration, clock.now(), clock.now() + 5.0)
    assert registration.renewals == 0 and len(book) == 0


def test_a_message_settled_during_its_renewal_is_no_failure(book: RenewalBook[Lock], clock: ManualClock) -> None:
    lock = Lock(clock, 5.0)
    registration = book.add(lock, "receiver", now=clock.now(), max_duration=300)
    lock.settled = True
    assert book.failed(registration) is Ending.SETTLED
    assert len(book) == 0


def test_an_expired_lock_is_due_at_once(book: RenewalBook[Lock], clock: ManualClock) -> None:
    lock = Lock(clock, 5.0)
    clock.advance(6.0)
    registration = book.add(lock, "receiver", now=clock.now(), max_duration=300)
    assert book.plan(clock.now()).due == [registration]


def test_registering_again_replaces_the_registration(book: RenewalBook[Lock], clock: ManualClock) -> None:
    lock = Lock(clock, 60.0)
    first = book.add(lock, "receiver", now=clock.now(), max_duration=10.0)
    clock.advance(8.0)
    second = book.add(lock, "receiver", now=clock.now(), max_duration=10.0)
    assert first not in book and second in book and len(book) == 1
    clock.advance(5.0)
    assert book.plan(clock.now()).ended == []
    assert book.failed(first) is None


def test_the_next_wake_up_is_the_earliest_of_all_registrations(book: RenewalBook[Lock], clock: ManualClock) -> None:
    start = clock.now()
    book.add(Lock(clock, 60.0), "receiver", now=start, max_duration=300)
    book.add(Lock(clock, 8.0), "receiver", now=start, max_duration=300)
    book.add(Lock(clock, 60.0), "receiver", now=start, max_duration=3.0)
    assert book.plan(start).wake_at == start + 3.0
    assert book.plan(start + 3.0).wake_at == start + 4.0


def test_an_empty_book_has_nothing_to_wake_for(book: RenewalBook[Lock], clock: ManualClock) -> None:
    book.add(Lock(clock, 5.0), "receiver", now=clock.now(), max_duration=300)
    book.clear()
    plan = book.plan(clock.now())
    assert plan.due == [] and plan.ended == [] and plan.wake_at is None


def test_durations_are_checked() -> None:
    assert max_renewal_seconds(30) == 30.0
    assert max_renewal_seconds(timedelta(minutes=2)) == 120.0
    for bad in ("300", None, True):
        with pytest.raises(InvalidArgumentError, match="number of seconds or a timedelta"):
            max_renewal_seconds(bad)
    for bad in (0, -1, float("inf"), float("nan"), timedelta(0)):
        with pytest.raises(InvalidArgumentError, match="positive, finite"):
            max_renewal_seconds(bad)


def test_failure_callbacks_are_checked() -> None:
    def callback(renewable: object, error: BaseException) -> None:
        """A callback."""

    assert failure_callback(None) is None
    assert failure_callback(callback) is callback
    with pytest.raises(InvalidArgumentError, match="on_lock_renew_failure must be a callable"):
        failure_callback("print")

