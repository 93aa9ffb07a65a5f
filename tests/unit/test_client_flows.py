"""Client flows without Ray: the requests senders, receivers and namespaces make, what their
replies become, and the same flow driven sync and async."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

from ray_broker import Message
from ray_broker.client import management
from ray_broker.client.core import MAX_RECEIVE_COUNT, Flush, SettlementBuffer, receive_target
from ray_broker.client.flow import Ask, Call, Route, drive, request, run, run_async
from ray_broker.client.handle import NamespaceBase
from ray_broker.client.receiver_flows import ReceiverBase, SessionBase, check_renewable
from ray_broker.client.sender_flows import SenderBase
from ray_broker.config import NamespaceConfig
from ray_broker.errors import (
    InvalidArgumentError,
    InvalidOperationError,
    MessageAlreadySettled,
    MessageLockLostError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusError,
)
from ray_broker.routing.planner import batch_number, spread_start
from ray_broker.router_requests import ReceiveReply, ReceiveRequest, RouterRequest, SendRequest
from ray_broker.sku import SKUS
from ray_broker.wire import HeldSession, Settlement


STANDARD = SKUS["standard"]
PAYLOAD = Message("x").to_envelope()["payload"]


class FakeLink:
    """A link that answers each management call with `replies[operation](*args)` and each router
    request with `replies[request.OPERATION](*request)`, and records them."""

    def __init__(self, **replies: Callable[..., Any]) -> None:
        self.replies = replies
        self.calls: list[Ask] = []

    def call(self, operation: str, *args: Any, timeout: float) -> Any:
        self.calls.append(Call(operation, args, timeout))
        return self.replies[operation](*args)

    async def call_async(self, operation: str, *args: Any, timeout: float) -> Any:
        await asyncio.sleep(0)
        return self.call(operation, *args, timeout=timeout)

    def route(self, request: RouterRequest, *, timeout: float) -> Any:
        self.calls.append(Route(request, timeout))
        return self.replies[request.OPERATION](*request)

    async def route_async(self, request: RouterRequest, *, timeout: float) -> Any:
        await asyncio.sleep(0)
        return self.route(request, timeout=timeout)

    def operations(self) -> list[str]:
        return [c.request.OPERATION if isinstance(c, Route) else c.operation for c in self.calls]


def record(seq: int, *, lock_s: float = 60.0, session_id: str | None = None) -> dict[str, Any]:
    """A locked message record as a partition returns it."""
    return {"payload": PAYLOAD, "sequence_number": seq, "lock_token": seq.to_bytes(16, "big"),
            "locked_until": time.time() + lock_s, "delivery_count": 1, "session_id": session_id}


def arguments(ask: Ask) -> dict[str, Any]:
    """A router request's fields by name."""
    assert isinstance(ask, Route), f"{ask} is no router request"
    return ask.request._asdict()


def receiver(link: FakeLink, entity: str = "q", **kwargs: Any) -> ReceiverBase:
    args: dict[str, Any] = {"receive_mode": "peek_lock", "sub_queue": None, "session_id": None,
                            "prefetch_count": 0, "max_wait_time": None, **kwargs}
    return ReceiverBase(link, STANDARD, receive_target(entity, **args))


def receive_reply(*records: dict[str, Any]) -> Callable[..., ReceiveReply]:
    """A `receive` answer with `records`, settling every carried settlement."""
    return lambda *args: ReceiveReply(list(records), [None] * len(ReceiveRequest(*args).settlements))


# ---------------------------------------------------------------------- drivers

def test_a_flow_runs_the_same_sync_and_async() -> None:
    def flow() -> Any:
        first = yield request("a", 1, timeout=5.0)
        try:
            yield request("boom", timeout=5.0)
        except KeyError:
            pass
        return first + (yield request("a", 2, timeout=5.0))

    def boom() -> None:
        raise KeyError("no")

    link = FakeLink(a=lambda n: n * 10, boom=boom)
    assert run(link, flow()) == 30
    assert asyncio.run(run_async(link, flow())) == 30
    assert link.operations() == ["a", "boom", "a"] * 2


def test_an_error_the_flow_does_not_handle_propagates() -> None:
    def flow() -> Any:
        yield request("boom", timeout=1.0)

    def boom() -> None:
        raise OperationTimeoutError("late")

    with pytest.raises(OperationTimeoutError):
        run(FakeLink(boom=boom), flow())


