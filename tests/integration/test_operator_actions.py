"""Operator actions on real Ray: purging a queue, a subscription or a dead-letter queue, and
resubmitting dead letters, sync (both client paths) and async."""
from __future__ import annotations

import uuid

import pytest

import ray_broker as rb
import ray_broker.aio as rba
from ray_broker import Message, SubQueue

BOTH_PATHS = True


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def dead_letter(ns: rb.Namespace, entity: str, count: int) -> list[int]:
    """Receive `count` messages of a queue (or subscription path) and dead-letter them; their sequence numbers."""
    seqs: list[int] = []
    with ns.get_queue_receiver(entity) as receiver:
        while len(seqs) < count:
            batch = receiver.receive_messages(count - len(seqs), max_wait_time=5)
            assert batch, f"only {len(seqs)} of {count} messages arrived"
            for message in batch:
                receiver.dead_letter_message(message, reason="bad", error_description="broken")
                seqs.append(message.sequence_number)
    return seqs


def test_purge_empties_a_partitioned_queue_and_leaves_its_dead_letters(namespace: rb.Namespace) -> None:
    q = name("purge")
    namespace.create_queue(q, enable_partitioning=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message(f"m{i}", partition_key=f"k{i % 7}") for i in range(2500)])
    dead_letter(namespace, q, 3)
    assert namespace.purge(q) == 2497
    counts = namespace.get_queue_runtime_properties(q)
    assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 3)
    assert namespace.purge(q, sub_queue=SubQueue.DEAD_LETTER) == 3
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 0
    assert namespace.purge(q) == 0


def test_purge_of_one_subscription_leaves_its_sibling(namespace: rb.Namespace) -> None:
    topic = name("purge-topic")
    namespace.create_topic(topic)
    namespace.create_subscription(topic, "a")
    namespace.create_subscription(topic, "b")
    with namespace.get_topic_sender(topic) as sender:
        sender.send_messages([Message("x"), Message("y")])
    assert namespace.purge(f"{topic}/Subscriptions/a") == 2
    assert namespace.get_subscription_runtime_properties(topic, "a").active_message_count == 0
    assert namespace.get_subscription_runtime_properties(topic, "b").active_message_count == 2
    with pytest.raises(rb.errors.InvalidOperationError, match="topic"):
        namespace.purge(topic)
    with pytest.raises(rb.errors.MessagingEntityNotFoundError):
        namespace.purge(name("missing"))


def test_resubmit_moves_dead_letters_back_keeping_their_properties(namespace: rb.Namespace) -> None:
    q = name("resubmit")
    namespace.create_queue(q)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message("one", subject="s", content_type="text/plain", correlation_id="c",
                                      message_id="m1", application_properties={"k": 1}), Message("two")])
    seqs = dead_letter(namespace, q, 2)
    assert namespace.resubmit_dead_letters(q, sequence_numbers=[seqs[0]]) == 1
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 1
    with namespace.get_queue_receiver(q) as receiver:
        (back,) = receiver.receive_messages(1, max_wait_time=5)
        receiver.complete_message(back)
    assert (bytes(back.body), back.subject, back.content_type, back.correlation_id, back.message_id,
            back.application_properties) == (b"one", "s", "text/plain", "c", "m1", {"k": 1})
    assert back.dead_letter_reason is None and back.sequence_number != seqs[0]
    other = name("resubmit-to")
    namespace.create_queue(other)
    assert namespace.resubmit_dead_letters(q, to=other) == 1
    assert namespace.get_queue_runtime_properties(other).active_message_count == 1
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 0
    assert namespace.resubmit_dead_letters(q) == 0


