"""A receive given up on takes no message: an asyncio receive cancelled while it waits, or while its
partition calls run (straight to the partitions and through the gateway), and `ray-broker receive
--wait 60` interrupted with Ctrl-C (which ends the command at once with status 130, abandoning what
it held). And an error leaving `asyncio.run` around the
async client is shown at once, the process ending with Ray stopped cleanly."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import ray

import ray_broker as rb
import ray_broker.aio as rba

from .helpers import isolated_env, short_tmpdir

pytestmark = pytest.mark.ray
CLI = [str(Path(sys.executable).with_name("ray-broker"))]
AS_FROM_A_TERMINAL = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execv(sys.argv[1], sys.argv[1:])"]
"""Runs a command with Ctrl-C's default action, as a terminal's shell does: a test run started in the
background of a non-interactive shell ignores SIGINT, and a command inherits that (Python then
installs no KeyboardInterrupt handler)."""


def local_address() -> str:
    """The session's Ray, at its loopback address."""
    return f"127.0.0.1:{str(ray.get_runtime_context().gcs_address).rsplit(':', 1)[1]}"


def waiting_receives(ns: rb.Namespace) -> int:
    """How many waiting receives the namespace's partitions have taken (a receive that found
    nothing waits on them)."""
    handles = [ray.get_actor(ns.config.partition_name(k), namespace="ray_broker") for k in range(ns.partition_count)]
    return sum(counts.get("receive_waiting", 0) for counts in ray.get([h.call_counts.remote() for h in handles]))


def received_at_once(ns: rb.Namespace, queue: str) -> list[int]:
    """Send one message, then the delivery counts of what a new receiver gets within 3 s."""
    with ns.get_queue_sender(queue) as sender:
        sender.send_messages(rb.Message("next"))
    with ns.get_queue_receiver(queue) as receiver:
        messages = receiver.receive_messages(1, max_wait_time=3)
        for message in messages:
            receiver.complete_message(message)
    return [m.delivery_count for m in messages]


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "relay"])
async def test_a_cancelled_async_receive_takes_no_message(namespace: rb.Namespace, queue_name: str,
                                                          relay: bool) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    ans = rba.Namespace(namespace.config, relay=relay)
    receiver = ans.get_queue_receiver(queue_name)
    waiting = asyncio.ensure_future(receiver.receive_messages(1, max_wait_time=60))
    await asyncio.sleep(1.5)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    counts = await asyncio.to_thread(received_at_once, namespace, queue_name)
    assert counts == [1], "the message went to the cancelled receive" if not counts else counts
    await ans.close()


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "relay"])
async def test_receives_cancelled_while_their_partition_calls_run_take_no_message(
        namespace: rb.Namespace, queue_name: str, relay: bool) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message(f"m{i}") for i in range(200)])
    ans = rba.Namespace(namespace.config, relay=relay)
    handed_out = 0
    for i in range(40):   # cancelled 0 to 20 ms in: before, while and after the partitions answer
        async with ans.get_queue_receiver(queue_name) as receiver:
            receiving = asyncio.ensure_future(receiver.receive_messages(5, max_wait_time=5))
            await asyncio.sleep(i * 0.0005)
            receiving.cancel()
            try:
                for message in await receiving:
                    await receiver.complete_message(message)
                    handed_out += 1
            except asyncio.CancelledError:
                pass
    delivery_counts = []
    async with ans.get_queue_receiver(queue_name) as receiver:   # released ones are back at once (60 s locks)
        while batch := await receiver.receive_messages(50, max_wait_time=3):
            for message in batch:
                delivery_counts.append(message.delivery_count)
                await receiver.complete_message(message)
    await ans.close()
    assert handed_out + len(delivery_counts) == 200, "messages locked by a cancelled receive were not released"
    assert set(delivery_counts) == {1}, "a cancelled receive counted a delivery"


def test_ctrl_c_ends_a_waiting_cli_receive_at_once_and_it_takes_no_message(namespace: rb.Namespace,
                                                                          queue_name: str) -> None:
    namespace.create_queue(queue_name, enable_partitioning=True)
    out, err = interrupted_cli_receive(namespace, queue_name, [])
    assert out == ""
    assert received_at_once(namespace, queue_name) == [1]


def test_ctrl_c_on_a_cli_receive_holding_messages_abandons_them(namespace: rb.Namespace, queue_name: str) -> None:
    """`--no-complete` holds what it received until the end: interrupted, it abandons them."""
    namespace.create_queue(queue_name, enable_partitioning=True)
    with namespace.get_queue_sender(queue_name) as sender:
        sender.send_messages([rb.Message("held-0"), rb.Message("held-1")])
    out, err = interrupted_cli_receive(namespace, queue_name, ["--no-complete", "--count", "10", "--json"])
    assert sorted(json.loads(line)["body"] for line in out.splitlines()) == ["held-0", "held-1"]
    with namespace.get_queue_receiver(queue_name) as receiver:
        again = receiver.receive_messages(10, max_wait_time=3)
        for message in again:
            receiver.complete_message(message)
    assert sorted(str(m) for m in again) == ["held-0", "held-1"], "the messages stayed locked"


