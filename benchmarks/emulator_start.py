"""`ray-broker emulator` started as a container's main process would start it: seconds from the
command to a healthy `/health` on the management port (what readiness checks wait for), to the
"ready" line, and from SIGTERM to the process's exit, over several starts with
`examples/emulator/Config.json`, each on free ports with a Ray of its own in a fresh directory.

Microsoft's emulator has no figure to run beside it here (a closed container image that needs a
SQL Server container); its documented start waits 15 s (`SQL_WAIT_INTERVAL`, default 15) before
its first health check of that SQL container, which the document carries as the reference.

    python -m benchmarks.emulator_start [--starts 3]
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .common import emit, format_table, machine_info, median, parser

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "emulator" / "Config.json"
EMULATOR_SQL_WAIT_S = 15.0
"""Microsoft's emulator waits this long by default before its first health check of its SQL
container (`SQL_WAIT_INTERVAL`)."""
READY_WITHIN_S = 180.0
STOPPED_WITHIN_S = 60.0


@dataclass
class EmulatorStartConfig:
    """What the benchmark runs."""

    starts: int = 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def one_start(cli: str) -> dict[str, float]:
    """Start the emulator once, in a fresh directory: seconds to /health 200, to "ready", and from
    SIGTERM to its exit (which must be 0)."""
    scratch = tempfile.mkdtemp(prefix="rbes-", dir="/tmp")
    management = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(TMPDIR=scratch, RAY_BROKER_HOME=str(Path(scratch) / "home"), PYTHONUNBUFFERED="1")
    ready = threading.Event()
    began = time.perf_counter()
    process = subprocess.Popen([cli, "emulator", "--config", str(CONFIG), "--amqp-port", str(_free_port()),
                                "--management-port", str(management)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip() == "ready":
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        while not _healthy(management):
            if process.poll() is not None or time.perf_counter() - began > READY_WITHIN_S:
                raise RuntimeError(f"the emulator was not healthy within {READY_WITHIN_S:g} s "
                                   f"(exit status {process.poll()})")
            time.sleep(0.05)
        healthy_s = time.perf_counter() - began
        if not ready.wait(READY_WITHIN_S):
            raise RuntimeError("the emulator never printed ready")
        ready_s = time.perf_counter() - began
        stopping = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        status = process.wait(STOPPED_WITHIN_S)
        if status != 0:
            raise RuntimeError(f"the emulator exited {status} on SIGTERM")
        return {"healthy_s": round(healthy_s, 2), "ready_s": round(ready_s, 2),
                "stopped_s": round(time.perf_counter() - stopping, 2)}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        shutil.rmtree(scratch, ignore_errors=True)


def run(config: EmulatorStartConfig) -> dict[str, Any]:
    """`config.starts` starts, one after another; the document."""
    cli = str(Path(sys.executable).with_name("ray-broker"))
    starts = [one_start(cli) for _ in range(config.starts)]
    summary = {key: {"median": round(median([s[key] for s in starts]), 2), "max": max(s[key] for s in starts)}
               for key in ("healthy_s", "ready_s", "stopped_s")}
    return {"benchmark": "emulator_start", "machine": machine_info(), "config": asdict(config), "starts": starts,
            "summary": summary, "reference": {"emulator_sql_wait_s": EMULATOR_SQL_WAIT_S}, "targets": []}


def table(doc: dict[str, Any]) -> str:
    """The figures as text."""
    rows = [[n + 1, s["healthy_s"], s["ready_s"], s["stopped_s"]] for n, s in enumerate(doc["starts"])]
    rows.append(["median", *(doc["summary"][k]["median"] for k in ("healthy_s", "ready_s", "stopped_s"))])
    return format_table(f"ray-broker emulator --config {CONFIG.relative_to(ROOT)} (Microsoft's emulator waits "
                        f"{EMULATOR_SQL_WAIT_S:g} s before its first SQL health check)",
                        ["start", "/health 200 s", "ready s", "SIGTERM to exit s"], rows)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, print the document and the table."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--starts", type=int, default=EmulatorStartConfig.starts, help="starts to time (default 3)")
    args = p.parse_args(argv)
    doc = run(EmulatorStartConfig(starts=args.starts))   # each start runs a Ray of its own: none here
    emit(doc, table(doc), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
