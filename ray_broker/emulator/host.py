"""The emulator's life: a local Ray of its own, the namespace with its AMQP front end and management
port, the configuration applied; and, at the end, all of it stopped, its Ray included, and its
temporary directory removed.

Its Ray is isolated: its own temporary directory (sockets, session files, logs), joined by no
other driver, never a cluster found through `RAY_ADDRESS` or `ray start`. Without `--data-dir` the
stores live in that temporary directory too, and go with it.

Example (what `ray-broker emulator` does, and what a test host can do):
    emulator = Emulator(plan_emulator(EmulatorOptions(config_path="Config.json", amqp_port=5672)))
    try:
        emulator.start()
        print(emulator.connection_string)
    finally:
        emulator.stop()
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any, Callable

from ..keys.sas import SasKey
from .applying import Applied, apply_config
from .credentials import WELL_KNOWN_KEY, client_host, connection_string
from .preflight import SKU, EmulatorPlan

logger = logging.getLogger("ray_broker.emulator")

SCRATCH_PREFIX = "rb-emulator-"
"""The name of the emulator's temporary directories start with this."""
MAX_SCRATCH_BASE = 40
"""The longest temporary base directory used as is: Ray's socket paths below it must stay under
107 bytes, so a longer one (a long TMPDIR) gives way to /tmp."""
KEYS: tuple[SasKey, ...] = (WELL_KNOWN_KEY,)
STOP_DEADLINE_S = 25.0
"""The longest an orderly stop may take before the watchdog ends Ray's processes at once."""
WATCH_INTERVAL_S = 0.1
REMOVE_WITHIN_S = 5.0
"""How long the temporary directory's removal is tried while ending processes still write into it."""


