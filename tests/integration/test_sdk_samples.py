"""The azure-servicebus SDK's published samples, unmodified, against a namespace's AMQP front end.

The samples are those of the SDK's 7.11.0 source distribution (fetched from the package registry
at test time, never kept in this repository), run by the SDK the tests depend on, each as its own
process and pointed at the namespace by environment variables only: `SERVICEBUS_CONNECTION_STR`
and the entity names each sample reads, or, for the samples that take a host name and a
credential, `SERVICEBUS_FULLY_QUALIFIED_NAMESPACE` (a TLS endpoint in front of the front end,
since the SDK always speaks TLS to a host name; its certificate is trusted through `PYTHONPATH`,
see `sdk_samples.TlsEndpoint`) with a named key of the namespace (`SERVICEBUS_SAS_POLICY`,
`SERVICEBUS_SAS_KEY`) that has the Send right only.

Every sample gets entities of its own in one shared namespace, made (and seeded where the sample
expects messages) before the samples start; the samples run a few at a time, and each test checks
what its sample left behind: the messages, dead letters, scheduled messages and session states
the sample should leave, not merely its exit status. `EXPECTATIONS` is the table: one entry per
sample (sync and async twins share it, but for the async twins in `ASYNC_EXPECTATIONS`, which do
other things), saying what it leaves, or why it does not run here.
"""
from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

import pytest

import ray_broker as rb
from ray_broker.amqp.connection_string import connection_string
from ray_broker.management_http.certificate import certificate_path

from .sdk_samples import SampleRun, TlsEndpoint, fetch_samples, openssl_available, run_sample, sample_environment

SAMPLE_TIMEOUT_S = 120.0
"""How long a sample may take before it is killed (and fails): the session pool samples wait out
several 5 s receive timeouts and take about 40 s on a quiet machine, 45 s and more beside the rest
of the suite on a slow one; the limit is there for a sample that hangs."""
STOP_AFTER_S = 8.0
"""How long a sample that never ends by itself runs before it is stopped."""
CONCURRENT_SAMPLES = 8
UNLOCK_WAIT_S = 15.0
"""How long a check waits for a session the sample's receivers still hold as the sample ends."""
SESSION_LOCK = timedelta(seconds=10)
"""The session queues' lock duration: a session whose release was lost (a release call that timed
out on a loaded machine) is free again within `UNLOCK_WAIT_S`."""
SEEDED = ("seeded 1", "seeded 2", "seeded 3")
"""The messages put on the entities of the samples that receive, before they run."""


@dataclass(frozen=True)
class Entities:
    """One sample's entities (fresh names) and the values its environment gives it."""

    queue: str
    session_queue: str
    topic: str
    subscription: str
    session_id: str

    @property
    def subscription_path(self) -> str:
        """The subscription's path, as receivers and peeks take it."""
        return f"{self.topic}/subscriptions/{self.subscription}"


Check = Callable[[rb.Namespace, Entities, str], None]
"""What a sample must leave behind: given the namespace, its entities and what it printed."""
Seed = Callable[[rb.Namespace, Entities], None]


@dataclass(frozen=True)
class Expectation:
    """One sample's row of the table: what it leaves (`leaves`, checked by `check`), what is put
    there before it runs (`seed`), or why it does not run here (`skip`)."""

    leaves: str
    check: Check | None = None
    seed: Seed | None = None
    skip: str | None = None
    stop_after: float | None = None
    """Seconds after which a sample that never ends by itself (it receives forever) is stopped."""

    def skip_reason(self) -> str | None:
        """Why the sample does not run here, if it does not."""
        return self.skip


# ---------------------------------------------------------------------- what samples leave behind

def bodies(ns: rb.Namespace, path: str) -> Counter[str]:
    """The bodies of every message on `path` (a queue, a subscription, a dead-letter queue), peeked."""
    with ns.get_queue_receiver(path) as receiver:
        return Counter(m.body.decode() for m in receiver.peek_messages(max_message_count=1000))


def counts(ns: rb.Namespace, e: Entities, path: str) -> tuple[int, int, int]:
    """(active, dead-lettered, scheduled) messages of the queue or subscription at `path`."""
    props = ns.get_subscription_runtime_properties(e.topic, e.subscription) if path == e.subscription_path \
        else ns.get_queue_runtime_properties(path)
    return props.active_message_count, props.dead_letter_message_count, props.scheduled_message_count


def seed_queue(ns: rb.Namespace, e: Entities) -> None:
    with ns.get_queue_sender(e.queue) as sender:
        sender.send_messages([rb.Message(body) for body in SEEDED])


