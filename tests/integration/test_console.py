"""The web console in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
by Selenium): one namespace, one console and one browser for the module. The console asks for a
token, as it does off loopback. Screenshots go to $RAY_BROKER_SCREENSHOTS (else a temporary
directory)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import ray

import ray_broker as rb
from ray_broker.console.operations import ConsoleOperations
from ray_broker.console.server import ConsoleSettings, serve

from .test_cli_commands import CLI

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
NAMESPACE = "console-it"
PARTITIONS = 4
WAIT_S = 30.0


@pytest.fixture(scope="module")
def ns(ray_instance: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[rb.Namespace]:
    namespace = rb.start(NAMESPACE, sku="premium", partitions=PARTITIONS,
                         data_dir=str(tmp_path_factory.mktemp("console")))
    yield namespace
    rb.stop(NAMESPACE, delete_data=True)


@pytest.fixture(scope="module")
def url(ns: rb.Namespace) -> Iterator[str]:
    """The console of `ns`, served by a thread of this process, asking for a token."""
    found: list[str] = []
    stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        event = asyncio.Event()
        stop.append((asyncio.get_running_loop(), event))
        await serve(ConsoleOperations(rb.Namespace(ns.config, relay=True)),
                    ConsoleSettings("127.0.0.1", 0, True), found.append, event)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    until(lambda: found, "the console listens")
    yield found[0]
    loop, event = stop[0]
    loop.call_soon_threadsafe(event.set)
    thread.join(10)


@pytest.fixture(scope="module")
def root_key(ns: rb.Namespace) -> str:
    return next(k.key for k in ns.list_shared_access_keys() if "Manage" in k.rights)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("RAY_BROKER_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1366,900", "--force-prefers-reduced-motion"):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield browser
    browser.quit()


@pytest.fixture
def browser(driver: Any, url: str, root_key: str) -> Any:
    """The module's browser, signed in to the console."""
    if driver.current_url.startswith(url) and not driver.execute_script(
            "return document.getElementById('login').hidden === false"):
        return driver
    sign_in(driver, url, root_key)
    visible(driver, "#entities, #partitions")
    return driver


def until(condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


def visible(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    def shown() -> Any:
        found = [e for e in driver.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]
        return found[0] if found else None
    return until(shown, f"{css} shows")


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def sign_in(driver: Any, url: str, token: str) -> None:
    driver.get(url)
    driver.execute_script("sessionStorage.clear()")
    driver.get(url + "#/")
    driver.refresh()
    field = visible(driver, "#token")
    field.clear()
    field.send_keys(token)
    driver.find_element("id", "sign-in").click()


def accept_confirmation(driver: Any) -> str:
    alert = until(lambda: _alert(driver), "the confirmation shows")
    question = str(alert.text)
    alert.accept()
    return question


def _alert(driver: Any) -> Any:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None


def filled_queue(ns: rb.Namespace, count: int, dead: int = 0) -> str:
    """A new partitioned queue with `count` messages (JSON bodies, typed properties), the first
    `dead` of them dead-lettered with a reason and description."""
    name = f"cq-{uuid.uuid4().hex[:8]}"
    ns.create_queue(name, enable_partitioning=True)
    with ns.get_queue_sender(name) as sender:
        sender.send_messages([rb.Message(json.dumps({"order": i}), subject="order", content_type="application/json",
                                         partition_key=f"k{i}", application_properties={"amount": 100 + i, "eu": True})
                              for i in range(count)])
    with ns.get_queue_receiver(name) as receiver:
        while dead:
            for message in receiver.receive_messages(dead, max_wait_time=5):
                receiver.dead_letter_message(message, reason="bad-amount", error_description="amount over limit")
                dead -= 1
    return name


def counts(ns: rb.Namespace, queue: str) -> tuple[int, int]:
    runtime = ns.get_queue_runtime_properties(queue)
    return runtime.active_message_count, runtime.dead_letter_message_count


def test_a_wrong_token_is_refused(driver: Any, url: str, root_key: str) -> None:
    sign_in(driver, url, "not-the-key")
    error = visible(driver, "#error")
    assert "error: UnauthorizedError:" in error.text
    assert visible(driver, "#token"), "asked again"
    for headers in ({}, {"Authorization": "Bearer not-the-key"}):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url + "api/overview", headers=headers), timeout=10)
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["error"].startswith("error: UnauthorizedError: ")
    answer = urllib.request.urlopen(urllib.request.Request(
        url + "api/overview", headers={"Authorization": f"Bearer {root_key}"}), timeout=10)
    assert json.loads(answer.read())["namespace"]["name"] == NAMESPACE


