"""The asyncio client on real Ray: lifecycle, management, messaging, sessions, lock renewal,
pickling into tasks, and sync senders with async receivers in Ray actors."""
from __future__ import annotations

import asyncio
import pickle
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator

import pytest
import ray

import ray_broker as rb
import ray_broker.aio as rba


@pytest.fixture(params=["direct", "relay"])
async def ans(request: pytest.FixtureRequest, namespace: rb.Namespace) -> AsyncIterator[rba.Namespace]:
    """An async handle to the shared namespace, straight to the partitions or relayed through the
    gateway, closed after the test."""
    async with rba.Namespace(namespace.config, relay=request.param == "relay") as handle:
        yield handle


async def send(ns: rba.Namespace, queue: str, *messages: rb.Message) -> None:
    async with ns.get_queue_sender(queue) as sender:
        await sender.send_messages(list(messages))


async def receive(receiver: rba.Receiver, count: int, wait: float = 5) -> list[rb.ReceivedMessage]:
    """Exactly `count` messages, not settled (several receive calls if need be)."""
    got: list[rb.ReceivedMessage] = []
    while len(got) < count:
        batch = await receiver.receive_messages(count - len(got), max_wait_time=wait)
        assert batch, f"only {len(got)} of {count} messages arrived"
        got.extend(batch)
    return got


async def test_start_manage_and_stop_a_namespace(tmp_path: Any, ray_instance: None) -> None:
    name = f"aio-{uuid.uuid4().hex[:8]}"
    ns = await rba.start(name, sku="premium", partitions=2, data_dir=str(tmp_path), durability="memory")
    try:
        assert (ns.name, ns.partition_count, type(ns)) == (name, 2, rba.Namespace)
        assert (await rba.start(name)).config == ns.config
        assert (await rba.connect(name)).config == ns.config
        created = await ns.create_queue("orders", enable_partitioning=True, max_delivery_count=3,
                                        lock_duration=timedelta(seconds=30))
        assert (created.name, created.max_delivery_count, created.lock_duration) == ("orders", 3, timedelta(seconds=30))
        await ns.create_queue("audit")
        with pytest.raises(rb.errors.MessagingEntityAlreadyExistsError):
            await ns.create_queue("orders")
        with pytest.raises(rb.errors.InvalidArgumentError, match="unknown queue option"):
            await ns.create_queue("bad", colour="blue")  # type: ignore[call-arg]
        assert [q.name for q in await ns.list_queues()] == ["audit", "orders"]
        properties = await ns.get_queue("orders")
        properties.max_delivery_count = 5
        assert (await ns.update_queue(properties)).max_delivery_count == 5
        assert (await ns.update_queue("orders", user_metadata="team a")).user_metadata == "team a"
        await send(ns, "orders", *(rb.Message(f"m{i}") for i in range(4)))
        runtime = await ns.get_queue_runtime_properties("orders")
        assert (runtime.active_message_count, runtime.availability, len(runtime.partitions)) == (4, "Available", 2)
        await ns.delete_queue("audit")
        with pytest.raises(rb.errors.MessagingEntityNotFoundError):
            await ns.get_queue("audit")
    finally:
        await rba.stop(name, delete_data=True)
    with pytest.raises(rb.errors.NamespaceNotRunningError, match="ray_broker.aio.start"):
        await rba.connect(name)


async def test_send_receive_complete_with_async_for_and_batches(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True)
    async with ans.get_queue_sender(queue_name) as sender:
        batch = await sender.create_message_batch()
        for i in range(20):
            batch.add_message(rb.Message(f"b{i}"))
        await sender.send_messages(batch)
        await sender.send_messages(rb.Message("single", application_properties={"n": 1}))
    bodies = []
    async with ans.get_queue_receiver(queue_name, max_wait_time=2, prefetch_count=5) as receiver:
        async for message in receiver:
            bodies.append(message.body)
            await receiver.complete_message(message)
        with pytest.raises(rb.errors.MessageAlreadySettled):
            await receiver.complete_message(message)
    assert sorted(bodies) == sorted([f"b{i}".encode() for i in range(20)] + [b"single"])
    assert (await ans.get_queue_runtime_properties(queue_name)).total_message_count == 0
    with pytest.raises(rb.errors.InvalidOperationError, match="closed"):
        await sender.send_messages(rb.Message("late"))
    await ans.delete_queue(queue_name)