def seed_topic(ns: rb.Namespace, e: Entities) -> None:
    with ns.get_topic_sender(e.topic) as sender:
        sender.send_messages([rb.Message(body) for body in SEEDED])


def sent_by_send_samples(ns: rb.Namespace, path: str, *, listed: bool = True) -> None:
    """The send samples' messages: one alone, ten in a list (unless not `listed`), ten in a batch."""
    got = bodies(ns, path)
    batched = sum(n for body, n in got.items() if body.startswith("Message inside"))
    in_list = 10 if listed else 0
    assert (got["Single Message"], got["Message in list"], batched, sum(got.values())) == \
        (1, in_list, 10, 11 + in_list), got


def emptied(path_of: Callable[[Entities], str]) -> Check:
    """Nothing left on the entity: no active, dead-lettered or scheduled message, nothing deferred."""
    def check(ns: rb.Namespace, e: Entities, _: str) -> None:
        path = path_of(e)
        assert counts(ns, e, path) == (0, 0, 0)
        assert not bodies(ns, path), "deferred messages are left"
    return check


def printed(*texts: str, times: int = 1) -> Callable[[str], None]:
    """Each of `texts` printed at least `times` times."""
    def check(stdout: str) -> None:
        for text in texts:
            assert stdout.count(text) >= times, f"{text!r} printed {stdout.count(text)} times, expected {times}"
    return check


def both(first: Check, then: Callable[[str], None]) -> Check:
    """`first`, then a check of what the sample printed."""
    def check(ns: rb.Namespace, e: Entities, stdout: str) -> None:
        first(ns, e, stdout)
        then(stdout)
    return check


def queue_of(e: Entities) -> str:
    return e.queue


def session_queue_of(e: Entities) -> str:
    return e.session_queue


def subscription_of(e: Entities) -> str:
    return e.subscription_path


def session_state(ns: rb.Namespace, queue: str, session_id: str) -> bytes | None:
    """A session's state, read by locking the session (the sample's receivers may still be letting
    go of it: their connection closes as the sample ends)."""
    deadline = time.monotonic() + UNLOCK_WAIT_S
    while True:
        try:
            with ns.get_queue_receiver(queue, session_id=session_id) as receiver:
                return receiver.session.get_state()
        except rb.errors.SessionCannotBeLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def session_left_half_done(ns: rb.Namespace, e: Entities, stdout: str) -> None:
    """session_send_receive: 21 sent to one session, 10 received and completed, state "END"."""
    assert counts(ns, e, e.session_queue) == (11, 0, 0)
    assert session_state(ns, e.session_queue, e.session_id) == b"END"
    assert ns.list_queue_sessions(e.session_queue) == [e.session_id]
    assert "Session state: b'START'" in stdout


def sessions_drained(sessions: int, messages: int, state: bytes) -> Check:
    """session_pool_receive: `sessions` sessions of `messages` messages in all, every one received
    and completed by receivers taking the next available session; each session's state `state`."""
    def check(ns: rb.Namespace, e: Entities, stdout: str) -> None:
        assert counts(ns, e, e.session_queue) == (0, 0, 0)
        listed = ns.list_queue_sessions(e.session_queue)
        assert len(listed) == sessions
        assert {session_state(ns, e.session_queue, session_id) for session_id in listed} == {state}
        assert stdout.count("Message: ") == messages
    return check


def one_hello(ns: rb.Namespace, e: Entities, _: str) -> None:
    """The credential samples: one "hello" sent with a named key that has the Send right only."""
    assert bodies(ns, e.queue) == Counter({"hello": 1})


def topic_schedules_cancelled(ns: rb.Namespace, e: Entities, stdout: str) -> None:
    assert ns.get_topic_runtime_properties(e.topic).scheduled_message_count == 0
    assert counts(ns, e, e.subscription_path) == (0, 0, 0)
    printed("All scheduled messages are cancelled.")(stdout)


def peeked_not_taken(ns: rb.Namespace, e: Entities, stdout: str) -> None:
    """receive_peek: the seeded messages are all still there, never delivered; two were printed."""
    with ns.get_queue_receiver(e.queue) as receiver:
        left = receiver.peek_messages(max_message_count=10)
    assert sorted(m.body.decode() for m in left) == list(SEEDED)
    assert all(m.delivery_count == 0 for m in left)
    assert sum(stdout.count(body) for body in SEEDED) == 2


