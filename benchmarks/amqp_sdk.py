"""The Azure SDK through the AMQP front end against `ray_broker`'s own client, same run, same queue.

- **Throughput**: `--batches` batches of `--batch-size` messages of 1 KB are sent, then received
  with peek-lock and completed, first through the Python client, then through the unmodified
  azure-servicebus SDK (sync) pointed at the namespace's AMQP port; rounds alternate. Target: the
  SDK's messages per second (send and receive together) >= 0.5x the Python client's.
- **Many connections**: `--connections` async SDK clients at once, each on a connection of its
  own, send `--per-connection` messages and receive and complete as many, receiving again after a
  receive that found nothing (for up to 2 minutes); all must succeed. How many never met an empty
  receive (5 s) on the way is reported too. The front end's resident memory is read before and after.
- **The SDK's own encoding**: what building and encoding its messages costs the SDK alone, per
  message (no I/O), to show how much of a gap is the client's.
- **Where the time goes**: every round also reports the CPU time per message, sending and
  receiving, of the client's process (this one) and of the front end's, from their processes' CPU
  times (user + system).

    python -m benchmarks.amqp_sdk [--batches 100 --batch-size 100 --rounds 3 --connections 200 --per-connection 100]
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import psutil
import ray
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

import ray_broker as rb
from ray_broker.amqp.connection_string import connection_string

from .baselines import free_port
from .common import (
    broker_namespace,
    drain_received,
    format_table,
    machine_info,
    make_body,
    median,
    parser,
    run_and_emit,
    target,
    targets_table,
)

QUEUE = "sdk-bench"
TARGET_RATIO = 0.5
WAIT_S = 5.0
CROWD_DEADLINE_S = 120.0
"""How long each of the many connections keeps receiving until it has all its messages."""


@dataclass
class AmqpConfig:
    """What the benchmark runs."""

    batches: int = 100
    batch_size: int = 100
    body_size: int = 1024
    rounds: int = 3
    connections: int = 200
    per_connection: int = 100


class CpuClock:
    """CPU seconds (user + system) used so far by this process and by the front end's."""

    def __init__(self, front_end_pid: int) -> None:
        self._processes = {"client": psutil.Process(), "front_end": psutil.Process(front_end_pid)}

    def read(self) -> dict[str, float]:
        """Wall-clock seconds now and each process's CPU seconds so far."""
        cpu = {name: sum(process.cpu_times()[:2]) for name, process in self._processes.items()}
        return {"wall": time.perf_counter(), **cpu}


def receive_all(receive: Callable[[int], list[Any]], complete: Callable[[Any], None], total: int, batch_size: int,
                who: str) -> None:
    """Receive (`receive(at_most)`) and complete `total` messages, at most `batch_size` per call;
    a receive that finds nothing is an error."""
    got = 0
    while got < total:
        batch = receive(min(batch_size, total - got))
        if not batch:
            raise RuntimeError(f"{who} received {got} of {total} messages")
        for message in batch:
            complete(message)
        got += len(batch)


def own_client_round(ns: rb.Namespace, body: bytes, config: AmqpConfig, clock: CpuClock) -> dict[str, float]:
    """Send every batch, then receive and complete every message, through the Python client."""
    total = config.batches * config.batch_size
    began = clock.read()
    with ns.get_queue_sender(QUEUE) as sender:
        for _ in range(config.batches):
            sender.send_messages([rb.Message(body) for _ in range(config.batch_size)])
    sent = clock.read()
    with ns.get_queue_receiver(QUEUE) as receiver:
        receive_all(lambda n: drain_received(receiver, n, WAIT_S), receiver.complete_message, total,
                    config.batch_size, "the Python client")
    return phases(total, began, sent, clock.read())


