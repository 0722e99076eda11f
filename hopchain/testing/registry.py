"""A real schema registry on this machine, for development and tests: Apicurio Registry.

:class:`LocalRegistry` runs Apicurio Registry (a Quarkus application, in-memory storage) on
127.0.0.1 from the archive Maven resolves once into the user's cache (see
:mod:`hopchain.testing.registry_app`). Clients speak Confluent's Schema Registry API to it at
:attr:`LocalRegistry.url` (``http://127.0.0.1:PORT/apis/ccompat/v7``), so
``confluent_kafka.schema_registry.SchemaRegistryClient`` and its Avro, Protobuf and JSON Schema
serdes work against it unchanged::

    with LocalRegistry() as registry:          # free ports, temporary data directory
        client = SchemaRegistryClient({"url": registry.url})

It needs Java 21 or newer, found by :func:`~hopchain.testing.jdk.find_java` (the ``java``
argument, ``$HOPCHAIN_REGISTRY_JAVA``, ``$JAVA_HOME``, PATH, ``/usr/lib/jvm``), and Maven for
the first resolve. The JVM runs in its own process group with its output in
``<data dir>/registry.out``; a pid file and ``registry.json`` let another process find, report
and stop it: that is what ``hopchain dev registry status|stop`` use. Schemas live in memory
only: a restart forgets them.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import errno
import json
import shutil
import signal
import socket
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from hopchain.exceptions import LocalRegistryError
from hopchain.testing._jvm import POLL_SECONDS, JvmProcess, spawn_logged
from hopchain.testing._provision import default_cache_dir, free_port, tail_file
from hopchain.testing.broker_state import pid_alive, signal_group
from hopchain.testing.jdk import JavaRuntime, find_java
from hopchain.testing.registry_app import RegistryApp, cached_registry_app, resolve_registry_app

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

__all__ = [
    "CCOMPAT_PATH",
    "ENV_REGISTRY_JAVA",
    "MINIMUM_JAVA",
    "LocalRegistry",
    "RegistryState",
    "RegistryStatus",
    "default_registry_dir",
    "registry_java",
    "registry_ready",
    "registry_status",
    "stop_registry",
]

ENV_REGISTRY_JAVA = "HOPCHAIN_REGISTRY_JAVA"
"""The ``java`` binary to run the registry with (Java 21+); default: see :func:`find_java`."""
MINIMUM_JAVA = 21
"""Apicurio Registry 3's classes need Java 21 (class file version 65)."""
CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where Apicurio serves Confluent's Schema Registry API."""

STATE_FILE = "registry.json"
PID_FILE = "registry.pid"
CONSOLE_LOG = "registry.out"
# A system property that marks the JVM as this data directory's, so a stale pid file whose
# number was reused by another process is never taken for the registry.
_OWNER_PROPERTY = "hopchain.registry.data-dir"
_HTTP_TIMEOUT_SECONDS = 2.0
_KILL_WAIT_SECONDS = 10.0


class RegistryStatus(enum.StrEnum):
    """What a data directory's registry is doing, as seen from any process."""

    RUNNING = "running"
    """The JVM is alive and was seen ready (health check up, API answering)."""
    STARTING = "starting"
    """The JVM is alive but has not been seen ready yet."""
    STOPPED = "stopped"
    """No live registry JVM belongs to the data directory."""


@dataclass(frozen=True, slots=True)
class RegistryState:
    """What a started registry wrote to ``registry.json`` in its data directory."""

    pid: int
    """Process id of the JVM; also its process group id."""
    url: str
    """Base URL of the Confluent-compatible API (``.../apis/ccompat/v7``)."""
    port: int
    """HTTP port of the APIs."""
    management_port: int
    """Port of the management interface (``/health/ready``, metrics)."""
    version: str
    """Apicurio Registry version."""
    java: str
    """The ``java`` binary it runs on."""
    data_dir: str
    """The data directory (pid file, state, console log)."""
    log_path: str
    """The JVM's console output."""
    started_at: float
    """Unix time at which the JVM was started."""
    startup_seconds: float
    """Seconds from starting the JVM until it was ready."""

    def to_json(self) -> str:
        """Serialise for ``registry.json``."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RegistryState:
        """Parse ``registry.json``; raises ``ValueError``, ``KeyError`` or ``TypeError`` if bad."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise TypeError("registry state is not a JSON object")
        return cls(
            pid=int(raw["pid"]),
            url=str(raw["url"]),
            port=int(raw["port"]),
            management_port=int(raw["management_port"]),
            version=str(raw["version"]),
            java=str(raw["java"]),
            data_dir=str(raw["data_dir"]),
            log_path=str(raw["log_path"]),
            started_at=float(raw["started_at"]),
            startup_seconds=float(raw["startup_seconds"]),
        )