def test_a_dead_letter_resubmitted_to_a_deduplicating_queue_is_not_dropped_as_its_own_duplicate(
        namespace: rb.Namespace) -> None:
    q = name("resubmit-dedup")
    namespace.create_queue(q, requires_duplicate_detection=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages(Message("once", message_id="seen-before"))
    dead_letter(namespace, q, 1)
    assert namespace.resubmit_dead_letters(q) == 1
    assert namespace.get_queue_runtime_properties(q).dead_letter_message_count == 0
    with namespace.get_queue_receiver(q) as receiver:
        back = receiver.receive_messages(1, max_wait_time=5)
        assert [bytes(m.body) for m in back] == [b"once"], "the copy arrived (its id, seen in the window, is new)"
        assert back[0].message_id != "seen-before"
        receiver.complete_message(back[0])


async def test_async_purge_and_resubmit(namespace: rb.Namespace) -> None:
    q = name("aio-operator")
    namespace.create_queue(q)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message("a"), Message("b"), Message("c")])
    dead_letter(namespace, q, 1)
    async with rba.Namespace(namespace.config) as ans:
        assert await ans.resubmit_dead_letters(q) == 1
        assert await ans.purge(q) == 3
    counts = namespace.get_queue_runtime_properties(q)
    assert (counts.active_message_count, counts.dead_letter_message_count) == (0, 0)


def test_resubmit_by_filter_moves_only_the_dead_letters_it_selects(namespace: rb.Namespace) -> None:
    q = name("resubmit-filter")
    namespace.create_queue(q, enable_partitioning=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message(f"m{i}", partition_key=f"k{i}", subject="order" if i % 2 else "refund",
                                      application_properties={"region": "eu" if i < 4 else "us", "amount": i * 10})
                              for i in range(8)])
    seqs = dead_letter(namespace, q, 8)
    with pytest.raises(rb.errors.RuleSyntaxError):
        namespace.resubmit_dead_letters(q, filter="region = = 'eu'")
    assert namespace.resubmit_dead_letters(q, filter="user.region = 'eu' AND sys.label = 'order'") == 2
    assert namespace.resubmit_dead_letters(q, filter="region = 'nowhere'") == 0
    with namespace.get_queue_receiver(q) as receiver:
        back = sorted(bytes(m.body) for m in receiver.peek_messages(10))
    assert back == [b"m1", b"m3"]
    by_body = {bytes(m.body): m.sequence_number
               for m in namespace.get_queue_receiver(q, sub_queue=SubQueue.DEAD_LETTER).peek_messages(10)}
    assert set(by_body) == {b"m0", b"m2", b"m4", b"m5", b"m6", b"m7"} and set(by_body.values()) <= set(seqs)
    # sequence numbers and a filter together: those of the numbers the filter selects
    picked = [by_body[b"m4"], by_body[b"m5"], by_body[b"m0"]]
    assert namespace.resubmit_dead_letters(q, sequence_numbers=picked, filter="amount >= 40") == 2
    left = {bytes(m.body) for m in namespace.get_queue_receiver(q, sub_queue=SubQueue.DEAD_LETTER).peek_messages(10)}
    assert left == {b"m0", b"m2", b"m6", b"m7"}, "passed-over dead letters stay, receivable again"


def test_peek_messages_with_a_filter_from_a_sequence_number_per_partition(namespace: rb.Namespace) -> None:
    q = name("peek")
    namespace.create_queue(q, enable_partitioning=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message(f"m{i}", partition_key=f"k{i % 5}", application_properties={"n": i})
                              for i in range(600)])
    merged = namespace.peek_messages(q, 1000)
    assert len(merged) == 600
    assert [m.sequence_number for m in merged] == sorted(m.sequence_number for m in merged)
    partition = merged[0].partition_index
    own = [m.sequence_number for m in merged if m.partition_index == partition]
    assert [m.sequence_number for m in namespace.peek_messages(q, 1000, partition=partition)] == own
    assert [m.sequence_number for m in namespace.peek_messages(q, 2, sequence_number=own[3], partition=partition)] \
        == own[3:5]
    selected = namespace.peek_messages(q, 5, filter="n % 100 = 7")
    assert sorted(m.application_properties["n"] for m in selected) == [7, 107, 207, 307, 407]
    assert namespace.peek_messages(q, 5, filter=rb.CorrelationFilter(properties={"n": 599}))[0].body == b"m599"
    assert namespace.get_queue_runtime_properties(q).active_message_count == 600, "peeking locks nothing"
    with pytest.raises(rb.errors.InvalidArgumentError, match="partition must be"):
        namespace.peek_messages(q, partition=namespace.partition_count)
    with pytest.raises(rb.errors.RuleSyntaxError):
        namespace.peek_messages(q, filter="n >")