def created_then_deleted(kind: str) -> Check:
    """The mgmt_* samples: the entity the sample made (its name printed) is gone again."""
    def check(ns: rb.Namespace, e: Entities, stdout: str) -> None:
        made = re.search(rf"{kind.capitalize()} (\S+) is created\.", stdout)
        assert made is not None and f"{kind.capitalize()} {made.group(1)} is deleted." in stdout, stdout
        lookup = {"queue": ns.get_queue, "topic": ns.get_topic,
                  "subscription": lambda name: ns.get_subscription(e.topic, name)}[kind]
        with pytest.raises(rb.errors.MessagingEntityNotFoundError):
            lookup(made.group(1))
    return check


def rules_back_to_default(ns: rb.Namespace, e: Entities, stdout: str) -> None:
    """mgmt_rule: two rules made, read, updated and deleted: the subscription keeps its "$Default" rule."""
    assert [rule.name for rule in ns.list_rules(e.topic, e.subscription)] == ["$Default"]
    assert stdout.count("Rule Name:") >= 2 and stdout.count("is deleted.") == 2


def selected_by_rules(ns: rb.Namespace, e: Entities, stdout: str) -> None:
    """topic_subscription_with_rule_operations: of 9 messages, each subscription received what its
    rules select (all 9; 3 red; 3 blue; 1 red and important); then the subscriptions are deleted."""
    for count, subscription in ((9, "sb-allmsgs-sub"), (3, "sb-sqlfilteronly-sub"), (3, "sb-sqlfilteraction-sub"),
                                (1, "sb-corrfiltersub")):
        assert f"'{count}' Messages From Subscription: {subscription}" in stdout
    assert stdout.count("Color Property = BlueProcessed") == 3
    assert [sub.name for sub in ns.list_subscriptions(e.topic)] == [e.subscription]


NOT_HERE = "does not apply to a local namespace"
EXPECTATIONS: dict[str, Expectation] = {
    "authenticate_client_connstr": Expectation(
        "nothing: it opens and closes a client from the connection string"),
    "authenticate_using_azure_named_key_credential": Expectation(
        "one message sent with AzureNamedKeyCredential (a named key with the Send right only)", one_hello),
    "authenticate_using_azure_sas_credential": Expectation(
        "one message sent with an AzureSasCredential token the sample signs itself", one_hello),
    "generate_sas_token_and_authenticate_client": Expectation(
        "nothing: it makes a client with a token it signs itself and closes it"),
    "send_queue": Expectation("21 messages on the queue", lambda ns, e, _: sent_by_send_samples(ns, e.queue)),
    "send_topic": Expectation("21 messages on the subscription",
                              lambda ns, e, _: sent_by_send_samples(ns, e.subscription_path)),
    "receive_queue": Expectation("the seeded messages received and completed: the queue is empty",
                                 both(emptied(queue_of), printed(*SEEDED)), seed_queue),
    "receive_subscription": Expectation("the seeded messages received and completed: the subscription is empty",
                                        both(emptied(subscription_of), printed(*SEEDED)), seed_topic),
    "receive_iterator_queue": Expectation(
        "the seeded messages received by iterating and completed; it iterates forever, so it is stopped",
        both(emptied(queue_of), printed(*SEEDED)), seed_queue, stop_after=STOP_AFTER_S),
    "receive_peek": Expectation("the seeded messages untouched (peeked, never delivered)", peeked_not_taken,
                                seed_queue),
    "receive_deadlettered_messages": Expectation(
        "10 messages sent, dead-lettered, then received from the dead-letter queue and completed: both empty",
        both(emptied(queue_of), printed("Message to be deadlettered", times=20))),
    "receive_deferred_message_queue": Expectation(
        "10 messages sent, deferred, received by sequence number and completed: nothing deferred is left",
        both(emptied(queue_of), printed("Completing deferred msg", times=10))),
    "deadletter_messages_and_correct": Expectation(
        "one message dead-lettered past its delivery count, 5 of 10 dead-lettered, fixed and sent again, "
        "all completed: the queue and its dead-letter queue are empty",
        both(emptied(queue_of), printed("Deadletter message:", "Received fixed message"))),
    "schedule_messages_and_cancellation": Expectation(
        "11 messages scheduled, then cancelled: nothing scheduled or active",
        both(emptied(queue_of), printed("Single message is scheduled", "All scheduled messages are cancelled."))),
    "schedule_topic_messages_and_cancellation": Expectation(
        "11 messages scheduled on the topic, then cancelled: nothing scheduled, nothing on the subscription",
        topic_schedules_cancelled),
    "send_and_receive_amqp_annotated_message": Expectation(
        "three AMQP messages (data, sequence and value bodies) sent, received and completed: the queue is empty",
        both(emptied(queue_of), printed("Message of data body received", "Message of sequence body received",
                                        "Message of value body received"))),
    "session_send_receive": Expectation(
        "21 messages in one session, 10 received and completed, the session's state \"END\"",
        session_left_half_done),
    "session_pool_receive": Expectation(
        "200 messages in 10 sessions, all received by 5 receivers taking the next available session; each "
        "session's state \"OPEN\"", sessions_drained(10, 200, b"OPEN")),
    "failure_and_recovery": Expectation(
        "10 messages sent and received; it iterates forever, so it is stopped: the queue is empty",
        both(emptied(queue_of), printed(*(f"Data {i}" for i in range(10)))), stop_after=STOP_AFTER_S),
    "auto_lock_renew": Expectation(
        "", skip="sleeps 100 s twice and 80 s once to show renewals over minutes (AutoLockRenewer is covered "
                 "by test_amqp_sdk.py)"),
    "sample_code_servicebus": Expectation(
        "", skip="builds a client with DefaultAzureCredential (needs azure-identity and Azure AD); " + NOT_HERE),
    "client_identity_authentication": Expectation(
        "", skip="authenticates with Azure AD (azure-identity's EnvironmentCredential); " + NOT_HERE),
    "connection_to_custom_endpoint_address": Expectation(
        "", skip="its custom endpoint and CA bundle are placeholders written into the sample; " + NOT_HERE),
    "proxy": Expectation(
        "", skip="needs an HTTP proxy with credentials at 127.0.0.1:8899 written into the sample; " + NOT_HERE),
    "mgmt_queue": Expectation("no queue: one made, listed, read, updated and deleted",
                              created_then_deleted("queue")),
    "mgmt_topic": Expectation("no topic: one made, listed, read, updated and deleted",
                              created_then_deleted("topic")),
    "mgmt_subscription": Expectation("no new subscription: one made, listed, read, updated and deleted",
                                     created_then_deleted("subscription")),
    "mgmt_rule": Expectation("the \"$Default\" rule only: two rules made, listed, updated and deleted",
                             rules_back_to_default),
    "topic_subscription_with_rule_operations": Expectation(
        "four subscriptions with rules, each receiving what its filter selects, then deleted", selected_by_rules),
}

