"""Provisioning steps for the local broker: where its files are, its jars, its ports.

Kept apart from the process management in :mod:`hopchain.testing.kafka`. Everything here is
synchronous and has no side effect outside the cache and data directories it is given.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from hopchain.exceptions import LocalKafkaError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ENV_CACHE_DIR",
    "ENV_KAFKA_HOME",
    "ENV_KAFKA_VERSION",
    "PACKAGED_KAFKA_HOME",
    "TOOLS_LOG4J2_CONFIG",
    "ResolvedJars",
    "cached_jars",
    "check_port_free",
    "default_cache_dir",
    "exclusive",
    "find_kafka_home",
    "free_port",
    "pom_kafka_version",
    "render_properties",
    "require_tool",
    "resolve_jars",
    "tail_file",
]

ENV_KAFKA_HOME = "HOPCHAIN_KAFKA_HOME"
"""Folder holding ``pom.xml``, ``server.properties.template`` and the log4j2 configurations.

Default: the copy shipped inside the package (:data:`PACKAGED_KAFKA_HOME`)."""
ENV_CACHE_DIR = "HOPCHAIN_CACHE_DIR"
"""Where resolved jars and the CLI's broker data live; default :func:`default_cache_dir`."""
ENV_KAFKA_VERSION = "HOPCHAIN_KAFKA_VERSION"
"""Overrides the broker version pinned in ``pom.xml`` (for example ``4.3.1``)."""

POM = "pom.xml"
PROPERTIES_TEMPLATE = "server.properties.template"
LOG4J2_CONFIG = "log4j2.properties"
TOOLS_LOG4J2_CONFIG = "tools-log4j2.properties"

PACKAGED_KAFKA_HOME = Path(__file__).resolve().parent / "kafka_home"
"""The Maven project and templates shipped as package data (``deploy/kafka`` links here)."""

_MARKER = "resolved.json"
_RESOLVE_TIMEOUT_SECONDS = 900.0
_TAIL_LINES = 20

_INSTALL_HINTS = {
    "java": "a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)",
    "mvn": "Apache Maven (Debian: apt-get install maven)",
}


def require_tool(name: str) -> str:
    """Return the absolute path of ``name`` on PATH, or raise a one-line error naming the fix."""
    found = shutil.which(name)
    if found is None:
        hint = _INSTALL_HINTS.get(name, name)
        raise LocalKafkaError(
            f"`{name}` is not on PATH; the local Kafka broker needs it: install {hint}"
        )
    return found


def find_kafka_home(explicit: Path | str | None = None) -> Path:
    """Find the folder with the broker's ``pom.xml``.

    ``explicit``, then ``$HOPCHAIN_KAFKA_HOME``, then the copy shipped in the package, so an
    installed wheel needs no checkout.
    """
    if explicit is None and os.environ.get(ENV_KAFKA_HOME):
        explicit = os.environ[ENV_KAFKA_HOME]
    home = PACKAGED_KAFKA_HOME if explicit is None else Path(explicit).expanduser().resolve()
    if not (home / POM).is_file():
        if explicit is None:
            raise LocalKafkaError(
                f"the installed hopchain package lacks {home / POM}; reinstall hopchain, or "
                f"set {ENV_KAFKA_HOME} to a folder that holds {POM}"
            )
        raise LocalKafkaError(
            f"{home} has no {POM}; point {ENV_KAFKA_HOME} (or the kafka_home argument) at a "
            "folder like hopchain/testing/kafka_home"
        )
    return home


def default_cache_dir() -> Path:
    """Where jars and the CLI's broker data go: the user's cache, never a checkout.

    ``$HOPCHAIN_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/hopchain``, else
    ``~/.cache/hopchain``.
    """
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG specification says a relative path is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return (base / "hopchain").resolve()


def pom_kafka_version(home: Path) -> str:
    """The ``<kafka.version>`` property pinned in ``home/pom.xml``."""
    text = (home / POM).read_text(encoding="utf-8")
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", text)
    if match is None:
        raise LocalKafkaError(f"{home / POM} has no <kafka.version> property; add one")
    return match.group(1)


@dataclass(frozen=True, slots=True)
class ResolvedJars:
    """A folder of broker jars, ready for ``java -cp 'libs/*'``."""

    libs: Path
    """The folder holding every runtime jar."""
    kafka_version: str
    """The version of ``kafka-clients`` found in ``libs``: the broker's version."""


def _version_dir(home: Path, cache_dir: Path, version: str | None) -> tuple[Path, str]:
    wanted = version or os.environ.get(ENV_KAFKA_VERSION) or pom_kafka_version(home)
    # One folder per version and pom: two installed hopchain versions (or checkouts) sharing
    # the user cache never re-resolve, nor delete, jars the other's broker is running from.
    return cache_dir / "kafka" / f"{wanted}-{_pom_digest(home)[:12]}", wanted


def _pom_digest(home: Path) -> str:
    return hashlib.sha256((home / POM).read_bytes()).hexdigest()


def _jar_version(libs: Path) -> str:
    for jar in libs.glob("kafka-clients-*.jar"):
        return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")
    raise LocalKafkaError(f"{libs} holds no kafka-clients jar; delete {libs.parent} and retry")


