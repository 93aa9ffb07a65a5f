"""AutoLockRenewer on real Ray: message and session locks kept alive, failures reported, limits kept."""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import ray_broker as rb
from tests.integration.helpers import wait_until


class Failures:
    """An on_lock_renew_failure callback that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, BaseException]] = []
        self.called = threading.Event()

    def __call__(self, renewable: Any, error: BaseException) -> None:
        self.calls.append((renewable, error))
        self.called.set()


def receive(receiver: rb.Receiver, count: int) -> list[rb.ReceivedMessage]:
    """Exactly `count` messages (several receive calls if need be)."""
    got: list[rb.ReceivedMessage] = []
    while len(got) < count:
        batch = receiver.receive_messages(count - len(got), max_wait_time=5)
        assert batch, f"only {len(got)} of {count} messages arrived"
        got.extend(batch)
    return got


def send(namespace: rb.Namespace, queue: str, *messages: rb.Message) -> None:
    with namespace.get_queue_sender(queue) as sender:
        sender.send_messages(list(messages))


def test_a_registered_message_outlives_its_lock(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=5))
    send(namespace, queue_name, rb.Message("kept"), rb.Message("left"))
    failures = Failures()
    with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name) as receiver:
            kept, left = sorted(receive(receiver, 2), key=lambda m: m.body != b"kept")
            first_lock = kept.locked_until_utc
            assert first_lock is not None
            renewer.register(receiver, kept)
            time.sleep(12)
            assert kept.locked_until_utc is not None and kept.locked_until_utc > first_lock + timedelta(seconds=5)
            receiver.complete_message(kept)
            receiver.flush()
            with pytest.raises(rb.errors.MessageLockLostError):
                receiver.complete_message(left)
            wait_until(lambda: len(renewer._book) == 0, timeout=5)
    assert failures.calls == []
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 1
    namespace.delete_queue(queue_name)


def test_a_registered_session_outlives_its_lock(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, requires_session=True, lock_duration=timedelta(seconds=5))
    send(namespace, queue_name, rb.Message("in session", session_id="s1"))
    failures = Failures()
    with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name, session_id="s1") as receiver:
            session = receiver.session
            assert session is not None
            message = receive(receiver, 1)[0]
            renewer.register(receiver, session)
            time.sleep(12)
            with pytest.raises(rb.errors.SessionCannotBeLockedError):
                with namespace.get_queue_receiver(queue_name, session_id="s1", max_wait_time=1):
                    pass
            session.set_state(b"still mine")
            receiver.complete_message(message)
            receiver.flush()
    assert failures.calls == []
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0
    namespace.delete_queue(queue_name)


def test_a_lock_that_expired_before_registration_is_reported_lost(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=1))
    send(namespace, queue_name, rb.Message("late"))
    failures = Failures()
    with namespace.get_queue_receiver(queue_name) as receiver:
        message = receive(receiver, 1)[0]
        time.sleep(1.2)
        with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
            renewer.register(receiver, message)
            assert failures.called.wait(10)
        again = receive(receiver, 1)[0]
        assert again.sequence_number == message.sequence_number and again.delivery_count == 2
        receiver.complete_message(again)
    assert len(failures.calls) == 1
    renewable, error = failures.calls[0]
    assert renewable is message and isinstance(error, rb.errors.MessageLockLostError)
    namespace.delete_queue(queue_name)


def test_a_renewal_the_broker_refuses_is_reported_once(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=2))
    send(namespace, queue_name, rb.Message("orphan"))
    default, own = Failures(), Failures()
    with rb.AutoLockRenewer(on_lock_renew_failure=default) as renewer:
        with namespace.get_queue_receiver(queue_name) as receiver:
            message = receive(receiver, 1)[0]
            renewer.register(receiver, message, on_lock_renew_failure=own)
            namespace.delete_queue(queue_name)
            assert own.called.wait(10)
    assert default.calls == [] and len(own.calls) == 1
    renewable, error = own.calls[0]
    assert renewable is message and isinstance(error, rb.errors.MessagingEntityNotFoundError)


def test_renewal_stops_at_the_max_duration_and_the_lapsed_lock_is_reported(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=2))
    send(namespace, queue_name, rb.Message("bounded"), rb.Message("settled in time"))
    failures = Failures()
    with rb.AutoLockRenewer(max_lock_renewal_duration=300, on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name) as receiver:
            message, in_time = sorted(receive(receiver, 2), key=lambda m: m.body != b"bounded")
            first_lock = message.locked_until_utc
            assert first_lock is not None
            renewer.register(receiver, message, max_lock_renewal_duration=timedelta(seconds=3))
            renewer.register(receiver, in_time, max_lock_renewal_duration=timedelta(seconds=3))
            time.sleep(3.2)
            receiver.complete_message(in_time)   # after the limit, before its lock ran out: no failure
            assert failures.called.wait(5), "the lock that ran out after the limit was not reported"
            assert message.locked_until_utc is not None and message.locked_until_utc > first_lock + timedelta(seconds=1)
            with pytest.raises(rb.errors.MessageLockLostError):
                receiver.complete_message(message)
            again = receive(receiver, 1)[0]
            assert again.sequence_number == message.sequence_number and again.delivery_count == 2
            receiver.complete_message(again)
            receiver.flush()
            wait_until(lambda: len(renewer._book) == 0, timeout=5)
    assert len(failures.calls) == 1
    renewable, error = failures.calls[0]
    assert renewable is message and isinstance(error, rb.errors.MessageLockLostError)
    assert "max_lock_renewal_duration (3 s)" in str(error)
    namespace.delete_queue(queue_name)


def test_a_receiver_given_a_renewer_registers_what_it_receives(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=3))
    send(namespace, queue_name, *(rb.Message(f"m{i}") for i in range(3)))
    failures = Failures()
    with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name, auto_lock_renewer=renewer) as receiver:
            received = receive(receiver, 2)
            receiver.defer_message(received[1])
            receiver.flush()
            deferred = receiver.receive_deferred_messages([received[1].sequence_number])
            kept = (received[0], deferred[0])
            first_locks = [m.locked_until for m in kept]
            time.sleep(7)                            # past two 3 s locks: renewed without a register call
            assert all(m.locked_until > lock for m, lock in zip(kept, first_locks))  # type: ignore[operator]
            for message in kept:
                receiver.complete_message(message)
            receiver.flush()
        with namespace.get_queue_receiver(queue_name, receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE,
                                          auto_lock_renewer=renewer) as deleting:
            assert len(receive(deleting, 1)) == 1   # nothing to register: no lock
        wait_until(lambda: len(renewer._book) == 0, timeout=5)
    assert failures.calls == []
    with pytest.raises(rb.errors.InvalidOperationError, match="AutoLockRenewer is closed"):
        namespace.get_queue_receiver(queue_name, auto_lock_renewer=renewer)
    namespace.delete_queue(queue_name)


def test_a_session_receiver_given_a_renewer_registers_its_session(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, requires_session=True, lock_duration=timedelta(seconds=3))
    send(namespace, queue_name, rb.Message("in session", session_id="s1"))
    failures = Failures()
    with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name, session_id="s1", auto_lock_renewer=renewer) as receiver:
            assert receiver.session is not None and renewer._book.holds(receiver.session)
            message = receive(receiver, 1)[0]
            assert len(renewer._book) == 1   # the session, not its message
            time.sleep(7)
            receiver.complete_message(message)
            receiver.flush()
    assert failures.calls == []
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0
    namespace.delete_queue(queue_name)


def test_a_receiver_takes_only_an_open_renewer_of_its_own_client(namespace: rb.Namespace, queue_name: str) -> None:
    import ray_broker.aio as rba

    namespace.create_queue(queue_name)
    send(namespace, queue_name, rb.Message("stays"))
    with pytest.raises(rb.errors.InvalidArgumentError, match="ray_broker.aio.AutoLockRenewer with the async"):
        namespace.get_queue_receiver(queue_name, auto_lock_renewer=rba.AutoLockRenewer())
    with pytest.raises(rb.errors.InvalidArgumentError, match="must be an AutoLockRenewer"):
        namespace.get_subscription_receiver("t", "s", auto_lock_renewer="renewer")
    renewer = rb.AutoLockRenewer()
    with namespace.get_queue_receiver(queue_name, auto_lock_renewer=renewer) as receiver:
        renewer.close()
        with pytest.raises(rb.errors.InvalidOperationError, match="AutoLockRenewer is closed"):
            receiver.receive_messages(max_wait_time=1)
    assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 1  # nothing was taken
    namespace.delete_queue(queue_name)


def test_closing_the_renewer_stops_renewal(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=1))
    send(namespace, queue_name, rb.Message("dropped"))
    failures = Failures()
    with namespace.get_queue_receiver(queue_name) as receiver:
        message = receive(receiver, 1)[0]
        renewer = rb.AutoLockRenewer(on_lock_renew_failure=failures)
        renewer.register(receiver, message)
        renewer.close()
        assert renewer._thread is not None and not renewer._thread.is_alive()
        time.sleep(1.2)
        with pytest.raises(rb.errors.MessageLockLostError):
            receiver.complete_message(message)
        with pytest.raises(rb.errors.InvalidOperationError, match="closed"):
            renewer.register(receiver, message)
        with pytest.raises(rb.errors.InvalidOperationError, match="closed"):
            with renewer:
                pass
    assert failures.calls == []
    namespace.delete_queue(queue_name)


def test_registration_checks_what_it_is_given(namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, lock_duration=timedelta(seconds=3))
    send(namespace, queue_name, *(rb.Message(f"m{i}") for i in range(4)))
    failures = Failures()
    with pytest.raises(rb.errors.InvalidArgumentError, match="max_lock_renewal_duration"):
        rb.AutoLockRenewer(max_lock_renewal_duration="5 minutes")  # type: ignore[arg-type]
    with pytest.raises(rb.errors.InvalidArgumentError, match="on_lock_renew_failure"):
        rb.AutoLockRenewer(on_lock_renew_failure=42)  # type: ignore[arg-type]
    with rb.AutoLockRenewer(on_lock_renew_failure=failures) as renewer:
        with namespace.get_queue_receiver(queue_name, receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE) as deleting:
            with pytest.raises(rb.errors.MessageAlreadySettled, match="RECEIVE_AND_DELETE"):
                renewer.register(deleting, receive(deleting, 1)[0])
        with namespace.get_queue_receiver(queue_name) as first, namespace.get_queue_receiver(queue_name) as second:
            settled = receive(first, 1)[0]
            first.complete_message(settled)
            with pytest.raises(rb.errors.MessageAlreadySettled, match="already settled"):
                renewer.register(first, settled)
            with pytest.raises(rb.errors.MessageAlreadySettled, match="peeked"):
                renewer.register(first, first.peek_messages(1)[0])
            with pytest.raises(rb.errors.InvalidArgumentError, match="must be a ray_broker Receiver"):
                renewer.register("receiver", settled)  # type: ignore[arg-type]
            with pytest.raises(rb.errors.InvalidArgumentError, match="ReceivedMessage or a ReceiverSession"):
                renewer.register(first, "message")  # type: ignore[arg-type]
            theirs = receive(second, 1)[0]
            with pytest.raises(rb.errors.InvalidOperationError, match="another receiver"):
                renewer.register(first, theirs)
            with pytest.raises(rb.errors.InvalidArgumentError, match="positive, finite"):
                renewer.register(second, theirs, max_lock_renewal_duration=-1)
            renewer.register(second, theirs)
        with pytest.raises(rb.errors.InvalidOperationError, match="closed"):
            renewer.register(second, theirs)
        wait_until(lambda: len(renewer._book) == 0, timeout=5)
    assert failures.calls == []
    namespace.delete_queue(queue_name)