def interrupted_cli_receive(ns: rb.Namespace, queue: str, options: list[str]) -> tuple[str, str]:
    """Run `ray-broker receive queue --wait 60 options` until its receive waits on the partitions,
    press Ctrl-C, and check that it ends well under a second later with status 130; its output."""
    target = [queue, "-n", ns.name, "--address", local_address()]
    before = waiting_receives(ns)
    receive = subprocess.Popen([*AS_FROM_A_TERMINAL, *CLI, "receive", *target, "--wait", "60", *options],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        deadline = time.monotonic() + 120
        while waiting_receives(ns) == before and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        assert receive.poll() is None, receive.communicate()
        receive.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = ended_or_traced(receive, 30)
        took = time.monotonic() - interrupted
    finally:
        if receive.poll() is None:
            receive.kill()
    assert receive.returncode == 130, err
    assert err.strip().splitlines()[-1:] == ["error: interrupted"], (out, err)
    assert took < 1.0, f"it ended {took:.2f} s after Ctrl-C\n{err}"
    return out, err


def ended_or_traced(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The output of `process` once it ends within `timeout`; if it does not, its threads' Python
    stacks (SIGABRT to a process run with PYTHONFAULTHANDLER=1) in the failure."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate(timeout=30)
        pytest.fail(f"still running {timeout:.0f} s after Ctrl-C; its stacks:\n{err}\n{out}")


WAITING_DRIVER = """
import sys
import ray_broker as rb
ns = rb.connect(sys.argv[1], address=sys.argv[2])
with ns.get_queue_receiver(sys.argv[3]) as receiver:
    receiver.receive_messages(1, max_wait_time=60)
"""


@pytest.mark.parametrize("how", ["cli", "direct"])
def test_a_waiting_receive_whose_process_dies_takes_no_message(namespace: rb.Namespace, queue_name: str,
                                                               how: str) -> None:
    """Through the gateway (the CLI) or straight to the partitions (a driver of the library)."""
    namespace.create_queue(queue_name, enable_partitioning=True)
    address = local_address()
    started = time.monotonic()
    subprocess.run([*CLI, "peek", queue_name, "-n", namespace.name, "--address", address], capture_output=True,
                   timeout=240, check=True)
    startup = time.monotonic() - started
    command = ([*CLI, "receive", queue_name, "-n", namespace.name, "--address", address, "--wait", "60"]
               if how == "cli" else [sys.executable, "-c", WAITING_DRIVER, namespace.name, address, queue_name])
    waiting = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(startup + 2.0)
        assert waiting.poll() is None
    finally:
        waiting.kill()
        waiting.wait(timeout=30)
    time.sleep(1.0)
    assert received_at_once(namespace, queue_name) == [1]


ASYNC_SNIPPET = """
import asyncio
import ray_broker.aio as rba

async def main() -> None:
    ns = await rba.start({name!r})
    await ns.create_queue("orders", enable_partitioning=True)
    print("CREATED", flush=True)
    await ns.create_queue("orders", enable_partitioning=True)

asyncio.run(main())
"""


def test_an_error_out_of_asyncio_run_is_shown_at_once_and_ray_ends_cleanly() -> None:
    name = f"aio-exit-{uuid.uuid4().hex[:6]}"
    home, ray_tmp = short_tmpdir("rbh-"), short_tmpdir("rbr-")
    try:
        check_error_shown_at_once(name, isolated_env(ray_tmp, home), home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def check_error_shown_at_once(name: str, env: dict[str, str], home: str) -> None:
    """Run `ASYNC_SNIPPET` as namespace `name`; then stop it, with its stores, from another process."""
    run = subprocess.Popen([sys.executable, "-c", ASYNC_SNIPPET.format(name=name)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert run.stdout is not None
        for line in run.stdout:
            if line.strip() == "CREATED":
                break
        else:
            raise AssertionError(f"the queue was never created: {run.communicate(timeout=120)}")
        created = time.monotonic()
        _, err = run.communicate(timeout=90)
        ended = time.monotonic() - created
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1
    assert "MessagingEntityAlreadyExistsError: queue 'orders' already exists" in err, err[-3000:]
    assert "Failed to connect to GCS" not in err
    assert ended < 30, f"the process took {ended:.0f} s to end after the error"
    stop = subprocess.run([sys.executable, "-c", f"import ray_broker as rb; rb.stop({name!r}, delete_data=True)"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert stop.returncode == 0, stop.stderr[-3000:]
    assert not os.path.exists(os.path.join(home, name)), "the stores were left locked or in place"