def cached_jars(home: Path, cache_dir: Path, version: str | None = None) -> ResolvedJars | None:
    """The jars of an earlier successful resolve for the current ``pom.xml``, if any."""
    folder, _ = _version_dir(home, cache_dir, version)
    marker = folder / _MARKER
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("pom_sha256") != _pom_digest(home):
        return None
    libs = folder / "libs"
    return ResolvedJars(libs=libs, kafka_version=_jar_version(libs))


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (made if missing): one resolver at a time."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def resolve_jars(home: Path, cache_dir: Path, version: str | None = None) -> ResolvedJars:
    """Resolve the broker's runtime jars with Maven once; later calls reuse the cache.

    A marker file is written only after Maven succeeded and the jars were checked, so an
    interrupted resolve is redone. Concurrent callers wait for each other on a file lock.
    """
    found = cached_jars(home, cache_dir, version)
    if found is not None:
        return found
    folder, wanted = _version_dir(home, cache_dir, version)
    with exclusive(folder / ".lock"):
        found = cached_jars(home, cache_dir, version)
        if found is not None:
            return found
        mvn = require_tool("mvn")
        partial = folder / "libs.partial"
        libs = folder / "libs"
        for stale in (partial, libs):
            shutil.rmtree(stale, ignore_errors=True)
        command = [
            mvn,
            "-B",
            "-q",
            "--no-transfer-progress",
            "-f",
            str(home / POM),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
            f"-Dkafka.version={wanted}",
        ]
        started = time.monotonic()
        try:
            result = subprocess.run(  # noqa: S603 - fixed argument list, no shell
                command,
                cwd=home,
                capture_output=True,
                text=True,
                timeout=_RESOLVE_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalKafkaError(
                f"Maven did not resolve Kafka {wanted} within {_RESOLVE_TIMEOUT_SECONDS:.0f} s; "
                "check that the Maven repository is reachable and run again"
            ) from exc
        if result.returncode != 0:
            tail = _tail_text(result.stdout + result.stderr)
            raise LocalKafkaError(
                f"Maven could not resolve org.apache.kafka:kafka_2.13:{wanted} "
                f"(exit {result.returncode}); check the Maven repository settings, or set "
                f"{ENV_KAFKA_VERSION} to another version (4.3.1 is known to exist). "
                f"Maven said:\n{tail}"
            )
        _check_logging_jars(partial)
        partial.rename(libs)
        resolved = ResolvedJars(libs=libs, kafka_version=_jar_version(libs))
        marker = {
            "kafka_version": resolved.kafka_version,
            "pom_sha256": _pom_digest(home),
            "jars": sorted(jar.name for jar in libs.glob("*.jar")),
            "resolve_seconds": round(time.monotonic() - started, 3),
        }
        (folder / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        return resolved


def _check_logging_jars(libs: Path) -> None:
    slf4j = sorted(jar.name for jar in libs.glob("slf4j-api-*.jar"))
    if len(slf4j) != 1 or not slf4j[0].startswith("slf4j-api-1.7"):
        raise LocalKafkaError(
            f"expected exactly one slf4j-api 1.7.x jar in {libs}, found {slf4j or 'none'}; "
            "the log4j-slf4j-impl binding in pom.xml only serves slf4j 1.x"
        )
    if not any(libs.glob("log4j-slf4j-impl-*.jar")):
        raise LocalKafkaError(f"log4j-slf4j-impl is missing from {libs}; check pom.xml")


def _tail_text(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def tail_file(path: Path, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file, or a note that it is missing."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"
    return _tail_text(text, lines) or f"({path} is empty)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def check_port_free(port: int, option: str) -> None:
    """Raise a one-line error if something already listens on ``127.0.0.1:port``.

    ``option`` names the setting to change (``--port``), so the message says what to do.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # The JVM sets SO_REUSEADDR too: a port with only TIME_WAIT connections is usable.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise LocalKafkaError(f"cannot bind 127.0.0.1:{port}: {exc.strerror}") from exc
            raise LocalKafkaError(
                f"port {port} on 127.0.0.1 is already in use (is a broker already running? "
                f"try `hopchain dev kafka status`); stop what holds it, or pass another "
                f"{option} (0 picks a free one)"
            ) from exc


def render_properties(
    home: Path,
    data_dir: Path,
    *,
    port: int,
    controller_port: int,
    node_id: int,
    extra_listeners: str = "",
    sasl_settings: str = "",
) -> Path:
    """Write ``server.properties`` for this node into ``data_dir`` and return its path.

    ``extra_listeners`` (``,NAME://host:port`` entries) and ``sasl_settings`` (property
    lines) fill the template's placeholders of the same names; both are empty by default.
    """
    template = Template((home / PROPERTIES_TEMPLATE).read_text(encoding="utf-8"))
    try:
        text = template.substitute(
            port=port,
            controller_port=controller_port,
            node_id=node_id,
            log_dir=data_dir / "kraft",
            extra_listeners=extra_listeners,
            sasl_settings=sasl_settings,
        )
    except (KeyError, ValueError) as exc:
        raise LocalKafkaError(
            f"{home / PROPERTIES_TEMPLATE} has an unknown placeholder ({exc}); the known ones "
            "are port, controller_port, node_id, log_dir, extra_listeners and sasl_settings"
        ) from exc
    if extra_listeners and extra_listeners not in text:
        raise LocalKafkaError(
            f"{home / PROPERTIES_TEMPLATE} has no ${{extra_listeners}} placeholder in its "
            "listeners lines, so the extra listener cannot be added; update it from "
            "hopchain/testing/kafka_home"
        )
    target = data_dir / "server.properties"
    target.write_text(text, encoding="utf-8")
    return target