def default_registry_dir() -> Path:
    """The data directory ``hopchain dev registry`` uses: ``<user cache>/registry/run``."""
    return default_cache_dir() / "registry" / "run"


def registry_java(
    java: Path | str | None = None, *, named_by: str = "the java argument"
) -> JavaRuntime:
    """The Java 21+ runtime the registry runs on (``java``, else see :func:`find_java`).

    ``named_by`` names where ``java`` came from (``--java``), for the message.

    Raises:
        LocalRegistryError: none was found, or the one named is too old; one line naming
            what was found and how to fix it.
    """
    search = find_java(MINIMUM_JAVA, explicit=java, variable=ENV_REGISTRY_JAVA, named_by=named_by)
    if search.found is None:
        raise LocalRegistryError(search.missing("Apicurio Registry", ENV_REGISTRY_JAVA))
    return search.found


def registry_ready(port: int, management_port: int) -> bool:
    """Whether the registry on these ports reports ready and its Confluent API answers."""
    return _http_ok(f"http://127.0.0.1:{management_port}/health/ready") and _http_ok(
        f"http://127.0.0.1:{port}{CCOMPAT_PATH}/subjects"
    )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310 - http on loopback only
            return bool(response.status == 200)  # noqa: PLR2004 - HTTP OK
    except (urllib.error.URLError, OSError, ValueError):
        return False