def test_the_overview_lists_entities_with_their_counts(browser: Any, ns: rb.Namespace, shots: Path) -> None:
    queue = filled_queue(ns, 12, dead=3)
    ns.create_topic("c-events")
    ns.create_subscription("c-events", "audit")
    browser.get(browser.current_url.split("#")[0] + "#/")
    row = f'tr[data-entity="{queue}"]'
    until(lambda: browser.find_elements("css selector", row), "the queue is listed")
    until(lambda: text_of(browser, f'{row} td[data-count="active"]') == "9", "its active count shows")
    assert text_of(browser, f'{row} td[data-count="dead_letter"]') == "3"
    assert text_of(browser, f'{row} td[data-count="scheduled"]') == "0"
    assert browser.find_elements("css selector", 'tr[data-entity="c-events/subscriptions/audit"]')
    assert len(browser.find_elements("css selector", "#partitions [data-partition]")) == PARTITIONS
    browser.save_screenshot(str(shots / "console-overview.png"))


def test_a_killed_partition_shows_down_and_then_back(browser: Any, ns: rb.Namespace) -> None:
    browser.get(browser.current_url.split("#")[0] + "#/")
    victim = 2
    bar = f'#partitions [data-partition="{victim}"]'
    until(lambda: browser.find_elements("css selector", f'{bar}[data-down="false"]'), "the partition shows up")
    ray.kill(ray.get_actor(f"{NAMESPACE}.partition.{victim}", namespace="ray_broker"), no_restart=True)
    until(lambda: browser.find_elements("css selector", f'{bar}[data-down="true"]'), "the partition shows down")
    assert "down" in text_of(browser, f'[data-health="{victim}"]')
    queue = filled_queue(ns, 8)  # the overview's counts had the gateway bring it back; sends reach it
    until(lambda: browser.find_elements("css selector", f'{bar}[data-down="false"]'), "the partition shows up again")
    assert counts(ns, queue) == (8, 0)


def test_a_peeked_message_shows_its_body_and_properties(browser: Any, ns: rb.Namespace, shots: Path) -> None:
    queue = filled_queue(ns, 3)
    browser.get(browser.current_url.split("#")[0] + f"#/queue/{queue}")
    visible(browser, "#message-table a.open").click()
    body = visible(browser, "#detail-body")
    assert json.loads(body.text)["order"] in (0, 1, 2)
    assert text_of(browser, '#app-properties tr[data-property="amount"]').split() [:2] == ["amount", "int"]
    assert "eu bool true" == " ".join(text_of(browser, '#app-properties tr[data-property="eu"]').split()).lower()
    fields = text_of(browser, "#message-fields")
    assert "subject" in fields and "order" in fields and "application/json" in fields
    browser.find_element("id", "body-hex").click()
    assert visible(browser, "#detail-body").text.startswith("00000000  7b 22 6f 72 64 65 72 22")
    browser.find_element("id", "body-json").click()
    assert '"order"' in visible(browser, "#detail-body").text
    browser.save_screenshot(str(shots / "console-entity.png"))