def test_a_flow_that_needs_no_call_returns_at_once() -> None:
    sender = SenderBase(FakeLink(), STANDARD, "q")
    assert drive(sender._schedule([], datetime(2030, 1, 1, tzinfo=timezone.utc), 5),
                 lambda call: pytest.fail(f"no call expected, got {call}")) == []


# ---------------------------------------------------------------------- receivers

def test_a_receive_carries_buffered_settlements() -> None:
    link = FakeLink(receive=receive_reply(record(1), record(2)))
    r = receiver(link)
    first, second = run(link, r._receive(2, 1))
    assert r._settle(first, "complete") is Flush.LATER
    assert r._settle(second, "dead_letter", "why", "details") is Flush.NONE
    with pytest.raises(MessageAlreadySettled):
        r._settle(first, "complete")
    run(link, r._receive(1, 0))
    carried = arguments(link.calls[-1])["settlements"]
    assert carried == [Settlement("complete", 1, (1).to_bytes(16, "big")),
                       Settlement("dead_letter", 2, (2).to_bytes(16, "big"), "why", "details")]
    assert len(r._settlements) == 0


def test_a_lock_close_to_expiry_is_settled_now() -> None:
    link = FakeLink(receive=receive_reply(record(1, lock_s=1.0)))
    r = receiver(link)
    message = run(link, r._receive(1, 1))[0]
    assert r._settle(message, "complete") is Flush.NOW


def test_an_expired_lock_is_lost_at_once_and_a_full_buffer_flushes() -> None:
    link = FakeLink(receive=receive_reply(record(1, lock_s=-1.0)))
    r = receiver(link)
    with pytest.raises(MessageLockLostError):
        r._settle(run(link, r._receive(1, 1))[0], "complete")
    buffer = SettlementBuffer()
    decisions = [buffer.add(*settled_message(seq), time.time() + 60, time.time()) for seq in range(buffer.MAX_PENDING + 1)]
    assert decisions[0] is Flush.LATER and set(decisions[1:-1]) == {Flush.NONE} and decisions[-1] is Flush.NOW


def test_completing_a_whole_receive_page_waits_for_the_next_receive_to_carry_it() -> None:
    page = [record(seq) for seq in range(1, MAX_RECEIVE_COUNT + 1)]
    link = FakeLink(receive=receive_reply(*page))
    r = receiver(link)
    messages = run(link, r._receive(MAX_RECEIVE_COUNT, 1))
    decisions = {r._settle(message, "complete") for message in messages}
    assert Flush.NOW not in decisions
    run(link, r._receive(1, 1))
    assert link.operations() == ["receive", "receive"]
    settlements = arguments(link.calls[-1])["settlements"]
    assert [op.sequence_number for op in settlements] == list(range(1, MAX_RECEIVE_COUNT + 1))


def settled_message(seq: int) -> tuple[Any, Settlement]:
    link = FakeLink(receive=receive_reply(record(seq)))
    message = run(link, receiver(link)._receive(1, 1))[0]
    return message, Settlement("complete", seq, seq.to_bytes(16, "big"))


def test_an_older_copy_of_a_message_is_not_settled_with_the_new_lock() -> None:
    link = FakeLink(receive=receive_reply(record(7, lock_s=-1.0)))
    r = receiver(link)
    old = run(link, r._receive(1, 1))[0]
    link.replies["receive"] = receive_reply(record(7))
    new = run(link, r._receive(1, 1))[0]
    with pytest.raises(MessageLockLostError):
        r._settle(old, "complete")
    assert r._settle(new, "complete") is Flush.LATER


def test_a_failed_carrying_receive_is_reported_by_the_next_operation() -> None:
    link = FakeLink(receive=receive_reply(record(1)))
    r = receiver(link)
    r._settle(run(link, r._receive(1, 1))[0], "complete")

    def down(*args: Any) -> None:
        raise OperationTimeoutError("gateway down")

    link.replies["receive"] = down
    with pytest.raises(OperationTimeoutError):
        run(link, r._receive(1, 1))
    with pytest.raises(OperationTimeoutError, match="gateway down"):
        run(link, r._receive(1, 1))


