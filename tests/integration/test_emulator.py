"""`ray-broker emulator` run as a container's main process would run it: one start shared by the
module (examples/emulator/Config.json, free ports, a data directory), reached by the azure-servicebus
SDK with the emulator's published connection strings; bad input refused in one line before anything
starts; SIGTERM stops everything it started, its Ray included; a restart on the same data directory
finds the messages sent before."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.management import CorrelationRuleFilter, ServiceBusAdministrationClient, SqlRuleFilter

from ray_broker.emulator.config_file import read_config
from ray_broker.emulator.credentials import WELL_KNOWN_KEY
from ray_broker.emulator.host import SCRATCH_PREFIX
from ray_broker.keys.sas import make_token

from .helpers import free_port, short_tmpdir

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "emulator" / "Config.json"
CLI = str(Path(sys.executable).with_name("ray-broker"))
JS_DIR = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")
READY_WITHIN_S = 180.0
STOPPED_WITHIN_S = 30.0
REFUSED_WITHIN_S = 20.0
WAIT_S = 5
QUEUES_PAST_CAP = 60
ROUTED = {"warehouse-berlin": 1, "express": 1, "audit": 3}
"""How many of the three messages sent to the topic each subscription's rules select."""
NOTHING_MORE_S = 1.0
"""How long a receive waits to show that a subscription holds nothing more."""
CONNECTIONS_PAST_CAP = 25