ASYNC_EXPECTATIONS: dict[str, Expectation] = {
    "send_topic": Expectation("11 messages on the subscription (one alone, ten in a batch: no list)",
                              lambda ns, e, _: sent_by_send_samples(ns, e.subscription_path, listed=False)),
    "session_pool_receive": Expectation(
        "105 messages in 5 sessions, all received by 5 receivers taking the next available session, each "
        "session's last message setting its state \"CLOSED\"", sessions_drained(5, 105, b"CLOSED")),
}
"""The async twins that do other things than their sync sample."""
SYNC_ONLY = ("failure_and_recovery", "generate_sas_token_and_authenticate_client")
"""The samples without an async twin in the release."""
SAMPLES = sorted([f"sync_samples/{name}.py" for name in EXPECTATIONS]
                 + [f"async_samples/{name}_async.py" for name in EXPECTATIONS if name not in SYNC_ONLY])


def expectation_of(sample: str) -> Expectation:
    """The table's row for a sample file (`sync_samples/x.py` or `async_samples/x_async.py`)."""
    name = Path(sample).stem.removesuffix("_async")
    return ASYNC_EXPECTATIONS[name] if sample.startswith("async") and name in ASYNC_EXPECTATIONS \
        else EXPECTATIONS[name]


LONGEST = ("deadletter_messages_and_correct", "session_pool_receive", "failure_and_recovery", "receive_iterator_queue",
           "send_and_receive_amqp_annotated_message")
"""The samples that take longest (they wait out receive timeouts, or run until stopped): started first."""


def launch_order(sample: str) -> tuple[bool, str]:
    """The longest samples first, then the others by name."""
    return Path(sample).stem.removesuffix("_async") not in LONGEST, sample


def needs(source: str) -> set[str]:
    """The environment settings a sample reads (its source names them)."""
    return {name for name in ("SERVICEBUS_QUEUE_NAME", "SERVICEBUS_SESSION_QUEUE_NAME", "SERVICEBUS_TOPIC_NAME",
                              "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE") if name in source}


# ---------------------------------------------------------------------- the shared namespace and the runs

@dataclass
class Launched:
    """Every runnable sample started (a few at a time): its entities and its run."""

    entities: dict[str, Entities]
    runs: dict[str, Future[SampleRun]]


