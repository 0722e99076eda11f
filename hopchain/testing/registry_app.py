"""Provisioning Apicurio Registry for :class:`~hopchain.testing.registry.LocalRegistry`.

The registry is published on Maven Central as one Quarkus application archive
(``io.apicurio:apicurio-registry-app:<version>:tar.gz:all``, about 160 MB). Maven resolves it
once; it is unpacked into the user's cache (``<cache>/registry/apicurio-registry-<version>``,
see :func:`~hopchain.testing._provision.default_cache_dir`) and the archive copy is deleted. A
marker file written last makes an interrupted download or unpack start again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from hopchain.exceptions import LocalRegistryError
from hopchain.testing._provision import exclusive, tail_file

__all__ = [
    "APICURIO_VERSION",
    "ENV_REGISTRY_VERSION",
    "RegistryApp",
    "cached_registry_app",
    "resolve_registry_app",
]

APICURIO_VERSION = "3.3.3"
"""The Apicurio Registry release the kit runs unless told otherwise."""
ENV_REGISTRY_VERSION = "HOPCHAIN_REGISTRY_VERSION"
"""Overrides :data:`APICURIO_VERSION` (a 3.x release; 3.x needs Java 21+)."""

_GROUP_ARTIFACT = "io.apicurio:apicurio-registry-app"
_MARKER = "resolved.json"
_RUNNER = "quarkus-run.jar"
_RESOLVE_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True, slots=True)
class RegistryApp:
    """An unpacked Apicurio Registry, ready for ``java -jar app/quarkus-run.jar``."""

    folder: Path
    """The unpacked Quarkus application (``quarkus-run.jar``, ``lib/``, ``app/``)."""
    version: str
    """Its Apicurio Registry version."""
    archive_bytes: int = 0
    """Size of the archive Maven resolved, as recorded when it was unpacked."""
    resolve_seconds: float = 0.0
    """Seconds Maven took to resolve the archive, as recorded then."""

    @property
    def runner(self) -> Path:
        """The jar that starts the application."""
        return self.folder / _RUNNER


def _version_dir(cache_dir: Path, version: str | None) -> tuple[Path, str]:
    wanted = version or os.environ.get(ENV_REGISTRY_VERSION) or APICURIO_VERSION
    return cache_dir / "registry" / f"apicurio-registry-{wanted}", wanted


def cached_registry_app(cache_dir: Path, version: str | None = None) -> RegistryApp | None:
    """The registry unpacked by an earlier successful resolve, if there is one."""
    folder, wanted = _version_dir(cache_dir, version)
    try:
        recorded = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    app = folder / "app"
    if not isinstance(recorded, dict) or not (app / _RUNNER).is_file():
        return None
    return RegistryApp(
        folder=app,
        version=wanted,
        archive_bytes=int(recorded.get("archive_bytes", 0)),
        resolve_seconds=float(recorded.get("resolve_seconds", 0.0)),
    )


def resolve_registry_app(cache_dir: Path, version: str | None = None) -> RegistryApp:
    """Resolve and unpack Apicurio Registry once; later calls reuse the cache.

    Concurrent callers (two test sessions) wait for each other on a file lock.

    Raises:
        LocalRegistryError: Maven is missing, could not resolve the archive, or the archive
            is not the Quarkus application expected.
    """
    found = cached_registry_app(cache_dir, version)
    if found is not None:
        return found
    folder, wanted = _version_dir(cache_dir, version)
    with exclusive(folder.parent / f".{folder.name}.lock"):
        found = cached_registry_app(cache_dir, version)
        if found is not None:
            return found
        download = folder / "download.partial"
        unpacking = folder / "app.partial"
        for stale in (download, unpacking, folder / "app"):
            shutil.rmtree(stale, ignore_errors=True)
        download.mkdir(parents=True)
        started = time.monotonic()
        archive = _download(download, wanted)
        resolve_seconds = time.monotonic() - started
        archive_bytes = archive.stat().st_size
        _unpack(archive, unpacking)
        unpacking.rename(folder / "app")
        shutil.rmtree(download, ignore_errors=True)
        marker = {
            "version": wanted,
            "archive_bytes": archive_bytes,
            "resolve_seconds": round(resolve_seconds, 3),
            "unpack_seconds": round(time.monotonic() - started - resolve_seconds, 3),
        }
        (folder / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return RegistryApp(folder / "app", wanted, archive_bytes, resolve_seconds)


def _download(into: Path, version: str) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalRegistryError(
            "`mvn` is not on PATH; the local schema registry is resolved with it: install "
            "Apache Maven (Debian: apt-get install maven)"
        )
    artifact = f"{_GROUP_ARTIFACT}:{version}:tar.gz:all"
    log = into / "maven.out"
    command = [
        mvn,
        "-B",
        "-q",
        "--no-transfer-progress",
        "dependency:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={into}",
    ]
    try:
        with log.open("w", encoding="utf-8") as output:
            # Run in the empty download folder: a pom.xml in the caller's folder is not ours.
            result = subprocess.run(  # noqa: S603 - fixed argument list, no shell
                command,
                cwd=into,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=_RESOLVE_TIMEOUT_SECONDS,
                check=False,
            )
    except subprocess.TimeoutExpired as exc:
        raise LocalRegistryError(
            f"Maven did not resolve {artifact} within {_RESOLVE_TIMEOUT_SECONDS:.0f} s; check "
            "that the Maven repository is reachable and run again"
        ) from exc
    archives = sorted(into.glob("*.tar.gz"))
    if result.returncode != 0 or len(archives) != 1:
        raise LocalRegistryError(
            f"Maven could not resolve {artifact} (exit {result.returncode}); check the Maven "
            f"repository settings, or set {ENV_REGISTRY_VERSION} to a release that exists. "
            f"Maven said:\n{tail_file(log)}"
        )
    return archives[0]


def _unpack(archive: Path, into: Path) -> None:
    if not hasattr(tarfile, "data_filter"):
        raise LocalRegistryError(
            f"unpacking {archive.name} safely needs tarfile's data filter, which Python has "
            "from 3.11.4 on; upgrade Python"
        )
    try:
        with tarfile.open(archive, "r:gz") as tar:
            # The "data" filter refuses absolute paths, links out of the folder and devices.
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        shutil.rmtree(into, ignore_errors=True)
        raise LocalRegistryError(
            f"cannot unpack {archive.name} ({exc}); delete {archive.parent.parent} and run again"
        ) from exc
    if not (into / _RUNNER).is_file():
        shutil.rmtree(into, ignore_errors=True)
        raise LocalRegistryError(
            f"{archive.name} holds no {_RUNNER} at its top: not the Quarkus application "
            f"expected; set {ENV_REGISTRY_VERSION} to a 3.x release"
        )