async def test_several_batches_in_one_send(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True)
    async with ans.get_queue_sender(queue_name) as sender:
        batches = [[rb.Message(f"{b}-{i}", partition_key=f"k{i % 2}") for i in range(10)] for b in range(3)]
        await sender.send_message_batches(batches + [rb.Message("free")])
    async with ans.get_queue_receiver(queue_name, max_wait_time=2) as receiver:
        got = await receive(receiver, 31)
        for message in got:
            await receiver.complete_message(message)
    assert sorted(str(m) for m in got) == sorted([f"{b}-{i}" for b in range(3) for i in range(10)] + ["free"])
    await ans.delete_queue(queue_name)


async def test_a_settlement_is_sent_by_the_loop_without_another_call(
        ans: rba.Namespace, namespace: rb.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name)
    await send(ans, queue_name, rb.Message("one"))
    async with ans.get_queue_receiver(queue_name) as receiver:
        await receiver.complete_message((await receive(receiver, 1))[0])
        await asyncio.sleep(0.5)
        assert namespace.get_queue_runtime_properties(queue_name).active_message_count == 0
    await ans.delete_queue(queue_name)


async def test_abandon_defer_dead_letter_and_the_dead_letter_queue(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True)
    await send(ans, queue_name, *(rb.Message(f"m{i}", partition_key=f"k{i}") for i in range(6)))
    async with ans.get_queue_receiver(queue_name) as receiver:
        abandoned, deferred_a, deferred_b, dead, renewed, kept = sorted(await receive(receiver, 6),
                                                                        key=lambda m: m.body)
        await receiver.abandon_message(abandoned)
        await receiver.defer_message(deferred_a)
        await receiver.defer_message(deferred_b)
        await receiver.dead_letter_message(dead, reason="Invalid", error_description="bad payload")
        assert await receiver.renew_message_lock(renewed) > datetime.now(timezone.utc) + timedelta(seconds=50)
        await receiver.complete_message(renewed)
        await receiver.complete_message(kept)
        again = (await receive(receiver, 1))[0]
        assert (again.body, again.delivery_count) == (abandoned.body, 2)
        await receiver.complete_message(again)
        assert await receiver.receive_messages(5, max_wait_time=1) == []
        found = await receiver.receive_deferred_messages([deferred_a.sequence_number, deferred_b.sequence_number])
        assert sorted(m.body for m in found) == [deferred_a.body, deferred_b.body]
        assert all(m.state == rb.MessageState.DEFERRED for m in found)
        for message in found:
            await receiver.complete_message(message)
    runtime = await ans.get_queue_runtime_properties(queue_name)
    assert (runtime.active_message_count, runtime.dead_letter_message_count) == (0, 1)
    async with ans.get_queue_receiver(f"{queue_name}/$deadletterqueue") as dlq:
        letter = (await receive(dlq, 1))[0]
        assert (letter.body, letter.dead_letter_reason, letter.dead_letter_error_description) == (
            dead.body, "Invalid", "bad payload")
        await dlq.abandon_message(letter)
    async with ans.get_queue_receiver(queue_name, sub_queue=rb.SubQueue.DEAD_LETTER) as dlq:
        await dlq.complete_message((await receive(dlq, 1))[0])
    assert (await ans.get_queue_runtime_properties(queue_name)).total_message_count == 0
    await ans.delete_queue(queue_name)


async def test_peek_scheduling_and_cancelling(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True)
    async with ans.get_queue_sender(queue_name) as sender:
        for i in range(4):
            await sender.send_messages([rb.Message(f"{i}-{j}") for j in range(3)])
        later = await sender.schedule_messages([rb.Message("later") for _ in range(2)],
                                               datetime.now(timezone.utc) + timedelta(hours=1))
        await sender.schedule_messages(rb.Message("soon"), datetime.now(timezone.utc) + timedelta(seconds=8))
        assert (await ans.get_queue_runtime_properties(queue_name)).scheduled_message_count == 3
        await sender.cancel_scheduled_messages(later)
        with pytest.raises(rb.errors.MessageNotFoundError):
            await sender.cancel_scheduled_messages(later[0])
    async with ans.get_queue_receiver(queue_name, receive_mode=rb.ReceiveMode.RECEIVE_AND_DELETE) as receiver:
        pages = [await receiver.peek_messages(5) for _ in range(3)]
        peeked = [m for page in pages for m in page]
        seqs = [m.sequence_number for m in peeked]
        assert seqs == sorted(seqs) and all(m.lock_token is None for m in peeked)
        assert {m.body for m in peeked} - {b"soon"} == {f"{i}-{j}".encode() for i in range(4) for j in range(3)}
        first = next(m.sequence_number for m in peeked if m.body == b"0-0")  # "0-1" is next on its partition
        bounded = await receiver.peek_messages(5, sequence_number=first, end_sequence_number=first + 2)
        assert [m.body for m in bounded] == [b"0-0", b"0-1"]
        taken = await receive(receiver, 12)
        soon = await receiver.receive_messages(1, max_wait_time=30)
        assert [m.body for m in soon] == [b"soon"] and len(taken) == 12
        with pytest.raises(rb.errors.MessageAlreadySettled):
            await receiver.complete_message(soon[0])
    assert (await ans.get_queue_runtime_properties(queue_name)).total_message_count == 0
    await ans.delete_queue(queue_name)


