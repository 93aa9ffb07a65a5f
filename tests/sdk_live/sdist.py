"""The azure-servicebus source package whose live tests the runner runs: fetched with pip into a
cache directory, checked against the SHA-256 pinned here, and its `tests/` extracted."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

SDK_VERSION = "7.15.0"
SDIST_NAME = f"azure_servicebus-{SDK_VERSION}.tar.gz"
SDIST_SHA256 = "62c73f3d9efbaf0089a375adc5ef992ffe6d7d0b1218b8462265aa30ad352c3e"
"""The SHA-256 of azure_servicebus-7.15.0.tar.gz as PyPI serves it."""


class SdistError(RuntimeError):
    """The source package could not be fetched, or is not the one pinned here."""


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at `path`."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(cache_dir: Path) -> Path:
    """The pinned source package in `cache_dir`, downloaded with pip when it is not there yet;
    raises SdistError when pip fails or the file's hash is not the pinned one."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / SDIST_NAME
    if not path.exists():
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--disable-pip-version-check",
             "-d", str(cache_dir), f"azure-servicebus=={SDK_VERSION}"],
            capture_output=True, text=True, check=False, timeout=600)
        if download.returncode != 0 or not path.exists():
            raise SdistError(f"pip could not download azure-servicebus=={SDK_VERSION} into {cache_dir} "
                             f"(exit {download.returncode}): {download.stderr.strip()[-500:]}")
    actual = sha256_of(path)
    if actual != SDIST_SHA256:
        raise SdistError(f"{path} has SHA-256 {actual}, not the pinned {SDIST_SHA256}: delete it to download it "
                         "again, or pin the new hash in tests/sdk_live/sdist.py after checking where it came from")
    return path


def extract_tests(sdist: Path, destination: Path) -> Path:
    """Extract the package's `tests/` into `destination` (emptied first); returns `destination/tests`."""
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    prefix = f"azure_servicebus-{SDK_VERSION}/tests/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for member in members:
            member.name = member.name[len(f"azure_servicebus-{SDK_VERSION}/"):]
        archive.extractall(destination, members=members, filter="data")
    return destination / "tests"