class Emulator:
    """One emulator run: `start` once, `stop` once (also after a failed or interrupted `start`).

    Args:
        plan: what to start (`preflight.plan_emulator`).
    """

    def __init__(self, plan: EmulatorPlan) -> None:
        self.plan = plan
        self.scratch: str | None = None
        """The temporary directory of this run (Ray's, and the stores' without `--data-dir`)."""
        self.namespace: Any = None
        """The namespace's client handle (`rb.Namespace`), once it runs."""
        self.applied: Applied | None = None
        self._ray_pids: tuple[int, ...] = ()
        """The processes of the local Ray this run started (GCS, raylet and their helpers)."""

    @property
    def data_dir(self) -> str | None:
        """Where the stores are: `--data-dir`, else a directory in `scratch`."""
        if self.plan.data_dir is not None:
            return self.plan.data_dir
        return None if self.scratch is None else os.path.join(self.scratch, "data")

    @property
    def ray_temp_dir(self) -> str | None:
        """The temporary directory of the emulator's Ray."""
        return None if self.scratch is None else os.path.join(self.scratch, "ray")

    @property
    def connection_string(self) -> str:
        """What the SDKs' clients take: the published key, the AMQP port."""
        return connection_string(client_host(self.plan.host), self.plan.amqp_port)

    @property
    def admin_connection_string(self) -> str:
        """What the SDKs' administration clients take: the published key, the management port."""
        return connection_string(client_host(self.plan.host), self.plan.management_port)

    @property
    def health_url(self) -> str:
        """The management port's health probe."""
        return f"http://{client_host(self.plan.host)}:{self.plan.management_port}/health"

    def start(self, ray_started: Callable[[], None] = lambda: None) -> None:
        """Start a local Ray (then call `ray_started`), the namespace, the configuration applied,
        and then its front end."""
        from ..client.lifecycle import start_local_ray, start_namespace

        base = tempfile.gettempdir()
        self.scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=base if len(base) <= MAX_SCRATCH_BASE else "/tmp")
        start_local_ray(self.ray_temp_dir, log_to_driver="Console" in self.plan.config.logging)
        self._ray_pids = _ray_process_ids()
        ray_started()
        start_namespace(
            self.plan.config.namespace, sku=SKU, partitions=self.plan.partitions, data_dir=self.data_dir, gateways=1,
            durability="normal", address=None, amqp_port=self.plan.amqp_port,
            management_port=self.plan.management_port, any_tier_partitions=True, listen_host=self.plan.host,
            shared_access_keys=KEYS, before_serving=self._apply)

    def _apply(self, config: Any) -> None:
        """Apply the configuration to the namespace, before its front end listens: once /health
        answers, the file's entities exist."""
        import ray_broker as rb

        self.namespace = rb.Namespace(config)
        self.applied = apply_config(self.namespace, self.plan.config, self.plan.source)

    def logs_dir(self) -> str | None:
        """The directory of Ray's log files for this run (the actors' output), while it runs."""
        import ray

        node = ray._private.worker._global_node  # the local Ray this process started
        return None if node is None else str(node.get_logs_dir_path())

    def stop(self, stuck: Callable[[], None] = lambda: None) -> None:
        """Stop the namespace's actors (their stores stay), this process's Ray and its processes,
        and remove the temporary directory; with `--data-dir` and `File` logging, Ray's log files
        are kept in `<data-dir>/logs` first.

        An orderly stop needs Ray's own processes: when one of them is gone before it (a signal
        sent to the whole process group, as `timeout` or systemd send it, ends Ray's GCS too, and
        every Ray call would then wait a minute for it), or the stop takes longer than
        `STOP_DEADLINE_S`, a watchdog kills the rest at once (`abort`) and calls `stuck`."""
        import ray

        from ..client.lifecycle import stop_namespace

        watchdog = _Watchdog(self, stuck)
        try:
            if ray.is_initialized():
                watchdog.start()
                if self.namespace is not None:
                    self.namespace.close()
                stop_namespace(self.plan.config.namespace, delete_data=False)
                logs = self.logs_dir()
                watchdog.head_may_go()
                ray.shutdown()
                if logs is not None and self.plan.data_dir is not None and "File" in self.plan.config.logging:
                    shutil.copytree(logs, os.path.join(self.plan.data_dir, "logs", os.path.basename(
                        os.path.dirname(logs))), dirs_exist_ok=True)
        finally:
            watchdog.done()
            self.namespace = None
            if self.scratch is not None:
                _remove(self.scratch)
                self.scratch = None

    def abort(self) -> None:
        """End at once (a second signal, the watchdog): SIGKILL this run's Ray processes (its
        workers end with their raylet) and remove the temporary directory; the stores are as a
        crash leaves them. Takes no lock of Ray's (a signal may come while Ray holds one)."""
        for pid in self._ray_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _remove(directory: str) -> None:
    """Remove `directory`, again for a few seconds while processes that are ending (a Ray agent
    killed a moment ago) still write into it."""
    deadline = time.monotonic() + REMOVE_WITHIN_S
    while True:
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.exists(directory) or time.monotonic() > deadline:
            return
        time.sleep(WATCH_INTERVAL_S)


def _ray_process_ids() -> tuple[int, ...]:
    """The process ids of the local Ray this process started."""
    import ray

    node = ray._private.worker._global_node
    return () if node is None else tuple(info.process.pid for infos in node.all_processes.values() for info in infos)


class _Watchdog:
    """Watches an orderly stop from a thread of its own (see `Emulator.stop`)."""

    def __init__(self, emulator: Emulator, stuck: Callable[[], None]) -> None:
        self._emulator = emulator
        self._stuck = stuck
        self._deadline = time.monotonic() + STOP_DEADLINE_S
        self._head_needed = True
        self._finished = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._watch, name="emulator-stop-watchdog", daemon=True).start()

    def head_may_go(self) -> None:
        """From here on the stop ends Ray's processes itself."""
        self._head_needed = False

    def done(self) -> None:
        self._finished.set()

    def _watch(self) -> None:
        import ray

        while not self._finished.wait(WATCH_INTERVAL_S):
            node = ray._private.worker._global_node
            head_gone = self._head_needed and node is not None and bool(node.dead_processes())
            if head_gone or time.monotonic() > self._deadline:
                logger.warning("the emulator's Ray %s; ending its processes at once",
                               "lost a process of its own" if head_gone else
                               f"did not stop within {STOP_DEADLINE_S:g} s")
                self._emulator.abort()
                self._stuck()
                return