async def test_sessions_with_state(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True, requires_session=True)
    sessions = ["s0", "s1", "s2"]
    await send(ans, queue_name, *(rb.Message(f"{s}:{n}", session_id=s) for n in range(3) for s in sessions))
    receiver = ans.get_queue_receiver(queue_name, session_id="s1")
    assert receiver.session is not None and receiver.session.locked_until_utc is None
    async with receiver:
        session = receiver.session
        assert session.session_id == "s1" and session.locked_until_utc is not None
        with pytest.raises(rb.errors.SessionCannotBeLockedError):
            async with ans.get_queue_receiver(queue_name, session_id="s1", max_wait_time=1):
                pass
        got = await receive(receiver, 3)
        assert [m.body for m in got] == [f"s1:{n}".encode() for n in range(3)]
        for message in got:
            await receiver.complete_message(message)
        assert await session.get_state() is None
        await session.set_state("checkpoint")
        assert await session.get_state() == b"checkpoint"
        before = session.locked_until_utc
        assert await session.renew_lock() >= before
    lazy = ans.get_queue_receiver(queue_name, session_id=rb.NEXT_AVAILABLE_SESSION, max_wait_time=5)
    assert lazy.session is not None and lazy.session.session_id is None
    assert await lazy.session.get_state() is None
    assert lazy.session.session_id in {"s0", "s2"}
    await lazy.close()
    async with ans.get_queue_receiver(queue_name, session_id="s1") as again:
        assert again.session is not None and await again.session.get_state() == b"checkpoint"
    await ans.delete_queue(queue_name)


async def test_closing_releases_prefetched_messages_without_counting_a_delivery(
        ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, enable_partitioning=True)
    await send(ans, queue_name, *(rb.Message(f"m{i}") for i in range(40)))
    async with ans.get_queue_receiver(queue_name, prefetch_count=30) as receiver:
        first = await receive(receiver, 1)
        await receiver.complete_message(first[0])
    async with await rba.connect(ans.name) as other, other.get_queue_receiver(queue_name) as receiver:
        rest = await receive(receiver, 39)
        assert all(m.delivery_count == 1 for m in rest), [m.delivery_count for m in rest]
        for message in rest:
            await receiver.complete_message(message)
    await ans.delete_queue(queue_name)


async def test_closing_the_namespace_closes_its_clients(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name)
    handle = await rba.connect(ans.name)
    sender, receiver = handle.get_queue_sender(queue_name), handle.get_queue_receiver(queue_name)
    await handle.close()
    with pytest.raises(rb.errors.InvalidOperationError, match="sender .* is closed"):
        await sender.send_messages(rb.Message("x"))
    with pytest.raises(rb.errors.InvalidOperationError, match="receiver .* is closed"):
        await receiver.receive_messages()
    async with handle, handle.get_queue_sender(queue_name) as again:  # a closed handle opens again
        await again.send_messages(rb.Message("after reopening"))
    assert (await ans.get_queue_runtime_properties(queue_name)).active_message_count == 1
    await ans.delete_queue(queue_name)