class EmulatorProcess:
    """A `ray-broker emulator` process, its ports, its output so far, and the time it took to answer
    /health with 200."""

    def __init__(self, tmp: Path, data_dir: Path, amqp_port: int, management_port: int) -> None:
        self.tmp, self.data_dir = tmp, data_dir
        self.amqp_port, self.management_port = amqp_port, management_port
        self.lines: list[str] = []
        self.error_lines: list[str] = []
        self.ready = threading.Event()
        self.healthy_after: float | None = None
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        env.update(TMPDIR=str(tmp), RAY_BROKER_HOME=str(tmp / "home"), PYTHONUNBUFFERED="1")
        begun = time.monotonic()
        self.process = subprocess.Popen(
            [CLI, "emulator", "--config", str(CONFIG), "--data-dir", str(data_dir), "--amqp-port", str(amqp_port),
             "--management-port", str(management_port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_errors, daemon=True).start()
        try:
            self._wait_until_healthy(begun)
        except BaseException:
            self.process.kill()
            self.process.wait(30)
            raise

    def _wait_until_healthy(self, begun: float) -> None:
        deadline = begun + READY_WITHIN_S
        while health(self.management_port)[0] != 200:
            assert self.process.poll() is None, f"exited {self.process.returncode}: {self.output()}"
            assert time.monotonic() < deadline, f"not healthy within {READY_WITHIN_S:g} s: {self.output()}"
            time.sleep(0.1)
        self.healthy_after = time.monotonic() - begun
        self.rule_status_when_healthy = management_get(self.management_port, "/shipments/subscriptions/express/"
                                                                             "rules/heavy-express")
        assert self.ready.wait(30), self.output()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == "ready":
                self.ready.set()

    def _drain_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.error_lines.append(line)

    @property
    def errors(self) -> str:
        """What it printed on standard error so far."""
        return "".join(self.error_lines)

    def output(self) -> str:
        time.sleep(0.5)  # for the reading threads to catch up
        return "\n".join(self.lines) + "\n" + self.errors

    def printed(self, label: str) -> str:
        """The value of the `label: value` line it printed."""
        return next(line.split(": ", 1)[1] for line in self.lines if line.startswith(label + ": "))

    @property
    def scratch(self) -> list[Path]:
        """Its temporary directories (Ray's and the stores' without --data-dir) still on disk."""
        return sorted(self.tmp.glob(SCRATCH_PREFIX + "*"))

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, float]:
        """Send `sig`; its exit status and the seconds it took to exit."""
        begun = time.monotonic()
        self.process.send_signal(sig)
        status = self.process.wait(STOPPED_WITHIN_S + 30)
        return status, time.monotonic() - begun


def health(port: int) -> tuple[int, dict[str, object] | None]:
    """The status and JSON body of GET /health on the management port (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None


def management_get(port: int, path: str) -> int:
    """The status of an authorized GET of `path` on the management port (plain HTTP)."""
    audience = f"http://localhost:{port}"
    token = make_token(audience, WELL_KNOWN_KEY.name, WELL_KNOWN_KEY.key, int(time.time()) + 600)
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}?api-version=2021-05",
                                     headers={"Authorization": token})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def processes_naming(path: Path) -> list[str]:
    """The processes whose command line names `path` (Ray's processes name their temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in command:
            found.append(f"{entry.name}: {command[:120]}")
    return found


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    tmp = Path(short_tmpdir("rbemu-"))
    running: EmulatorProcess | None = None
    try:
        running = EmulatorProcess(tmp, tmp / "data", free_port(), free_port())
        yield running
    finally:
        if running is not None and running.process.poll() is None:
            running.process.kill()
            running.process.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def conn_str(emulator: EmulatorProcess) -> str:
    return emulator.printed("connection string")


@pytest.fixture(scope="module")
def admin(emulator: EmulatorProcess) -> Iterator[ServiceBusAdministrationClient]:
    """The Python administration client on the management port (it speaks HTTPS there), trusting
    the namespace's certificate."""
    ca = emulator.printed("certificate").split(" (")[0]
    assert ca == str(emulator.data_dir / "tls-certificate.pem")
    with ServiceBusAdministrationClient.from_connection_string(emulator.printed("administration connection string"),
                                                               connection_verify=ca) as client:
        yield client


def test_it_prints_the_published_connection_strings_then_ready(emulator: EmulatorProcess, conn_str: str) -> None:
    key = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    assert conn_str == f"Endpoint=sb://localhost:{emulator.amqp_port};{key}"
    assert emulator.printed("administration connection string") == \
        f"Endpoint=sb://localhost:{emulator.management_port};{key}"
    assert emulator.lines[-1] == "ready"
    assert emulator.lines[0].startswith("namespace 'sbemulatorns': 1 partition(s), 3 queues, 1 topic")
    status, body = health(emulator.management_port)
    assert status == 200 and body is not None and body["status"] == "healthy"
    assert emulator.rule_status_when_healthy == 200, "once /health says healthy, the file's entities exist"
    print(f"\nray-broker emulator: /health 200 after {emulator.healthy_after:.1f} s")


def test_an_sdk_sends_and_receives_on_a_queue_of_the_file(conn_str: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender("orders-failed") as sender:
            sender.send_messages(ServiceBusMessage("hello", message_id="m-1"))
        with client.get_queue_receiver("orders-failed", max_wait_time=WAIT_S) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
            assert [str(m) for m in received] == ["hello"]
            receiver.complete_message(received[0])


def test_the_administration_client_reads_back_every_entity_property_and_rule(
        admin: ServiceBusAdministrationClient) -> None:
    config = read_config(str(CONFIG))
    assert {q.name for q in admin.list_queues()} == {q.name for q in config.queues}
    for spec in config.queues:
        queue = admin.get_queue(spec.name)
        for option, value in spec.options.items():
            read = getattr(queue, option)
            if option.startswith("forward") and value is not None:
                assert read.endswith(f"/{value}"), (spec.name, option, read)
            else:
                assert read == value, (spec.name, option, read, value)
    assert [t.name for t in admin.list_topics()] == ["shipments"]
    (topic_spec,) = config.topics
    topic = admin.get_topic("shipments")
    for option, value in topic_spec.options.items():
        assert getattr(topic, option) == value, (option, getattr(topic, option), value)
    assert {s.name for s in admin.list_subscriptions("shipments")} == {s.name for s in topic_spec.subscriptions}
    for spec in topic_spec.subscriptions:
        sub = admin.get_subscription("shipments", spec.name)
        for option, value in spec.options.items():
            assert getattr(sub, option) == value, (spec.name, option, getattr(sub, option), value)
    rules = {s: {r.name: r for r in admin.list_rules("shipments", s)} for s in ("warehouse-berlin", "express", "audit")}
    assert list(rules["audit"]) == ["$Default"] and list(rules["warehouse-berlin"]) == ["berlin-parcels"]
    berlin = rules["warehouse-berlin"]["berlin-parcels"].filter
    assert isinstance(berlin, CorrelationRuleFilter)
    assert (berlin.content_type, berlin.label, berlin.properties) == ("application/json", "parcel", {"warehouse": "BER"})
    express = rules["express"]["heavy-express"]
    assert isinstance(express.filter, SqlRuleFilter)
    assert express.filter.sql_expression == "service = 'express' AND weightKg > 20"
    assert express.action.sql_expression == "SET handling = 'forklift'; SET sys.To = 'dock-7'"


def test_the_files_rules_route_a_topics_messages_and_the_sql_action_applies(conn_str: str) -> None:
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_topic_sender("shipments") as sender:
            sender.send_messages([
                ServiceBusMessage("parcel", content_type="application/json", subject="parcel",
                                  application_properties={"warehouse": "BER"}),
                ServiceBusMessage("heavy", application_properties={"service": "express", "weightKg": 25}),
                ServiceBusMessage("light", application_properties={"service": "express", "weightKg": 5}),
            ])
        got = {}
        for sub in ("warehouse-berlin", "express", "audit"):
            with client.get_subscription_receiver("shipments", sub, max_wait_time=WAIT_S) as receiver:
                messages = []
                while batch := receiver.receive_messages(
                        max_message_count=10, max_wait_time=WAIT_S if len(messages) < ROUTED[sub] else NOTHING_MORE_S):
                    for message in batch:
                        receiver.complete_message(message)
                    messages.extend(batch)
                got[sub] = messages
    assert [str(m) for m in got["warehouse-berlin"]] == ["parcel"]
    assert sorted(str(m) for m in got["audit"]) == ["heavy", "light", "parcel"]
    (heavy,) = got["express"]
    assert str(heavy) == "heavy" and heavy.to == "dock-7"
    assert heavy.application_properties[b"handling"] == b"forklift"


def test_a_javascript_application_written_for_the_emulator_runs_unchanged(emulator: EmulatorProcess,
                                                                          conn_str: str) -> None:
    """js/emulator_app.js, in the shape of the emulator's JavaScript samples: /health, then the
    administration client creates a queue, a message goes there and back, the queue is deleted."""
    if NODE is None:
        pytest.skip("node is not installed: the JavaScript SDK test needs Node.js 18 or later")
    if not (JS_DIR / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.fail(f"the JavaScript SDK is not installed: run `npm ci --prefix {JS_DIR}` first")
    ca = emulator.printed("certificate").split(" (")[0]
    run = subprocess.run([NODE, str(JS_DIR / "emulator_app.js"), conn_str,
                          emulator.printed("administration connection string"), str(emulator.management_port),
                          "js-emulator-app"], capture_output=True, text=True, timeout=120, cwd=JS_DIR,
                         env={**os.environ, "NODE_EXTRA_CA_CERTS": ca})
    assert run.returncode == 0, f"the JavaScript application failed:\n{run.stderr}"
    report = json.loads(run.stdout)
    assert report == {"health": "healthy", "maxDeliveryCount": 3,
                      "received": {"body": "hello from JavaScript", "messageId": "js-1",
                                   "applicationProperties": {"origin": "emulator-sample"}},
                      "activeAfterComplete": 0, "existsAfterDelete": False}


async def test_sixty_queues_and_twenty_five_connections_at_once_pass_the_emulators_caps(
        conn_str: str, admin: ServiceBusAdministrationClient) -> None:
    """Microsoft's emulator stops at 50 entities and 10 connections: 60 queues made through the
    administration client, and 25 SDK connections open at once, each sending to and receiving
    from a queue of its own."""
    names = [f"cap-{i:02d}" for i in range(QUEUES_PAST_CAP)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(admin.create_queue, names))
    try:
        assert {q.name for q in admin.list_queues()} >= set(names)
        opened = asyncio.Event()
        open_now = 0

        async def one_connection(n: int) -> str:
            nonlocal open_now
            async with AsyncServiceBusClient.from_connection_string(conn_str) as client:
                async with client.get_queue_sender(names[n]) as sender:
                    await sender.send_messages(ServiceBusMessage(f"from connection {n}"))
                    open_now += 1
                    if open_now == CONNECTIONS_PAST_CAP:
                        opened.set()
                    await asyncio.wait_for(opened.wait(), 120)   # every connection open at once
                async with client.get_queue_receiver(names[n], max_wait_time=WAIT_S) as receiver:
                    (message,) = await receiver.receive_messages(max_message_count=1, max_wait_time=WAIT_S)
                    await receiver.complete_message(message)
                    return str(message)

        got = await asyncio.gather(*(one_connection(n) for n in range(CONNECTIONS_PAST_CAP)))
        assert got == [f"from connection {n}" for n in range(CONNECTIONS_PAST_CAP)]
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(admin.delete_queue, names))


@pytest.mark.parametrize(("text", "words"), [
    ('{"UserConfig": {\n  "Namespaces": [,]}}', "EmulatorConfigError: {path} is not JSON: Expecting value at line 2, "
                                                "column 18"),
    ('// c\n{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q", "Properties": '
     '{"LockDurationn": "PT1M"}}]}]}}', "EmulatorConfigError: {path}: queue 'q', 'Properties': unknown property "
                                        "'LockDurationn'"),
    ('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [{"Name": "q", "Properties": '
     '{"LockDuration": "60s"}}]}]}}', "EmulatorConfigError: {path}: queue 'q': LockDuration must be an ISO 8601 "
                                     "duration"),
    ('{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Topics": [{"Name": "t", "Subscriptions": [{"Name": '
     '"s", "Rules": [{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "a >"}}}]}]}]}]}}',
     "EmulatorConfigError: {path}: rule 'r' of subscription 's' of topic 't': SqlFilter is refused: cannot parse"),
    ('{"UserConfig": {"Namespaces": [{"Name": "otherns"}]}}',
     "InvalidOperationError: --data-dir {data} holds namespace 'sbemulatorns', and the configuration names 'otherns'"),
], ids=["not-json", "unknown-property", "not-iso-8601", "bad-sql", "other-namespace"])
def test_bad_input_is_one_line_and_exit_1_before_anything_starts(emulator: EmulatorProcess, tmp_path: Path,
                                                                  text: str, words: str) -> None:
    path = tmp_path / "Config.json"
    path.write_text(text, encoding="utf-8")
    result = refused(["--config", str(path), "--data-dir", str(emulator.data_dir), "--amqp-port", str(free_port()),
                      "--management-port", str(free_port())], tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {words.format(path=path, data=emulator.data_dir)}"), result.stderr


def test_a_port_in_use_is_one_line_before_anything_starts(emulator: EmulatorProcess, tmp_path: Path) -> None:
    result = refused(["--amqp-port", str(emulator.amqp_port), "--management-port", str(free_port())], tmp_path)
    assert result.returncode == 1
    assert f"error: PortUnavailableError: port {emulator.amqp_port} (the AMQP port) cannot be listened on" in \
        result.stderr


def test_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    result = refused(["--amqp-port", "0"], tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: UsageError: ")


def refused(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`ray-broker emulator argv`, which must end within seconds with one error line, having
    started nothing (no temporary directory of its own made)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(TMPDIR=str(tmp_path))
    begun = time.monotonic()
    result = subprocess.run([CLI, "emulator", *argv], capture_output=True, text=True, env=env,
                            timeout=REFUSED_WITHIN_S + 60)
    assert time.monotonic() - begun < REFUSED_WITHIN_S
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert not list(tmp_path.glob(SCRATCH_PREFIX + "*")), "nothing is started"
    return result


def test_sigterm_while_its_ray_starts_stops_everything_and_exits_0(tmp_path: Path) -> None:
    """Ray takes SIGTERM with a handler of its own (sys.exit(15)) while it starts: the emulator
    takes it as its stop signal all the same."""
    tmp = Path(short_tmpdir("rbemu-"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
        env.update(TMPDIR=str(tmp))
        process = subprocess.Popen([CLI, "emulator", "--amqp-port", str(free_port()), "--management-port",
                                    str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
        deadline = time.monotonic() + 60
        while not list(tmp.glob(f"{SCRATCH_PREFIX}*/ray/session_*")):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        (scratch,) = tmp.glob(SCRATCH_PREFIX + "*")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=STOPPED_WITHIN_S + 30)
        assert process.returncode == 0 and err.rstrip().endswith("stopped"), (process.returncode, out, err)
        assert "ready" not in out.splitlines()
        assert processes_naming(scratch) == [] and not scratch.exists()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_sigterm_stops_everything_a_restart_keeps_the_messages_and_a_second_sigint_ends_it_at_once(emulator: EmulatorProcess, conn_str: str) -> None:
    """Last in the module: it stops the module's emulator."""
    with ServiceBusClient.from_connection_string(conn_str) as client, \
            client.get_queue_sender("orders-failed") as sender:
        sender.send_messages(ServiceBusMessage("kept", message_id="kept-1"))
    (scratch,) = emulator.scratch
    status, seconds = emulator.stop(signal.SIGTERM)
    assert status == 0 and seconds < STOPPED_WITHIN_S, (status, seconds, emulator.errors)
    assert emulator.lines[-1] == "ready" and "stopped" in emulator.errors
    assert processes_naming(scratch) == [], "no process of its Ray is left"
    assert emulator.scratch == [], "its temporary directory is removed"
    assert list((emulator.data_dir / "logs").glob("session_*")), "File logging keeps Ray's logs in the data dir"

    again = EmulatorProcess(emulator.tmp, emulator.data_dir, emulator.amqp_port, emulator.management_port)
    try:
        assert again.lines[0].endswith("(0 created, 0 updated, 10 unchanged)"), again.lines[0]
        with ServiceBusClient.from_connection_string(conn_str) as client, \
                client.get_queue_receiver("orders-failed", max_wait_time=WAIT_S) as receiver:
            received = receiver.receive_messages(max_message_count=5, max_wait_time=WAIT_S)
            assert [(str(m), m.message_id) for m in received] == [("kept", "kept-1")]
            receiver.complete_message(received[0])
        (scratch,) = again.scratch
        again.process.send_signal(signal.SIGINT)
        time.sleep(0.5)
        status, seconds = again.stop(signal.SIGINT)
        assert status == 130 and seconds < 10, ("a second SIGINT ends it at once", status, seconds, again.errors)
    finally:
        if again.process.poll() is None:
            again.process.kill()
    assert processes_naming(scratch) == [] and again.scratch == []
