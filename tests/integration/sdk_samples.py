"""What running the azure-servicebus SDK's published samples takes: the samples themselves (from the
SDK's source distribution, fetched from the package registry once and kept in pytest's cache),
one sample run as its own process with its environment, and a TLS endpoint in front of the AMQP
front end for the samples that reach a namespace by host name (the SDK then always speaks TLS on
port 5671; a connection string with `UseDevelopmentEmulator=true` is plain AMQP).
"""
from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

SDK_RELEASE = "7.11.0"
"""The SDK release whose samples run (the last with a sample for every topic); the SDK that runs
them is the test dependency's."""
AMQPS_PORT = 5671
"""The port the SDK's TLS transport always connects to."""
PIP_TIMEOUT_S = 120
TRUST_MODULE = '''"""certifi for the samples: its own bundle and the test endpoint's certificate."""
import os


def where() -> str:
    return os.path.join(os.path.dirname(__file__), "cacert.pem")


def contents() -> str:
    with open(where(), encoding="ascii") as bundle:
        return bundle.read()
'''
"""The `certifi` module the samples that reach the TLS endpoint import (see `TlsEndpoint`)."""


def fetch_samples(cache: Path) -> Path:
    """The `samples` directory of the SDK's source distribution, downloaded (`pip download`) and
    unpacked into `cache` on first use."""
    root = cache / f"azure-servicebus-{SDK_RELEASE}"
    samples = root / "samples"
    if samples.is_dir():
        return samples
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    f"azure-servicebus=={SDK_RELEASE}", "--dest", str(cache)], check=True, timeout=PIP_TIMEOUT_S,
                   capture_output=True)
    archive = next(cache.glob(f"azure[-_]servicebus-{SDK_RELEASE}.*"))
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as unpacked:
            unpacked.extractall(cache)
    else:
        shutil.unpack_archive(str(archive), str(cache))
    return samples


@dataclass(frozen=True)
class SampleRun:
    """How one sample process ended."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    stopped: bool
    """Whether the sample was stopped after its time (one that never ends by itself)."""

    def describe(self) -> str:
        """The run, for an assertion message."""
        return (f"exit {self.returncode} after {self.seconds:.1f} s{' (stopped)' if self.stopped else ''}\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")


def run_sample(path: Path, env: dict[str, str], timeout: float, stop_after: float | None) -> SampleRun:
    """Run a sample as its own process (`python sample.py` in a directory of its own) with `env`.

    A sample that never ends by itself (`stop_after` seconds given) is stopped after that long; any
    other is killed at `timeout` and reported with exit status -9."""
    started = time.monotonic()
    with subprocess.Popen([sys.executable, str(path)], cwd=path.parent, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        stopped = False
        try:
            stdout, stderr = process.communicate(timeout=timeout if stop_after is None else stop_after)
        except subprocess.TimeoutExpired:
            stopped = stop_after is not None
            (process.terminate if stopped else process.kill)()
            stdout, stderr = process.communicate()
    return SampleRun(process.returncode, stdout, stderr, time.monotonic() - started, stopped)


class TlsEndpoint:
    """A TLS endpoint on `host:5671` (a loopback address of its own, so that it never meets another
    listener) that passes every connection on to the front end's plain AMQP port: what a sample
    that takes a host name and a credential reaches.

    The SDK checks a server's certificate against `certifi.where()` only (no environment setting
    changes that), so its certificate (made with the `openssl` command) is trusted through
    `trust_path`: a directory to put first on `PYTHONPATH`, whose `certifi` module answers a bundle
    of certifi's own certificates and this one.

    Example:
        with TlsEndpoint(workdir, 5672) as endpoint:
            env = {"SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": endpoint.host, "PYTHONPATH": str(endpoint.trust_path)}
    """

    def __init__(self, workdir: Path, target_port: int) -> None:
        self.host = _free_loopback_host()
        self.trust_path = workdir / "trust"
        self._cert_file = workdir / "endpoint-cert.pem"
        self._key_file = workdir / "endpoint-key.pem"
        self._target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-endpoint", daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> TlsEndpoint:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        f"/CN={self.host}", "-addext", f"subjectAltName=IP:{self.host}", "-keyout",
                        str(self._key_file), "-out", str(self._cert_file)], check=True, capture_output=True)
        self._write_trust()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self._cert_file), str(self._key_file))
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._pass_on, self.host, AMQPS_PORT, ssl=context), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _write_trust(self) -> None:
        """The `certifi` module of `trust_path`, and its bundle."""
        import certifi

        package = self.trust_path / "certifi"
        package.mkdir(parents=True, exist_ok=True)
        bundle = package / "cacert.pem"
        bundle.write_text(Path(certifi.where()).read_text() + "\n" + self._cert_file.read_text())
        (package / "__init__.py").write_text(TRUST_MODULE)

    async def _pass_on(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        await asyncio.gather(_pipe(reader, target_writer), _pipe(target_reader, writer), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy bytes from `reader` to `writer` until either side closes."""
    try:
        while data := await reader.read(64 * 1024):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


def _free_loopback_host() -> str:
    """A loopback address (127.x.y.z) with nothing listening on port 5671."""
    for _ in range(20):
        host = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        with socket.socket() as probe:
            if probe.connect_ex((host, AMQPS_PORT)) != 0:
                return host
    raise RuntimeError("no loopback address with port 5671 free")


def openssl_available() -> bool:
    """Whether the `openssl` command (which makes the TLS endpoint's certificate) is installed."""
    return shutil.which("openssl") is not None


def sample_environment(values: dict[str, str]) -> dict[str, str]:
    """This process's environment with `values` (the samples' `SERVICEBUS_*` settings) on top."""
    return {**os.environ, **values}