def test_an_interrupted_carrying_receive_leaves_an_unknown_outcome() -> None:
    link = FakeLink(receive=receive_reply(record(1)))
    r = receiver(link)
    r._settle(run(link, r._receive(1, 1))[0], "complete")

    async def cancelled() -> None:
        task = asyncio.ensure_future(run_async(link, r._receive(1, 1)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    with pytest.raises(ServiceBusError, match="1 settlements .* interrupted"):
        r._settlements.raise_deferred()


def test_flush_failures_are_kept_and_peek_continues() -> None:
    def refuse(entity: str, subq: int, session: Any, ops: list[Any], timeout: float) -> list[Any]:
        return [MessageLockLostError("lost")] * len(ops)

    link = FakeLink(receive=receive_reply(record(1)), settle=refuse,
                    peek=lambda entity, subq, session, start, count, end: [record(start), record(start + 1)])
    r = receiver(link)
    r._settle(run(link, r._receive(1, 1))[0], "complete")
    with pytest.raises(MessageLockLostError):
        run(link, r._flush())
    assert [m.sequence_number for m in run(link, r._peek(2, 5))] == [5, 6]
    assert [m.sequence_number for m in run(link, r._peek(2, 0))] == [7, 8]


def test_renewing_a_message_updates_its_lock() -> None:
    until = time.time() + 120
    link = FakeLink(receive=receive_reply(record(1)), settle=lambda *args: [until])
    r = receiver(link)
    message = run(link, r._receive(1, 1))[0]
    assert run(link, r._renew_message_lock(message, send_buffered=False)) == until
    assert message.locked_until == pytest.approx(until, abs=1e-5) and message.locked_until_utc is not None
    assert message.locked_until_utc.timestamp() == pytest.approx(until, abs=1e-5)


def test_a_session_receiver_locks_its_session_first_and_releases_it_on_close() -> None:
    lock = HeldSession("s1", b"t", 3, time.time() + 60)
    link = FakeLink(accept_session=lambda entity, wanted, wait: lock,
                    receive=receive_reply(record(4, session_id="s1")),
                    session_call=lambda entity, held, operation, args: {"renew_session": time.time() + 90}.get(operation),
                    close_receiver=lambda key: 0)
    r = receiver(link, session_id="s1")
    session = SessionBase(r)
    assert (session.session_id, session.locked_until_utc) == ("s1", None)
    message = run(link, r._receive(1, 1))[0]
    assert link.operations() == ["accept_session", "receive"]
    assert arguments(link.calls[-1])["session"] == HeldSession("s1", b"t", 3, lock.locked_until, seen=0)
    assert session.locked_until_utc is not None
    before = session.locked_until_utc
    run(link, r._renew_session(send_buffered=True))
    assert session.locked_until_utc > before
    r._settle(message, "complete")
    link.replies["settle"] = lambda *args: [None]
    run(link, r._close())
    assert link.operations()[-3:] == ["settle", "close_receiver", "session_call"]
    assert arguments(link.calls[-1])["operation"] == "release_session"
    with pytest.raises(InvalidOperationError, match="closed"):
        check_renewable(r, session)


def test_renewal_checks_name_what_cannot_be_renewed() -> None:
    link = FakeLink(receive=receive_reply(record(1)))
    first, second = receiver(link), receiver(link)
    message = run(link, first._receive(1, 1))[0]
    with pytest.raises(InvalidOperationError, match="another receiver"):
        check_renewable(second, message)
    session_receiver = receiver(link, session_id="s1")
    with pytest.raises(InvalidOperationError, match="not locked its session"):
        check_renewable(session_receiver, SessionBase(session_receiver))


# ---------------------------------------------------------------------- senders and management

def test_sender_flows() -> None:
    link = FakeLink(send=lambda entity, envelopes, wait, tag: list(range(len(envelopes))),
                    cancel_scheduled=lambda entity, seqs, wait: None)
    sender = SenderBase(link, STANDARD, "q")
    run(link, sender._send([Message("a"), Message("b")], None, None))
    assert run(link, sender._schedule(Message("a"), datetime(2030, 1, 1, tzinfo=timezone.utc), 5)) == [0]
    run(link, sender._cancel_scheduled([], 5))
    run(link, sender._cancel_scheduled(3, 5))
    assert link.operations() == ["send", "send", "cancel_scheduled"]
    tags = [arguments(c)["producer"] for c in link.calls if isinstance(c.request, SendRequest)]
    assert tags == [(sender._producer, 0), (sender._producer, 1)], "each send call carries the next producer tag"
    with pytest.raises(InvalidArgumentError, match="ns.transaction()"):
        run(link, sender._send(Message("a"), None, object()))


@pytest.mark.parametrize(("sticky_batches", "calls", "steps"), [(1, [0, 1, 2, 3], [0, 1, 2, 3]),
                                                             (4, [0, 4, 5, 6], [0, 1, 1, 1])])
def test_a_send_beside_one_in_flight_goes_to_another_partition(sticky_batches: int, calls: list[int],
                                                               steps: list[int]) -> None:
    release = asyncio.Event()

    async def answer(request: RouterRequest, *, timeout: float) -> Any:
        link.calls.append(Route(request, timeout))
        if len(link.calls) == 1:
            await release.wait()
        return [1]

    async def sends() -> None:
        first = asyncio.ensure_future(run_async(link, sender._send(Message("a"), None, None)))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(run_async(link, sender._send(Message("b"), None, None)))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, second)
        await run_async(link, sender._send(Message("c"), None, None))
        await run_async(link, sender._send(Message("d"), None, None))

    link = FakeLink()
    link.route_async = answer  # type: ignore[method-assign]
    sender = SenderBase(link, STANDARD, "q", sticky_batches=sticky_batches, partition_count=16)
    asyncio.run(sends())
    numbers = [arguments(c)["producer"][1] for c in link.calls]
    assert numbers == [batch_number(call, sticky_batches, 16) for call in calls], \
        "the concurrent send takes the next partition (a sticky sender's next run); sends one after another keep on"
    partitions = [spread_start((sender._producer, n), 16) for n in numbers]
    assert [(k - partitions[0]) % 16 for k in partitions] == steps, "partitions after the first send's"
    assert sender._in_flight == 0


def test_a_namespace_makes_round_robin_senders_unless_asked_for_sticky_batches() -> None:
    class Handle(NamespaceBase[Any, Any, Any]):
        sender_class = SenderBase

    link = FakeLink(send=lambda entity, envelopes, wait, tag: [1])
    handle = Handle(NamespaceConfig("n", "standard", 16, None, "memory", 1, None), link, relay=False)
    senders = [handle.get_queue_sender("q"), handle.get_topic_sender("t", sticky_batches=3)]
    for sender in senders:
        for n in range(4):
            run(link, sender._send(Message(str(n)), None, None))
    numbers = [arguments(c)["producer"][1] for c in link.calls]
    assert numbers == [0, 1, 2, 3] + [batch_number(call, 3, 16) for call in range(4)]
    for bad in (0, 2.0, False):
        with pytest.raises(InvalidArgumentError, match=f"sticky_batches must be an int >= 1.*got {bad!r}"):
            handle.get_queue_sender("q", sticky_batches=bad)


def test_an_idempotent_send_carries_the_named_producer_tag() -> None:
    link = FakeLink(send=lambda entity, envelopes, wait, tag: list(range(len(envelopes))))
    sender = SenderBase(link, STANDARD, "q")
    run(link, sender._send_idempotent([Message("a"), Message("b")], "sink-1", 64, None))
    run(link, sender._send_idempotent([], "sink-1", 65, None))
    assert [arguments(c)["producer"] for c in link.calls] == [("named:sink-1", 64)], "an empty send makes no call"
    for producer_id, number in (("", 1), (None, 1), ("s", -1), ("s", True), ("s", 1.5)):
        with pytest.raises(InvalidArgumentError):
            run(link, sender._send_idempotent(Message("a"), producer_id, number, None))  # type: ignore[arg-type]


def test_update_queue_sends_only_what_changed() -> None:
    definition = {"name": "q", "kind": "queue", "options": management.normalize_queue_options({})}
    link = FakeLink(definition=lambda name, fresh: definition, list_entities=lambda kind: [definition],
                    update_entity=lambda name, changes, timeout: definition)
    properties = run(link, management.get_queue(STANDARD, "q"))
    properties.max_delivery_count = 11
    run(link, management.update_queue(STANDARD, properties, {}))
    assert link.calls[-1].args[1] == {"max_delivery_count": 11}
    properties.max_message_size_in_kilobytes = 1
    with pytest.raises(InvalidOperationError, match="fixed"):
        run(link, management.update_queue(STANDARD, properties, {}))
    topic = dict(definition, kind="topic")
    link.replies["definition"] = lambda name, fresh: topic
    with pytest.raises(MessagingEntityNotFoundError, match="not a queue"):
        run(link, management.get_queue(STANDARD, "q"))
    assert [q.name for q in run(link, management.list_queues(STANDARD))] == ["q"]


def test_the_client_flows_import_without_ray() -> None:
    modules = ["ray_broker.client.flow", "ray_broker.client.management", "ray_broker.client.sender_flows",
               "ray_broker.client.receiver_flows", "ray_broker.client.renewing", "ray_broker.client.handle"]
    probe = "import sys, importlib\nsys.modules['ray'] = None\nfor m in sys.argv[1:]: importlib.import_module(m)"
    result = subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