async def test_the_async_lock_renewer_keeps_short_locks(ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, lock_duration=timedelta(seconds=2))
    await send(ans, queue_name, rb.Message("kept"), rb.Message("left"))
    failures: list[tuple[Any, BaseException]] = []

    async def failed(renewable: Any, error: BaseException) -> None:
        failures.append((renewable, error))

    async with rba.AutoLockRenewer(on_lock_renew_failure=failed) as renewer:
        async with ans.get_queue_receiver(queue_name) as receiver:
            kept, left = sorted(await receive(receiver, 2), key=lambda m: m.body != b"kept")
            first_lock = kept.locked_until_utc
            assert first_lock is not None
            renewer.register(receiver, kept)
            with pytest.raises(rb.errors.InvalidArgumentError, match="ray_broker.aio Receiver"):
                renewer.register(object(), left)  # type: ignore[arg-type]
            await asyncio.sleep(5)
            assert kept.locked_until_utc is not None and kept.locked_until_utc > first_lock + timedelta(seconds=2)
            await receiver.complete_message(kept)
            await receiver.flush()
            with pytest.raises(rb.errors.MessageLockLostError):
                await receiver.complete_message(left)
        assert failures == []
        await ans.create_queue(f"{queue_name}-s", requires_session=True, lock_duration=timedelta(seconds=2))
        await send(ans, f"{queue_name}-s", rb.Message("in session", session_id="s1"))
        async with ans.get_queue_receiver(f"{queue_name}-s", session_id="s1") as receiver:
            assert receiver.session is not None
            renewer.register(receiver, receiver.session)
            message = (await receive(receiver, 1))[0]
            await asyncio.sleep(5)
            with pytest.raises(rb.errors.SessionCannotBeLockedError):
                async with ans.get_queue_receiver(f"{queue_name}-s", session_id="s1", max_wait_time=1):
                    pass
            await receiver.session.set_state(b"still mine")
            await receiver.complete_message(message)
            await receiver.flush()
        await ans.delete_queue(f"{queue_name}-s")
        await send(ans, queue_name, rb.Message("orphan"))
        async with ans.get_queue_receiver(queue_name) as receiver:
            orphan = (await receive(receiver, 1))[0]
            renewer.register(receiver, orphan)
            await ans.delete_queue(queue_name)
            for _ in range(50):
                if failures:
                    break
                await asyncio.sleep(0.1)
    assert [(renewable, type(error)) for renewable, error in failures] == [
        (orphan, rb.errors.MessagingEntityNotFoundError)]
    assert renewer._task is not None and renewer._task.done()


async def test_an_async_receiver_given_a_renewer_registers_and_a_lapsed_lock_is_reported(
        ans: rba.Namespace, queue_name: str) -> None:
    await ans.create_queue(queue_name, lock_duration=timedelta(seconds=2))
    await send(ans, queue_name, rb.Message("auto"))
    failures: list[tuple[Any, BaseException]] = []

    async def failed(renewable: Any, error: BaseException) -> None:
        failures.append((renewable, error))

    async with rba.AutoLockRenewer(max_lock_renewal_duration=3, on_lock_renew_failure=failed) as renewer:
        with pytest.raises(rb.errors.InvalidArgumentError, match="rb.AutoLockRenewer with the sync"):
            ans.get_queue_receiver(queue_name, auto_lock_renewer=rb.AutoLockRenewer())
        async with ans.get_queue_receiver(queue_name, auto_lock_renewer=renewer) as receiver:
            message = (await receive(receiver, 1))[0]
            first_lock = message.locked_until_utc
            assert first_lock is not None and renewer._book.holds(message)
            for _ in range(100):   # renewed for 3 s, then reported once the lock has run out
                if failures:
                    break
                await asyncio.sleep(0.1)
            assert message.locked_until_utc is not None and message.locked_until_utc > first_lock
            with pytest.raises(rb.errors.MessageLockLostError):
                await receiver.complete_message(message)
    assert [(renewable, type(error)) for renewable, error in failures] == [(message, rb.errors.MessageLockLostError)]
    assert "max_lock_renewal_duration (3 s)" in str(failures[0][1])
    await ans.delete_queue(queue_name)


async def test_listings_iterate_with_async_for_and_await_to_a_list(ans: rba.Namespace, queue_name: str) -> None:
    topic = f"{queue_name}-t"
    await ans.create_queue(queue_name)
    await ans.create_topic(topic)
    await ans.create_subscription(topic, "s1", rule=rb.SqlFilter("user.n > 1"))
    assert queue_name in [q.name async for q in ans.list_queues()]
    assert queue_name in [q.name for q in await ans.list_queues()]
    assert topic in [t.name async for t in ans.list_topics()]
    assert [s.name async for s in ans.list_subscriptions(topic)] == ["s1"]
    assert [r.name async for r in ans.list_rules(topic, "s1")] == ["$Default"]
    assert [r.name for r in await ans.list_rules(topic, "s1")] == ["$Default"]
    with pytest.raises(rb.errors.InvalidArgumentError, match=r"\$"):
        ans.list_subscriptions("no$topic")   # checked at the call, before anything is awaited
    await ans.delete_topic(topic)
    await ans.delete_queue(queue_name)