class LocalRegistry:
    """One real Apicurio Registry on 127.0.0.1, storage in memory.

    Args:
        java: the ``java`` binary (21+); default ``$HOPCHAIN_REGISTRY_JAVA``, else the first new
            enough of ``$JAVA_HOME``, PATH and ``/usr/lib/jvm``.
        cache_dir: where the registry is unpacked; default ``$HOPCHAIN_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/hopchain``, else ``~/.cache/hopchain``.
        data_dir: where the pid file, state and console log go; default a new temporary
            directory, removed again by :meth:`stop` unless ``keep_data``.
        port: HTTP port of the APIs; ``None`` or ``0`` picks a free one.
        management_port: port of the health and metrics endpoints; picked the same way.
        version: Apicurio Registry version; default ``$HOPCHAIN_REGISTRY_VERSION``, else 3.3.3.
        heap: JVM maximum heap (``-Xmx``).
        start_timeout: seconds to wait for the registry to become ready.
        stop_timeout: seconds to wait after SIGTERM before SIGKILL.
        keep_data: keep the data directory after :meth:`stop`; default: keep it unless it is
            the temporary directory made for this instance.
    """

    def __init__(
        self,
        *,
        java: Path | str | None = None,
        cache_dir: Path | str | None = None,
        data_dir: Path | str | None = None,
        port: int | None = None,
        management_port: int | None = None,
        version: str | None = None,
        heap: str = "384m",
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        keep_data: bool | None = None,
    ) -> None:
        self._java_requested = java
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else default_cache_dir()
        self._data_dir = Path(data_dir).expanduser().resolve() if data_dir else None
        self._requested_ports = (port or None, management_port or None)
        self._wanted_version = version
        self.heap = heap
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._keep_data = keep_data
        self._temp_data = False
        self._app: RegistryApp | None = None
        self._process: JvmProcess | None = None
        self.java: JavaRuntime | None = None
        self.port = 0
        self.management_port = 0
        self.resolve_seconds = 0.0
        self.startup_seconds = 0.0

    # -- what callers read ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the Confluent-compatible API; valid once :meth:`start` returned."""
        if not self.port:
            raise LocalRegistryError("the registry has no address yet; call start() first")
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def version(self) -> str:
        """The Apicurio Registry version (resolves it if that has not happened)."""
        return self.resolve().version

    @property
    def data_dir(self) -> Path:
        """The data directory; made on first use when none was given."""
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="hopchain-registry-")).resolve()
            self._temp_data = True
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The JVM's console output."""
        return self.data_dir / CONSOLE_LOG

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._process.pid if self._process is not None else None

    # -- lifecycle --------------------------------------------------------------------------

    def resolve(self) -> RegistryApp:
        """Resolve and unpack the registry (once per cache); returns where it is."""
        if self._app is None:
            started = time.monotonic()
            cached = cached_registry_app(self.cache_dir, self._wanted_version)
            self._app = cached or resolve_registry_app(self.cache_dir, self._wanted_version)
            if cached is None:
                self.resolve_seconds = time.monotonic() - started
        return self._app

    def start(self) -> Self:
        """Find Java, resolve the registry, start it; return once it is ready.

        Raises:
            LocalRegistryError: no Java 21+ or no Maven, a port is taken, the JVM died or did
                not become ready in time. The message names the log to read.
        """
        if self._process is not None:
            raise LocalRegistryError(f"this registry is already running ({self.url})")
        try:
            java, app = self._prepare()
        except BaseException:
            self._discard_temp_data()
            raise
        data_dir = self.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        _remove_run_files(data_dir)
        started_at = time.time()
        self._spawn(java, app)
        try:
            self._wait_ready()
        except BaseException as exc:
            self._terminate()
            # A registry that failed keeps its log for reading; an interrupted start does not.
            if not isinstance(exc, LocalRegistryError):
                self._discard_temp_data()
            raise
        state = RegistryState(
            pid=self._process.pid if self._process is not None else 0,
            url=self.url,
            port=self.port,
            management_port=self.management_port,
            version=app.version,
            java=str(java.path),
            data_dir=str(data_dir),
            log_path=str(self.log_path),
            started_at=started_at,
            startup_seconds=round(self.startup_seconds, 3),
        )
        (data_dir / STATE_FILE).write_text(state.to_json(), encoding="utf-8")
        return self

    def detach(self) -> RegistryState:
        """Leave the registry running after this process exits; return what was recorded.

        Stop it later with :func:`stop_registry` on the same data directory.
        """
        state = _read_state(self.data_dir)
        if self._process is None or state is None:
            raise LocalRegistryError("only a started registry can be detached; call start()")
        atexit.unregister(self.stop)
        self._process = None
        return state

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Stop the registry (SIGTERM to its process group, SIGKILL after ``stop_timeout``).

        ``keep_data`` overrides the constructor's choice, for example to keep a temporary data
        directory (and its log) after a failed test session.
        """
        if self._process is None:
            return
        self._terminate()
        if keep_data is not None:
            self._keep_data = keep_data
        keep = self._keep_data if self._keep_data is not None else not self._temp_data
        if not keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- steps --------------------------------------------------------------------------------

    def _prepare(self) -> tuple[JavaRuntime, RegistryApp]:
        """Everything before the JVM starts: Java, the unpacked registry, the ports."""
        java = self.java = registry_java(self._java_requested)
        app = self.resolve()
        if registry_status(self.data_dir)[0] is not RegistryStatus.STOPPED:
            raise LocalRegistryError(
                f"a registry already runs from {self.data_dir}; stop it with "
                "`hopchain dev registry stop` or use another data directory"
            )
        self.port, self.management_port = self._choose_ports()
        return java, app

    def _discard_temp_data(self) -> None:
        self.port = self.management_port = 0
        if self._temp_data and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None
            self._temp_data = False

    def _choose_ports(self) -> tuple[int, int]:
        port, management_port = self._requested_ports
        if port is not None and port == management_port:
            raise LocalRegistryError(
                f"--port and --management-port are both {port}; give them different ports "
                "(0 picks a free one)"
            )
        for requested, option in ((port, "--port"), (management_port, "--management-port")):
            if requested is not None:
                _check_port_free(requested, option)
        port = port or free_port()
        management_port = management_port or free_port()
        while management_port == port:
            management_port = free_port()
        return port, management_port

    def _spawn(self, java: JavaRuntime, app: RegistryApp) -> None:
        command = [
            str(java.path),
            f"-Xmx{self.heap}",
            # A development registry lives minutes, on small machines: C1 only and the serial
            # collector make it ready in about half the time, and it never runs hot enough to
            # miss C2.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-D{_OWNER_PROPERTY}={self.data_dir}",
            # Loopback only: the management interface listens on 0.0.0.0:9000 by default.
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={self.management_port}",
            "-jar",
            str(app.runner),
        ]
        pid = spawn_logged(str(java.path), command, self.log_path, "hopchain LocalRegistry")
        self._process = JvmProcess(pid, child=True)
        (self.data_dir / PID_FILE).write_text(f"{pid}\n", encoding="utf-8")
        atexit.register(self.stop)

    def _died_error(self, what: str) -> LocalRegistryError:
        exit_status = self._process.exit_status if self._process is not None else None
        status = "" if exit_status is None else f" (exit status {exit_status})"
        return LocalRegistryError(
            f"the schema registry {what}{status}. Last lines of {self.log_path}:\n"
            f"{tail_file(self.log_path)}"
        )

    def _wait_ready(self) -> None:
        started = time.monotonic()
        deadline = started + self.start_timeout
        while not registry_ready(self.port, self.management_port):
            if self._process is None or not self._process.alive():
                raise self._died_error("exited during start-up")
            if time.monotonic() > deadline:
                raise self._died_error(
                    f"was not ready on ports {self.port} and {self.management_port} within "
                    f"{self.start_timeout:.0f} s"
                )
            time.sleep(POLL_SECONDS)
        self.startup_seconds = time.monotonic() - started

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        signal_group(process.pid, signal.SIGTERM)
        if not _gone_within(process.alive, self.stop_timeout):
            signal_group(process.pid, signal.SIGKILL)
            if not _gone_within(process.alive, _KILL_WAIT_SECONDS):
                raise LocalRegistryError(f"the registry JVM (pid {process.pid}) survived SIGKILL")
        self._process = None
        atexit.unregister(self.stop)
        _remove_run_files(self.data_dir)


# -- seen from any process ---------------------------------------------------------------------


def registry_status(data_dir: Path) -> tuple[RegistryStatus, RegistryState | None]:
    """Report on the registry of ``data_dir`` from any process (the CLI's ``status``)."""
    pid = _live_pid(data_dir)
    if pid is None:
        return RegistryStatus.STOPPED, None
    state = _read_state(data_dir)
    if state is not None and state.pid == pid:
        return RegistryStatus.RUNNING, state
    return RegistryStatus.STARTING, None


def stop_registry(data_dir: Path, *, timeout: float = 30.0) -> int | None:
    """Stop the registry of ``data_dir`` started by any process; return its pid, or None.

    Sends SIGTERM to its process group, then SIGKILL after ``timeout`` seconds.
    """
    pid = _live_pid(data_dir)
    if pid is None:
        _remove_run_files(data_dir)
        return None
    signal_group(pid, signal.SIGTERM)
    if not _gone_within(lambda: pid_alive(pid), timeout):
        signal_group(pid, signal.SIGKILL)
        if not _gone_within(lambda: pid_alive(pid), _KILL_WAIT_SECONDS):
            raise LocalRegistryError(f"the registry JVM (pid {pid}) survived SIGKILL")
    _remove_run_files(data_dir)
    return pid


def _check_port_free(port: int, option: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # The JVM sets SO_REUSEADDR too: a port with only TIME_WAIT connections is usable.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise LocalRegistryError(f"cannot bind 127.0.0.1:{port}: {exc.strerror}") from exc
            raise LocalRegistryError(
                f"port {port} on 127.0.0.1 is already in use (is a registry already running? "
                f"try `hopchain dev registry status`); stop what holds it, or pass another "
                f"{option} (0 picks a free one)"
            ) from exc


def _gone_within(alive: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def _live_pid(data_dir: Path) -> int | None:
    """The pid in the pid file if that process is alive and is this directory's registry."""
    try:
        pid = int((data_dir / PID_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    if not pid_alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid  # no /proc here: trust the pid file
    owner = f"-D{_OWNER_PROPERTY}={data_dir.resolve()}\0".encode()
    return pid if owner in cmdline else None


def _read_state(data_dir: Path) -> RegistryState | None:
    try:
        return RegistryState.from_json((data_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remove_run_files(data_dir: Path) -> None:
    for name in (PID_FILE, STATE_FILE):
        with contextlib.suppress(FileNotFoundError):
            (data_dir / name).unlink()
