"""The chaos ledger's checks, on hand-made histories (no Ray)."""
from __future__ import annotations

import threading

from .ledger import MAX_LISTED, Delivery, Ledger

Q = "q"
S = "sq"


def delivered(seq: int, message_id: str, count: int = 1, started: float = 0.0, session: str | None = None,
              entity: str = Q) -> Delivery:
    return Delivery(entity, seq, message_id, session, count, started)


def test_a_clean_history_has_no_violations() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"])
    ledger.record_sent(["s1", "s2"], "S")
    deliveries = [delivered(1, "a"), delivered(2, "b"), delivered(1, "s1", session="S", entity=S),
                  delivered(2, "s2", session="S", entity=S)]
    ledger.record_delivered(deliveries)
    ledger.record_completed(deliveries, 1.0)
    assert ledger.violations() == []
    assert ledger.outstanding() == 0
    assert ledger.stats()["redeliveries"] == 0


def test_an_acknowledged_message_never_completed_is_missing() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b", "c"])
    ledger.record_delivered([delivered(7, "b")])
    ledger.record_completed([delivered(1, "a")], 1.0)
    problems = ledger.violations()
    assert len(problems) == 2, problems
    assert "'b'" in problems[0] and "seq 7" in problems[0] and "missing" in problems[0]
    assert "'c'" in problems[1] and "never delivered" in problems[1]
    assert ledger.outstanding() == 2 and ledger.outstanding_ids() == ["b", "c"]


def test_an_unconfirmed_completion_is_not_missing() -> None:
    ledger = Ledger()
    ledger.record_sent(["a"])
    ledger.record_delivered([delivered(1, "a")])
    ledger.record_unconfirmed([delivered(1, "a")])
    assert ledger.violations() == []
    assert ledger.outstanding() == 0
    assert ledger.stats()["unconfirmed_only"] == 1


def test_completion_before_the_send_was_acknowledged_counts() -> None:
    ledger = Ledger()
    ledger.record_delivered([delivered(1, "a")])
    ledger.record_completed([delivered(1, "a")], 1.0)
    ledger.record_sent(["a"])
    assert ledger.outstanding() == 0
    assert ledger.violations() == []


def test_delivery_by_a_receive_begun_after_the_confirmed_completion_is_a_violation() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"])
    ledger.record_delivered([delivered(1, "a", started=0.0), delivered(2, "b", started=0.0)])
    ledger.record_completed([delivered(1, "a"), delivered(2, "b")], 5.0)
    ledger.record_delivered([delivered(1, "a", count=2, started=4.0)])  # began before the confirmation
    ledger.record_delivered([delivered(2, "b", count=2, started=6.0)])
    problems = ledger.violations()
    assert len(problems) == 1, problems
    assert "delivered after completion" in problems[0] and "'b'" in problems[0] and "1.000 s" in problems[0]


def test_another_copy_of_a_completed_message_may_still_be_delivered() -> None:
    ledger = Ledger()
    ledger.record_sent(["a"])
    ledger.record_delivered([delivered(1, "a")])
    ledger.record_completed([delivered(1, "a")], 1.0)
    ledger.record_delivered([delivered(9, "a", started=2.0)])  # a copy from a retried send
    assert ledger.violations() == []
    assert ledger.stats()["extra_copies"] == 1


def test_a_redelivery_must_raise_the_delivery_count() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"])
    ledger.record_delivered([delivered(1, "a", 1), delivered(2, "b", 1)])
    ledger.record_delivered([delivered(1, "a", 2), delivered(2, "b", 1)])
    ledger.record_completed([delivered(1, "a"), delivered(2, "b")], 9.0)
    problems = ledger.violations()
    assert len(problems) == 1, problems
    assert "delivery count not raised" in problems[0] and "'b'" in problems[0]
    assert ledger.stats()["redeliveries"] == 2


def test_first_deliveries_of_a_session_follow_the_send_order() -> None:
    ledger = Ledger()
    ledger.record_sent(["s1", "s2"], "S")
    ledger.record_sent(["s3"], "S")
    ledger.record_sent(["t1", "t2"], "T")
    history = [delivered(1, "s1", session="S"), delivered(2, "s2", session="S"),
               delivered(1, "s1", 2, session="S"),  # a redelivery is not a first delivery
               delivered(9, "s2", session="S"),  # nor is another copy
               delivered(3, "s3", session="S"),
               delivered(5, "t2", session="T"), delivered(4, "t1", session="T")]
    ledger.record_delivered(history)
    ledger.record_completed(history, 9.0)
    problems = ledger.violations()
    assert problems == ["session order: in session 'T', 't1' (q seq 4, partition 0) (sent #0) was first delivered at "
                        "0.00 s with delivery count 1, after 't2' (q seq 5, partition 0) (sent #1, first delivered at "
                        "0.00 s)"]


def test_misdeliveries_are_reported() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"])
    ledger.record_sent(["s"], "S")
    history = [delivered(1, "a"), delivered(1, "b", 2), delivered(2, "ghost"), delivered(3, "s", session="T")]
    ledger.record_delivered(history)
    ledger.record_completed(history, 9.0)
    problems = ledger.violations()
    assert any("sequence number reused" in p and "'b'" in p for p in problems), problems
    assert any("phantom" in p and "'ghost'" in p for p in problems), problems
    assert any("wrong session" in p and "'s'" in p for p in problems), problems
    assert len(problems) == 3, problems


def test_long_lists_of_problems_are_capped() -> None:
    ledger = Ledger()
    ledger.record_sent([f"m{i}" for i in range(MAX_LISTED + 5)])
    problems = ledger.violations()
    assert len(problems) == MAX_LISTED + 1
    assert problems[-1] == "... and 5 more missing messages"


def test_concurrent_recording_is_consistent() -> None:
    ledger = Ledger()

    def work(worker: int) -> None:
        for batch in range(50):
            ids = [f"w{worker}.{batch}.{j}" for j in range(10)]
            ledger.record_sent(ids, f"s{worker}")
            history = [delivered(worker << 48 | batch * 10 + j, i, session=f"s{worker}") for j, i in enumerate(ids)]
            ledger.record_delivered(history)
            ledger.record_completed(history, 1.0)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger.acknowledged == 8 * 50 * 10
    assert ledger.outstanding() == 0
    assert ledger.violations() == []


def test_a_message_acknowledged_at_its_first_send_is_stored_once() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"], first_try=True)
    ledger.record_delivered([delivered(1, "a"), delivered(2, "b"), delivered(7, "a", started=2.0)])
    ledger.record_completed([delivered(1, "a"), delivered(2, "b"), delivered(7, "a")], 3.0)
    problems = ledger.violations()
    assert len(problems) == 1 and "stored twice: 'a'" in problems[0] and "[1, 7]" in problems[0]


def test_a_message_whose_batch_a_client_moved_on_in_doubt_may_be_stored_twice() -> None:
    ledger = Ledger()
    ledger.record_sent(["a", "b"], first_try=True)
    ledger.record_moved_in_doubt(["a"])
    ledger.record_delivered([delivered(1, "a"), delivered(2, "b"), delivered(7, "a", started=2.0),
                             delivered(8, "b", started=2.0)])
    ledger.record_completed([delivered(1, "a"), delivered(2, "b"), delivered(7, "a"), delivered(8, "b")], 3.0)
    problems = ledger.violations()
    assert len(problems) == 1 and "stored twice: 'b'" in problems[0], "only the message the client warned of"
    assert ledger.stats()["moved_in_doubt"] == 1