async def test_peeking_a_session_takes_no_lock_so_a_receiver_may_hold_it(namespace: rb.Namespace) -> None:
    q, plain = name("peek-session"), name("peek-plain")
    namespace.create_queue(q, requires_session=True, enable_partitioning=True)
    namespace.create_queue(plain)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message(f"{s}-{i}", session_id=s) for s in ("a", "b") for i in range(3)])
    with namespace.get_queue_receiver(q, session_id="a") as holder:   # the session is locked meanwhile
        assert [bytes(m.body) for m in namespace.peek_messages(q, 10, session_id="a")] == [b"a-0", b"a-1", b"a-2"]
        async with rba.Namespace(namespace.config) as ans:
            assert [bytes(m.body) for m in await ans.peek_messages(q, 2, session_id="a")] == [b"a-0", b"a-1"]
        assert [bytes(m.body) for m in holder.receive_messages(3, max_wait_time=5)] == [b"a-0", b"a-1", b"a-2"]
    assert namespace.peek_messages(q, 10, session_id="none") == []
    with pytest.raises(rb.errors.InvalidOperationError, match="does not require sessions"):
        namespace.peek_messages(plain, session_id="a")
    with pytest.raises(rb.errors.InvalidOperationError, match="dead-letter sub-queues have no sessions"):
        namespace.peek_messages(q, session_id="a", sub_queue=SubQueue.DEAD_LETTER)
    with pytest.raises(rb.errors.InvalidArgumentError, match="session_id must be"):
        namespace.peek_messages(q, session_id=7)  # type: ignore[arg-type]


async def test_send_and_peek_session_stores_and_reads_the_session_back_in_one_call(namespace: rb.Namespace) -> None:
    q, plain = name("append-session"), name("append-plain")
    namespace.create_queue(q, requires_session=True, enable_partitioning=True)
    namespace.create_queue(plain, enable_partitioning=True)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message("other", session_id="b"), Message("a-0", session_id="a")])
        after = sender.send_and_peek_session(Message("a-1", session_id="a", message_id="mine"))
        assert [(bytes(m.body), m.session_id) for m in after] == [(b"a-0", "a"), (b"a-1", "a")]
        assert after[-1].message_id == "mine" and after[-1].sequence_number > after[0].sequence_number
        with pytest.raises(rb.errors.InvalidOperationError, match="messages of one session"):
            sender.send_and_peek_session([Message("x", session_id="a"), Message("y", session_id="b")])
    async with rba.Namespace(namespace.config) as ans:
        async with ans.get_queue_sender(q) as sender:
            both = await sender.send_and_peek_session([Message("a-2", session_id="a"), Message("a-3", session_id="a")])
            assert [bytes(m.body) for m in both] == [b"a-0", b"a-1", b"a-2", b"a-3"]
        async with ans.get_queue_sender(plain) as sender:
            with pytest.raises(rb.errors.InvalidOperationError, match="does not require sessions"):
                await sender.send_and_peek_session(Message("x", session_id="a"))
    assert namespace.get_queue_runtime_properties(plain).active_message_count == 0, "a refused call stores nothing"
    with namespace.get_queue_receiver(q, session_id="a") as receiver:   # peeking locked nothing
        assert [bytes(m.body) for m in receiver.receive_messages(10, max_wait_time=5)] == [b"a-0", b"a-1", b"a-2", b"a-3"]


async def test_async_resubmit_by_filter_and_filtered_peek(namespace: rb.Namespace) -> None:
    q = name("aio-filter")
    namespace.create_queue(q)
    with namespace.get_queue_sender(q) as sender:
        sender.send_messages([Message(f"m{i}", application_properties={"n": i}) for i in range(4)])
    dead_letter(namespace, q, 4)
    async with rba.Namespace(namespace.config) as ans:
        peeked = await ans.peek_messages(q, 10, sub_queue=SubQueue.DEAD_LETTER, filter="n > 1")
        assert sorted(bytes(m.body) for m in peeked) == [b"m2", b"m3"]
        assert await ans.resubmit_dead_letters(q, filter="n > 1") == 2
    assert namespace.get_queue_runtime_properties(q).active_message_count == 2