def test_the_browser_peeks_with_a_filter_and_shows_a_bad_one_as_the_cli_does(browser: Any, ns: rb.Namespace) -> None:
    queue = filled_queue(ns, 6)
    browser.get(browser.current_url.split("#")[0] + f"#/queue/{queue}")
    until(lambda: len(browser.find_elements("css selector", "#message-table tbody tr")) == 6, "six messages show")
    visible(browser, "#filter").send_keys("amount >= 104")
    browser.find_element("id", "peek").click()
    until(lambda: len(browser.find_elements("css selector", "#message-table tbody tr")) == 2, "two messages match")
    assert sorted(t.text for t in browser.find_elements(
        "css selector", "#message-table tbody tr td:nth-child(6)")) == ['{"order": 4}', '{"order": 5}']
    field = browser.find_element("id", "filter")
    field.clear()
    field.send_keys("amount >>> 1")
    browser.find_element("id", "peek").click()
    error = visible(browser, "#error")
    assert error.text.startswith('error: RuleSyntaxError: cannot parse the SQL filter "amount >>> 1"')
    assert "\n" not in error.text


def test_resubmitting_a_dead_letter_from_the_browser_moves_it_back(browser: Any, ns: rb.Namespace) -> None:
    queue = filled_queue(ns, 4, dead=2)
    browser.get(browser.current_url.split("#")[0] + f"#/queue/{queue}")
    visible(browser, "#tab-dead").click()
    until(lambda: len(browser.find_elements("css selector", "#message-table td.reason")) == 2, "two dead letters show")
    assert text_of(browser, "#message-table tbody tr td.reason") == "bad-amount"
    assert "amount over limit" in text_of(browser, "#message-table tbody tr")
    first = browser.find_element("css selector", "#message-table tbody tr")
    sequence = int(first.get_attribute("data-sequence"))
    first.find_element("css selector", "input[type=checkbox]").click()
    browser.find_element("id", "resubmit-selected").click()
    assert "1 selected dead letter" in accept_confirmation(browser)
    until(lambda: counts(ns, queue) == (3, 1), "one dead letter is back on the queue")
    with ns.get_queue_receiver(queue, sub_queue=rb.SubQueue.DEAD_LETTER) as receiver:
        assert [m.sequence_number for m in receiver.peek_messages(10)] != [sequence]
    until(lambda: len(browser.find_elements("css selector", "#message-table td.reason")) == 1, "the page shows it gone")


def test_purge_from_the_browser_empties_the_entity(browser: Any, ns: rb.Namespace) -> None:
    queue = filled_queue(ns, 25, dead=1)
    browser.get(browser.current_url.split("#")[0] + f"#/queue/{queue}")
    visible(browser, "#purge").click()
    assert "cannot be undone" in accept_confirmation(browser)
    until(lambda: counts(ns, queue) == (0, 1), "the queue is empty (its dead letter stays)")
    until(lambda: "removed 24 message(s)" in text_of(browser, "#updated") or
          browser.find_elements("css selector", "#no-messages"), "the page shows it empty")


def test_the_console_command_serves_until_interrupted(ns: rb.Namespace, root_key: str) -> None:
    """`ray-broker console` as its own process: its address on standard output, a token asked for
    (401 without the right one), Ctrl-C ends it with status 0."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    process = subprocess.Popen([CLI, "console", "-n", NAMESPACE, "--address",
                                str(ray.get_runtime_context().gcs_address), "--port", "0", "--require-token"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith(f"console of namespace {NAMESPACE!r} at http://127.0.0.1:"), line
        address = line.split(" at ")[1].split()[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(address + "api/overview",
                                                          headers={"Authorization": "Bearer wrong"}), timeout=10)
        assert refused.value.code == 401
        answer = urllib.request.urlopen(urllib.request.Request(
            address + "api/entity?kind=queue&path=missing", headers={"Authorization": f"Bearer {root_key}"}), timeout=10)
        pytest.fail(f"a missing queue answered {answer.status}")
    except urllib.error.HTTPError as missing:
        assert missing.code == 404
        assert json.loads(missing.read())["error"].startswith("error: MessagingEntityNotFoundError: queue 'missing'")
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert err.strip().endswith("stopped")


def test_the_console_command_refuses_a_bad_port_as_a_usage_error() -> None:
    result = subprocess.run([CLI, "console", "--port", "70000"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: UsageError: ") and result.stderr.count("\n") == 1, result.stderr