def sdk_round(conn_str: str, body: bytes, config: AmqpConfig, clock: CpuClock) -> dict[str, float]:
    """The same through the azure-servicebus SDK: batches built with `create_message_batch`."""
    total = config.batches * config.batch_size
    with ServiceBusClient.from_connection_string(conn_str) as client:
        began = clock.read()
        with client.get_queue_sender(QUEUE) as sender:
            for _ in range(config.batches):
                batch = sender.create_message_batch()
                for _ in range(config.batch_size):
                    batch.add_message(ServiceBusMessage(body))
                sender.send_messages(batch)
        sent = clock.read()
        with client.get_queue_receiver(QUEUE, max_wait_time=WAIT_S) as receiver:
            receive_all(lambda n: receiver.receive_messages(max_message_count=n, max_wait_time=WAIT_S),
                        receiver.complete_message, total, config.batch_size, "the SDK")
    return phases(total, began, sent, clock.read())


def phases(total: int, began: dict[str, float], sent: dict[str, float], done: dict[str, float]) -> dict[str, float]:
    """Messages per second sending, receiving (with completes) and over both, and each process's
    CPU microseconds per message sending and receiving (`client_send_cpu_us`, ...)."""
    figures = {"send_per_s": total / (sent["wall"] - began["wall"]),
               "receive_per_s": total / (done["wall"] - sent["wall"]),
               "both_per_s": total / (done["wall"] - began["wall"])}
    for process in ("client", "front_end"):
        for phase, start, end in (("send", began, sent), ("receive", sent, done)):
            figures[f"{process}_{phase}_cpu_us"] = (end[process] - start[process]) / total * 1e6
    return figures


async def many_connections(conn_str: str, body: bytes, config: AmqpConfig) -> dict[str, Any]:
    """`connections` async SDK clients at once, each sending and then receiving `per_connection`
    messages on a queue of its own, as an application does: receiving again after a receive that
    found nothing, until it has them all or `CROWD_DEADLINE_S` has passed. How many finished
    without an error, how many never met an empty receive on the way, and how long it took."""
    async def one(index: int) -> tuple[int, bool]:
        queue = f"{QUEUE}-{index}"
        deadline = time.monotonic() + CROWD_DEADLINE_S
        never_empty = True
        async with AsyncServiceBusClient.from_connection_string(conn_str) as client:
            async with client.get_queue_sender(queue) as sender:
                await sender.send_messages([ServiceBusMessage(body) for _ in range(config.per_connection)])
            got = 0
            async with client.get_queue_receiver(queue, max_wait_time=WAIT_S) as receiver:
                while got < config.per_connection and time.monotonic() < deadline:
                    batch = await receiver.receive_messages(max_message_count=config.per_connection - got,
                                                            max_wait_time=WAIT_S)
                    never_empty = never_empty and bool(batch)
                    for message in batch:
                        await receiver.complete_message(message)
                    got += len(batch)
        return got, never_empty

    began = time.perf_counter()
    outcomes = await asyncio.gather(*(one(i) for i in range(config.connections)), return_exceptions=True)
    took = time.perf_counter() - began
    errors = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)]
    finished = [o for o in outcomes if not isinstance(o, BaseException) and o[0] == config.per_connection]
    return {"connections": config.connections, "complete": len(finished),
            "complete_without_an_empty_receive": sum(1 for _, never_empty in finished if never_empty),
            "errors": len(errors), "first_errors": errors[:3], "seconds": round(took, 2)}


def encoding_cost(body: bytes, count: int = 10_000) -> dict[str, float]:
    """Microseconds per message the SDK spends building and encoding a message alone, and the
    Python client building its own (`Message.to_envelope`), without I/O."""
    began = time.perf_counter()
    for _ in range(count):
        encode_payload(bytearray(), PyamqpTransport.to_outgoing_amqp_message(ServiceBusMessage(body).raw_amqp_message))
    sdk = (time.perf_counter() - began) / count * 1e6
    began = time.perf_counter()
    for _ in range(count):
        rb.Message(body).to_envelope()
    own = (time.perf_counter() - began) / count * 1e6
    return {"sdk_encode_us_per_msg": round(sdk, 1), "own_envelope_us_per_msg": round(own, 1)}


def front_end_pid(ns: rb.Namespace) -> int:
    """The process id of the namespace's front-end actor."""
    handle = ray.get_actor(ns.config.amqp_frontend_name(), namespace="ray_broker")
    from ray._private import state

    return int(state.actors(actor_id=handle._actor_id.hex())["Pid"])


