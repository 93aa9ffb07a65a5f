"""The `ray-broker` command line: the demo, namespace lifecycle, queues, messages and benchmarks.

Every command except `demo` and `bench` (each on its own local Ray) works against a Ray cluster
that outlives it: `start` joins the cluster named by `--address` / `RAY_ADDRESS`, or the one
`ray start` last started on this machine, and starts a Ray head of its own (`ray_head`) if none is
running; the other commands attach to it.
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any, Sequence

from .errors import MessageAlreadySettled, ServiceBusError
from .tables import format_table

DEFAULT_NAMESPACE = "default"
_BODY_PREVIEW = 60


class CliError(Exception):
    """A user-facing failure of the command line (printed as one line, exit code 1)."""


# ---------------------------------------------------------------------------------------------- Ray cluster


def _attach(args: argparse.Namespace) -> Any:
    """Connect to the running namespace `args.namespace` on the cluster `--address` (or RAY_ADDRESS, or
    this machine's `ray start` head) names. A command runs a few calls and exits, so it relays them
    through the gateway rather than fetching the routing table first."""
    import ray_broker as rb
    from .client.lifecycle import connect_namespace

    return rb.Namespace(connect_namespace(args.namespace, args.address,
                                          how_to_start=f"`ray-broker start -n {args.namespace}`"), relay=True)


# ---------------------------------------------------------------------------------------------- commands


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the end-to-end demonstration on an embedded local Ray."""
    from .demo import run_demo

    report = run_demo(messages=args.messages)
    return 0 if report.ok else 1


def cmd_start(args: argparse.Namespace) -> int:
    """Start a namespace on the running Ray cluster (starting a Ray head if there is none): the
    namespace outlives this command."""
    import ray

    import ray_broker as rb
    from .client.lifecycle import cluster_address, local_head_address
    from .ray_head import start_head

    address = cluster_address(args.address)
    if address is None:
        head = start_head(args.port, local_head_address)
        print(f"started a Ray head at {head.address} (pid {head.pid}; stop it with `ray-broker stop --ray`)")
        address = head.address
    ns = rb.start(args.namespace, sku=args.sku, partitions=args.partitions, data_dir=args.data_dir,
                  gateways=args.gateways, durability=args.durability, address=address)
    config = ns.config
    print(f"namespace {ns.name!r} running on {ray.get_runtime_context().gcs_address}: sku={config.sku}, "
          f"{ns.partition_count} partitions, {config.gateways} gateway(s), durability={config.durability}, "
          f"data_dir={config.data_dir or '-'}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop a namespace (optionally deleting its data), and with --ray the Ray head `start` started
    (that head is stopped even when the namespace cannot be reached)."""
    import ray

    import ray_broker as rb
    from .client.lifecycle import cluster_address, ensure_ray, running_config
    from .ray_head import started_head, stop_head

    status = 0
    try:
        address = cluster_address(args.address)
        if address is not None:
            ensure_ray(address)
            outcome = "stopped" if running_config(args.namespace) is not None else "was not running"
            rb.stop(args.namespace, delete_data=args.delete_data)
            ray.shutdown()
            print(f"namespace {args.namespace!r} {outcome}" + ("; its data is deleted" if args.delete_data else ""))
        else:
            print("no Ray cluster is running here; nothing to stop")
    except (ServiceBusError, ConnectionError) as exc:
        if not args.ray:
            raise
        print(f"error: {exc}", file=sys.stderr)
        status = 1
    if args.ray:
        head = started_head()
        if head is None:
            print("no Ray head started by `ray-broker start` is running; nothing else stopped")
        else:
            stop_head(head)
            print(f"Ray head at {head.address} (pid {head.pid}) stopped; other Ray clusters left running")
    return status


def cmd_status(args: argparse.Namespace) -> int:
    """Print the namespace, each partition's availability and every queue's counts."""
    ns = _attach(args)
    config = ns.config
    print(f"namespace {ns.name!r}: sku={config.sku}, {ns.partition_count} partitions, {config.gateways} gateway(s), "
          f"durability={config.durability}, data_dir={config.data_dir or '-'}")
    queues = ns.list_queues()
    runtimes = {q.name: ns.get_queue_runtime_properties(q.name) for q in queues}
    pids = partition_pids(ns)
    active = [sum(p.active_message_count for r in runtimes.values() for p in r.partitions if p.index == k)
              for k in range(ns.partition_count)]
    print()
    print(format_table(["partition", "state", "pid", "active"],
                       [[k, "up" if pids[k] else "DOWN", pids[k] or "-", active[k]] for k in range(ns.partition_count)]))
    print()
    if not queues:
        print("no queues")
        return 0
    rows = []
    for q in queues:
        rt = runtimes[q.name]
        rows.append([q.name, _flags(q), q.status, rt.availability, rt.active_message_count,
                     rt.dead_letter_message_count, rt.scheduled_message_count, rt.size_in_bytes])
    print(format_table(["queue", "flags", "status", "availability", "active", "dead-letter", "scheduled", "bytes"], rows))
    return 0


def partition_pids(ns: Any, timeout: float = 5.0) -> list[int | None]:
    """Each partition actor's process id, or None for a partition that did not answer in `timeout`."""
    import ray

    from .config import RAY_NAMESPACE

    refs: list[Any] = []
    for k in range(ns.partition_count):
        try:
            refs.append(ray.get_actor(f"{ns.name}.partition.{k}", namespace=RAY_NAMESPACE).pid.remote())
        except ValueError:
            refs.append(None)
    pending = [r for r in refs if r is not None]
    done = set(ray.wait(pending, num_returns=len(pending), timeout=timeout)[0]) if pending else set()
    pids: list[int | None] = []
    for ref in refs:
        try:
            pids.append(int(ray.get(ref)) if ref is not None and ref in done else None)
        except ray.exceptions.RayError:
            pids.append(None)
    return pids


def _flags(queue: Any) -> str:
    flags = [name for name, on in (("partitioned", queue.enable_partitioning), ("sessions", queue.requires_session),
                                   ("dedup", queue.requires_duplicate_detection)) if on]
    return ",".join(flags) or "-"


def cmd_queue(args: argparse.Namespace) -> int:
    """Create, delete or list queues (durations are given in seconds)."""
    ns = _attach(args)
    if args.queue_command == "list":
        queues = ns.list_queues()
        if not queues:
            print("no queues")
            return 0
        print(format_table(["queue", "flags", "status", "lock", "max-deliveries"],
                           [[q.name, _flags(q), q.status, q.lock_duration, q.max_delivery_count] for q in queues]))
    elif args.queue_command == "create":
        options: dict[str, Any] = {
            "enable_partitioning": args.partitioned, "requires_session": args.sessions,
            "requires_duplicate_detection": args.duplicate_detection,
            "lock_duration": args.lock_duration, "max_delivery_count": args.max_delivery_count,
        }
        if args.ttl is not None:
            options["default_message_time_to_live"] = args.ttl
        queue = ns.create_queue(args.name, **options)
        print(f"queue {queue.name!r} created ({_flags(queue)})")
    else:
        ns.delete_queue(args.name)
        print(f"queue {args.name!r} deleted")
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    """Send `--count` messages (the same `--body`, or numbered bodies) in batches."""
    import ray_broker as rb

    ns = _attach(args)
    messages = [rb.Message(args.body if args.body is not None else f"message {i}", message_id=uuid.uuid4().hex,
                           session_id=args.session_id, partition_key=args.partition_key)
                for i in range(args.count)]
    with ns.get_queue_sender(args.queue) as sender:
        for start in range(0, len(messages), args.batch):
            sender.send_messages(messages[start:start + args.batch], timeout=args.timeout)
    print(f"sent {len(messages)} message(s) to {args.queue!r}")
    return 0


def cmd_receive(args: argparse.Namespace) -> int:
    """Receive up to `--max` messages, print and complete each."""
    import ray_broker as rb

    ns = _attach(args)
    session = None
    if not args.dead_letter and ns.get_queue(args.queue).requires_session:
        session = args.session_id or rb.NEXT_AVAILABLE_SESSION
    receiver = ns.get_queue_receiver(args.queue, sub_queue=rb.SubQueue.DEAD_LETTER if args.dead_letter else None,
                                     session_id=session, max_wait_time=args.wait)
    received = 0
    with receiver:
        while received < args.max:
            batch = receiver.receive_messages(min(100, args.max - received), max_wait_time=args.wait)
            if not batch:
                break
            for message in batch:
                _print_message(message, args.json)
                receiver.complete_message(message)
            received += len(batch)
    print(f"received and completed {received} message(s) from {args.queue!r}"
          + (" (dead-letter)" if args.dead_letter else ""), file=sys.stderr)
    return 0


def cmd_peek(args: argparse.Namespace) -> int:
    """Browse up to `--max` messages without locking them."""
    import ray_broker as rb

    ns = _attach(args)
    session = args.session_id if not args.dead_letter and ns.get_queue(args.queue).requires_session else None
    receiver = ns.get_queue_receiver(args.queue, sub_queue=rb.SubQueue.DEAD_LETTER if args.dead_letter else None,
                                     session_id=session)
    with receiver:
        messages = receiver.peek_messages(args.max, sequence_number=args.from_sequence)
    for message in messages:
        _print_message(message, args.json)
    print(f"peeked {len(messages)} message(s) in {args.queue!r}", file=sys.stderr)
    return 0


def _print_message(message: Any, as_json: bool) -> None:
    body = message.body.decode("utf-8", errors="replace")
    if as_json:
        print(json.dumps({
            "sequence_number": message.sequence_number, "partition": message.partition_index,
            "message_id": message.message_id, "session_id": message.session_id,
            "partition_key": message.partition_key, "delivery_count": message.delivery_count,
            "dead_letter_reason": message.dead_letter_reason, "body": body,
        }))
        return
    preview = body if len(body) <= _BODY_PREVIEW else body[:_BODY_PREVIEW - 3] + "..."
    key = message.session_id or message.partition_key or "-"
    reason = f"  [dead-lettered: {message.dead_letter_reason}]" if message.dead_letter_reason else ""
    print(f"{message.sequence_number:>20}  p{message.partition_index:<3} {key:<16} {preview}{reason}")


def run_bench(bench_args: list[str]) -> int:
    """Run the benchmark suite (`benchmarks/suite.py` of a source checkout) with its own arguments."""
    suite = _benchmark_suite()
    return int(suite.main(bench_args) or 0)


def _benchmark_suite() -> Any:
    import importlib

    checkout = str(Path(__file__).resolve().parents[1])
    try:
        return importlib.import_module("benchmarks.suite")
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.suite"):
            raise
    if (Path(checkout) / "benchmarks" / "suite.py").exists() and checkout not in sys.path:
        sys.path.insert(0, checkout)
        return importlib.import_module("benchmarks.suite")
    raise CliError("the benchmark suite (benchmarks/suite.py) is not available: run `ray-broker bench` "
                   "from an editable install of a source checkout")


# ---------------------------------------------------------------------------------------------- parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help="namespace name (default: %(default)s)")
    parser.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else the local `ray start` cluster)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `ray-broker`."""
    parser = argparse.ArgumentParser(prog="ray-broker", description="Service Bus partitioned queues on Ray actors.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run the end-to-end demo on a local Ray")
    demo.add_argument("--messages", type=_positive, default=20_000, help="messages to send (default: %(default)s)")
    demo.set_defaults(handler=cmd_demo)

    start = commands.add_parser("start", help="start a namespace (and a Ray head if none is running)")
    _add_cluster_options(start)
    start.add_argument("--sku", choices=["basic", "standard", "premium"], default="standard")
    start.add_argument("--partitions", type=_positive, help="premium only: partition count (1 to 64)")
    start.add_argument("--data-dir", help="where the partitions keep their stores (default: ~/.ray_broker/<name>)")
    start.add_argument("--gateways", type=_positive, default=1)
    start.add_argument("--durability", choices=["normal", "fsync", "memory"], default="normal")
    start.add_argument("--port", type=_positive, help="port of a Ray head started by this command (default: Ray's)")
    start.set_defaults(handler=cmd_start)

    stop = commands.add_parser("stop", help="stop a namespace")
    _add_cluster_options(stop)
    stop.add_argument("--delete-data", action="store_true", help="also delete the namespace's stores")
    stop.add_argument("--ray", action="store_true", help="also stop the Ray head that `ray-broker start` started")
    stop.set_defaults(handler=cmd_stop)

    status = commands.add_parser("status", help="partitions and queues with their counts")
    _add_cluster_options(status)
    status.set_defaults(handler=cmd_status)

    queue = commands.add_parser("queue", help="create, delete or list queues")
    queue_commands = queue.add_subparsers(dest="queue_command", required=True, metavar="ACTION")
    create = queue_commands.add_parser("create", help="create a queue")
    create.add_argument("name")
    create.add_argument("--partitioned", action="store_true", help="spread the queue over every partition")
    create.add_argument("--sessions", action="store_true", help="require sessions")
    create.add_argument("--duplicate-detection", action="store_true")
    create.add_argument("--lock-duration", type=float, default=60.0, help="seconds (default: %(default)s)")
    create.add_argument("--max-delivery-count", type=_positive, default=10)
    create.add_argument("--ttl", type=float, help="default message time to live, seconds")
    delete = queue_commands.add_parser("delete", help="delete a queue and its messages")
    delete.add_argument("name")
    queue_commands.add_parser("list", help="list queues")
    for sub in (create, delete, queue_commands.choices["list"]):
        _add_cluster_options(sub)
    queue.set_defaults(handler=cmd_queue)

    send = commands.add_parser("send", help="send messages to a queue")
    _add_cluster_options(send)
    send.add_argument("queue")
    send.add_argument("--body", help="message body (default: numbered bodies)")
    send.add_argument("--count", type=_positive, default=1)
    send.add_argument("--session-id")
    send.add_argument("--partition-key")
    send.add_argument("--batch", type=_positive, default=100, help="messages per send call")
    send.add_argument("--timeout", type=float, default=60.0, help="seconds per send call")
    send.set_defaults(handler=cmd_send)

    receive = commands.add_parser("receive", help="receive, print and complete messages")
    _add_cluster_options(receive)
    receive.add_argument("queue")
    receive.add_argument("--max", type=_positive, default=10, help="at most this many messages")
    receive.add_argument("--wait", type=float, default=5.0, help="seconds to wait for messages")
    receive.add_argument("--dead-letter", action="store_true", help="read the dead-letter sub-queue")
    receive.add_argument("--session-id", help="session to lock (default on session queues: the next available)")
    receive.add_argument("--json", action="store_true", help="one JSON object per message")
    receive.set_defaults(handler=cmd_receive)

    peek = commands.add_parser("peek", help="browse messages without locking them")
    _add_cluster_options(peek)
    peek.add_argument("queue")
    peek.add_argument("--max", type=_positive, default=10)
    peek.add_argument("--from-sequence", type=int, default=0, help="start at this sequence number")
    peek.add_argument("--dead-letter", action="store_true")
    peek.add_argument("--session-id", help="session to browse (session queues)")
    peek.add_argument("--json", action="store_true")
    peek.set_defaults(handler=cmd_peek)

    commands.add_parser("bench", help="run the benchmark suite (every later argument goes to it)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `ray-broker` with `argv` (default: the process arguments); returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments[:1] == ["bench"]:
            return run_bench(arguments[1:])
        args = build_parser().parse_args(arguments)
        return int(args.handler(args))
    except (ServiceBusError, MessageAlreadySettled, CliError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ConnectionError as exc:
        print(f"error: cannot reach the Ray cluster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