@ray.remote(num_cpus=0.25)
def send_with_async_handle(ns: rba.Namespace, queue: str, bodies: list[str]) -> str:
    """In a Ray task: send through the async handle it was given, on a loop of its own."""
    async def main() -> str:
        async with ns, ns.get_queue_sender(queue) as sender:
            await sender.send_messages([rb.Message(b) for b in bodies])
        return type(ns).__name__
    return asyncio.run(main())


@ray.remote(num_cpus=0.25)
def receive_with_sync_handle(ns: rba.Namespace, queue: str, count: int) -> list[bytes]:
    """In a Ray task: receive through a sync handle made from the async one it was given."""
    with rb.Namespace(ns.config) as sync_ns, sync_ns.get_queue_receiver(queue) as receiver:
        got: list[bytes] = []
        while len(got) < count:
            batch = receiver.receive_messages(count - len(got), max_wait_time=10)
            assert batch, f"only {len(got)} of {count} arrived"
            for message in batch:
                receiver.complete_message(message)
                got.append(message.body)
    return got


def test_an_async_handle_pickles_into_tasks_and_serves_any_loop(namespace: rb.Namespace, queue_name: str) -> None:
    ns = rba.Namespace(namespace.config)
    copy = pickle.loads(pickle.dumps(ns))
    assert (type(copy), copy.config, copy.relay) == (rba.Namespace, ns.config, False)
    asyncio.run(ns.create_queue(queue_name, enable_partitioning=True))
    assert ray.get(send_with_async_handle.remote(ns, queue_name, [f"m{i}" for i in range(10)]), timeout=120) == \
        "Namespace"
    assert sorted(ray.get(receive_with_sync_handle.remote(ns, queue_name, 10), timeout=120)) == sorted(
        f"m{i}".encode() for i in range(10))
    relay = rba.Namespace(namespace.config, relay=True)

    async def round_trip(body: str) -> list[bytes]:
        await send(relay, queue_name, rb.Message(body))
        async with relay.get_queue_receiver(queue_name) as receiver:
            got = await receive(receiver, 1)
            await receiver.complete_message(got[0])
        return [m.body for m in got]

    assert asyncio.run(round_trip("first loop")) == [b"first loop"]
    assert asyncio.run(round_trip("second loop")) == [b"second loop"]
    assert asyncio.run(ns.get_queue_runtime_properties(queue_name)).total_message_count == 0
    namespace.delete_queue(queue_name)


@ray.remote(num_cpus=0.25)
def sync_sender(ns: rb.Namespace, queue: str, task: int, batches: int, batch_size: int) -> int:
    """In a Ray task: send `batches` batches with the sync client."""
    with ns.get_queue_sender(queue) as sender:
        for b in range(batches):
            sender.send_messages([rb.Message(f"{task}/{b}/{i}") for i in range(batch_size)])
    return batches * batch_size


@ray.remote(num_cpus=0)
class AsyncConsumer:
    """A Ray actor that receives with the async client until told to stop and the queue is quiet."""

    def __init__(self) -> None:
        self.stopping = False

    async def consume(self, ns: rb.Namespace, queue: str) -> list[bytes]:
        got: list[bytes] = []
        async with rba.Namespace(ns.config) as handle, \
                handle.get_queue_receiver(queue, prefetch_count=20) as receiver:
            while True:
                batch = await receiver.receive_messages(50, max_wait_time=1)
                for message in batch:
                    got.append(message.body)
                    await receiver.complete_message(message)
                if not batch and self.stopping:
                    return got

    async def stop(self) -> None:
        self.stopping = True


def test_sync_task_senders_and_async_actor_receivers_see_each_message_once(
        namespace: rb.Namespace, queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    consumers = [AsyncConsumer.remote() for _ in range(4)]
    consuming = [c.consume.remote(namespace, queue_name) for c in consumers]
    sent = ray.get([sync_sender.remote(namespace, queue_name, t, 5, 20) for t in range(8)], timeout=300)
    ray.get([c.stop.remote() for c in consumers], timeout=60)
    received = [body for bodies in ray.get(consuming, timeout=300) for body in bodies]
    expected = {f"{t}/{b}/{i}".encode() for t in range(8) for b in range(5) for i in range(20)}
    assert sum(sent) == len(expected) == 800
    assert len(received) == len(expected) and set(received) == expected, "every message exactly once"
    assert namespace.get_queue_runtime_properties(queue_name).total_message_count == 0
    namespace.delete_queue(queue_name)