@pytest.fixture(scope="module")
def samples_dir(request: pytest.FixtureRequest) -> Path:
    """The release's samples, fetched once into pytest's cache."""
    return fetch_samples(Path(request.config.cache.mkdir("azure-servicebus-samples")))


@pytest.fixture(scope="module")
def launched(amqp_namespace: rb.Namespace, samples_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    """Entities for every runnable sample, seeded, then the samples started a few at a time."""
    ns = amqp_namespace  # the session's: each sample gets entities of its own
    port = ns.config.amqp_port
    assert port is not None
    root = next(k for k in ns.list_shared_access_keys() if k.name == "RootManageSharedAccessKey")
    sender_key = ns.add_shared_access_key("samples-sender", ["Send"])
    ca_file = str(certificate_path(ns.config.name, ns.config.data_dir))
    workdir = tmp_path_factory.mktemp("samples")
    tls = TlsEndpoint(workdir, port) if openssl_available() else None
    pool = ThreadPoolExecutor(CONCURRENT_SAMPLES)
    launched = Launched({}, {})
    with tls if tls is not None else nullcontext():
        for sample in sorted(SAMPLES, key=launch_order):
            expectation = expectation_of(sample)
            source = samples_dir / sample
            if expectation.skip_reason() is not None:
                continue
            wanted = needs(source.read_text())
            if "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE" in wanted and tls is None:
                continue
            entities = _make_entities(ns, wanted)
            if expectation.seed is not None:
                expectation.seed(ns, entities)
            env = sample_environment({
                "SERVICEBUS_CONNECTION_STR": connection_string("localhost", port, root),
                "SERVICEBUS_QUEUE_NAME": entities.queue, "SERVICEBUS_SESSION_QUEUE_NAME": entities.session_queue,
                "SERVICEBUS_TOPIC_NAME": entities.topic, "SERVICEBUS_SUBSCRIPTION_NAME": entities.subscription,
                "SERVICEBUS_SESSION_ID": entities.session_id,
                "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": tls.host if tls else "",
                "SERVICEBUS_SAS_POLICY": sender_key.name, "SERVICEBUS_SAS_KEY": sender_key.key,
                "REQUESTS_CA_BUNDLE": ca_file, "SSL_CERT_FILE": ca_file,  # the administration client's TLS
                **({"PYTHONPATH": os.pathsep.join(filter(None, [str(tls.trust_path), os.environ.get("PYTHONPATH")]))}
                   if tls else {})})
            launched.entities[sample] = entities
            launched.runs[sample] = pool.submit(run_sample, source, env, SAMPLE_TIMEOUT_S, expectation.stop_after)
        yield launched
        pool.shutdown(wait=True, cancel_futures=True)


def _make_entities(ns: rb.Namespace, wanted: set[str]) -> Entities:
    """Fresh entities for one sample: those its environment names (a topic always with a subscription)."""
    tag = uuid.uuid4().hex[:8]
    entities = Entities(f"q-{tag}", f"sq-{tag}", f"t-{tag}", "sub", f"session-{tag}")
    if "SERVICEBUS_QUEUE_NAME" in wanted:
        ns.create_queue(entities.queue)
    if "SERVICEBUS_SESSION_QUEUE_NAME" in wanted:
        ns.create_queue(entities.session_queue, requires_session=True, lock_duration=SESSION_LOCK)
    if "SERVICEBUS_TOPIC_NAME" in wanted:
        ns.create_topic(entities.topic)
        ns.create_subscription(entities.topic, entities.subscription)
    return entities


# ---------------------------------------------------------------------- the tests

def test_the_table_covers_every_published_sample(samples_dir: Path) -> None:
    published = sorted(str(p.relative_to(samples_dir)) for d in ("sync_samples", "async_samples")
                       for p in (samples_dir / d).glob("*.py"))
    assert published == SAMPLES


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample(sample: str, launched: Launched, amqp_namespace: rb.Namespace) -> None:
    expectation = expectation_of(sample)
    reason = expectation.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    if sample not in launched.runs:
        pytest.skip("takes a host name: the SDK then speaks TLS, and the `openssl` command that makes the test "
                    "endpoint's certificate is not installed")
    run = launched.runs[sample].result()
    assert run.returncode == 0 or run.stopped, run.describe()
    if expectation.check is not None:
        try:
            expectation.check(amqp_namespace, launched.entities[sample], run.stdout)
        except AssertionError as failure:
            raise AssertionError(f"{sample} should leave {expectation.leaves}: {failure}\n{run.describe()}") from None