def front_end_rss_mb(ns: rb.Namespace) -> float:
    """The front-end actor's resident memory, in MB."""
    return round(psutil.Process(front_end_pid(ns)).memory_info().rss / 2 ** 20, 1)


def run(config: AmqpConfig) -> dict[str, Any]:
    body = make_body(config.body_size)
    port = free_port()
    with broker_namespace("amqp-bench", amqp_port=port) as ns:
        ns.create_queue(QUEUE, enable_partitioning=True)
        conn_str = connection_string("localhost", port, ns.config.shared_access_keys()[0])
        clock = CpuClock(front_end_pid(ns))
        rounds: dict[str, list[dict[str, float]]] = {"ray_broker_client": [], "azure_sdk": []}
        for _ in range(config.rounds):
            rounds["ray_broker_client"].append(own_client_round(ns, body, config, clock))
            rounds["azure_sdk"].append(sdk_round(conn_str, body, config, clock))
        figures = {system: {key: round(median([r[key] for r in runs]), 1) for key in runs[0]}
                   for system, runs in rounds.items()}
        for i in range(config.connections):
            ns.create_queue(f"{QUEUE}-{i}")
        rss_before, cpu_before = front_end_rss_mb(ns), clock.read()["front_end"]
        crowd = asyncio.run(many_connections(conn_str, body, config))
        crowd.update(rss_before_mb=rss_before, rss_after_mb=front_end_rss_mb(ns),
                     front_end_cpu_us_per_msg=round((clock.read()["front_end"] - cpu_before)
                                                    / max(1, config.connections * config.per_connection) * 1e6, 1))
    sdk, own = figures["azure_sdk"]["both_per_s"], figures["ray_broker_client"]["both_per_s"]
    return {"benchmark": "amqp_sdk", "config": asdict(config), "machine": machine_info(), "figures": figures,
            "sdk_vs_client": round(sdk / own, 2), "many_connections": crowd, "encoding": encoding_cost(body),
            "targets": [target("SDK throughput / Python client", sdk / own, TARGET_RATIO),
                        target("connections that all succeeded", float(crowd["complete"] == config.connections),
                               1.0)]}


def table(result: dict[str, Any]) -> str:
    rows = [[system, f["send_per_s"], f["receive_per_s"], f["both_per_s"]] for system, f in result["figures"].items()]
    crowd = result["many_connections"]
    return "\n\n".join([
        format_table("Messages per second (medians of rounds)", ["client", "send", "receive+complete", "both"], rows),
        format_table("CPU µs per message (medians of rounds)",
                     ["client", "client process: send", "receive", "front end: send", "receive"],
                     [[system, f["client_send_cpu_us"], f["client_receive_cpu_us"], f["front_end_send_cpu_us"],
                       f["front_end_receive_cpu_us"]] for system, f in result["figures"].items()]),
        format_table("Many SDK connections at once", ["connections", "all messages", "never an empty receive",
                                                      "errors", "seconds", "front end RSS before / after (MB)",
                                                      "front end CPU µs/msg"],
                     [[crowd["connections"], crowd["complete"], crowd["complete_without_an_empty_receive"],
                       crowd["errors"], crowd["seconds"],
                       f"{crowd['rss_before_mb']} / {crowd['rss_after_mb']}", crowd["front_end_cpu_us_per_msg"]]]),
        format_table("Encoding alone, µs per message", ["azure SDK", "Python client"],
                     [[result["encoding"]["sdk_encode_us_per_msg"], result["encoding"]["own_envelope_us_per_msg"]]]),
        targets_table(result["targets"]),
    ])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line."""
    p = parser((__doc__ or "").splitlines()[0])
    defaults = AmqpConfig()
    for name in ("batches", "batch_size", "rounds", "connections", "per_connection"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    args = p.parse_args(argv)
    config = AmqpConfig(batches=args.batches, batch_size=args.batch_size, body_size=args.body_size,
                        rounds=args.rounds, connections=args.connections, per_connection=args.per_connection)
    return run_and_emit(run, table, config, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
