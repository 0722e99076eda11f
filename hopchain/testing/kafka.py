"""A real Apache Kafka broker on this machine, for development and tests.

:class:`LocalKafka` runs one combined KRaft broker+controller JVM on 127.0.0.1 from the jars that
the Maven project shipped in the package (``hopchain/testing/kafka_home/pom.xml``) resolves, once,
into the user's cache (``~/.cache/hopchain/kafka/<version>-<pom digest>/libs``; see
:func:`~hopchain.testing._provision.default_cache_dir`). No Docker, no download archive: only
``java`` and ``mvn`` on PATH::

    with LocalKafka() as kafka:          # free ports, temporary data directory
        run_tests_against(kafka.bootstrap)

The broker runs in its own process group with its output in ``<data dir>/kafka.out`` (and
``logs/server.log``). A pid file and ``broker.json`` in the data directory let another process
find, report and stop it: that is what ``hopchain dev kafka status|stop`` use.

Fault tests can :meth:`LocalKafka.restart` the broker on the same data directory and ports
(clients reconnect to the same address), and authentication tests can ask for a second,
SASL_PLAINTEXT listener with users that log in with PLAIN or SCRAM-SHA-256::

    with LocalKafka(sasl_users={"alice": "alice-secret"}) as kafka:
        connect_as("alice", "alice-secret", kafka.sasl_bootstrap)
        kafka.restart()
"""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._jvm import (
    POLL_SECONDS,
    JvmProcess,
    probe_broker,
    spawn_logged,
    tcp_connects,
)
from hopchain.testing._provision import (
    ResolvedJars,
    cached_jars,
    default_cache_dir,
    find_kafka_home,
    require_tool,
    resolve_jars,
    tail_file,
)
from hopchain.testing._sasl import SASL_MECHANISMS, SaslListener
from hopchain.testing.broker_state import (
    CONSOLE_LOG,
    PID_FILE,
    STATE_FILE,
    BrokerState,
    BrokerStatus,
    read_state,
    remove_run_files,
    status_and_pid,
)
from hopchain.testing.kafka_storage import (
    choose_ports,
    choose_sasl_port,
    format_storage,
    java_command,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "SASL_MECHANISMS",
    "LocalKafka",
    "cached_kafka_version",
    "default_run_dir",
    "probe_broker",
]


def default_run_dir() -> Path:
    """The data directory ``hopchain dev kafka`` uses: ``<user cache>/kafka/run``."""
    return default_cache_dir() / "kafka" / "run"


def cached_kafka_version(kafka_home: Path | str | None = None) -> str | None:
    """The broker version of already resolved jars, without resolving anything."""
    home = find_kafka_home(kafka_home)
    jars = cached_jars(home, default_cache_dir())
    return None if jars is None else jars.kafka_version


class LocalKafka:
    """One real Kafka broker (KRaft, broker+controller) on 127.0.0.1.

    Args:
        kafka_home: folder with ``pom.xml``; default: see :func:`find_kafka_home`.
        cache_dir: where jars are cached; default ``$HOPCHAIN_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/hopchain``, else ``~/.cache/hopchain``.
        data_dir: where properties, KRaft data and logs go; default a new temporary directory,
            removed again by :meth:`stop` unless ``keep_data``.
        port: PLAINTEXT port; ``None`` or ``0`` picks a free one (or reuses the port a kept
            data directory was formatted for).
        controller_port: controller port, chosen the same way.
        node_id: the KRaft node id.
        heap: JVM heap size (``-Xms``/``-Xmx``).
        kafka_version: override the version pinned in ``pom.xml``.
        start_timeout: seconds to wait for the broker to become ready.
        stop_timeout: seconds to wait after SIGTERM before SIGKILL.
        keep_data: keep the data directory after :meth:`stop`; default: keep it unless it is
            the temporary directory made for this instance.
        fresh: wipe ``data_dir`` before starting, so it is formatted anew.
        sasl_users: user name -> password; when given, a SASL_PLAINTEXT listener on
            ``sasl_port`` accepts these users with PLAIN and with SCRAM-SHA-256 (see
            :attr:`sasl_bootstrap`). SCRAM credentials are written when the storage is
            formatted, so a kept data directory keeps the users it was formatted with.
            Passwords are stored in clear text in the data directory: for tests only.
        sasl_port: port of the SASL listener; ``None`` or ``0`` picks a free one.
        overrides: broker properties set on the command line, over the template's
            (``{"auto.create.topics.enable": "false"}``).
    """

    def __init__(
        self,
        *,
        kafka_home: Path | str | None = None,
        cache_dir: Path | str | None = None,
        data_dir: Path | str | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        node_id: int = 1,
        heap: str = "512m",
        kafka_version: str | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        keep_data: bool | None = None,
        fresh: bool = False,
        sasl_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.home = find_kafka_home(kafka_home)
        self.overrides = dict(overrides or {})
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else default_cache_dir()
        self._data_dir = Path(data_dir).expanduser().resolve() if data_dir else None
        self._requested_ports = (port or None, controller_port or None)
        self.node_id = node_id
        self.heap = heap
        self._wanted_version = kafka_version
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._keep_data = keep_data
        self._fresh = fresh
        self._sasl = SaslListener(dict(sasl_users)) if sasl_users is not None else None
        self._requested_sasl_port = sasl_port or None
        self._jars: ResolvedJars | None = None
        self._temp_data = False
        self._process: JvmProcess | None = None
        self.port = 0
        self.controller_port = 0
        self.sasl_port = 0
        self.restarts = 0
        self.resolve_seconds = 0.0
        self.format_seconds = 0.0
        self.startup_seconds = 0.0

    # -- what callers read ------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` for clients; valid once :meth:`start` returned."""
        if not self.port:
            raise LocalKafkaError("the broker has no address yet; call start() first")
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the SASL_PLAINTEXT listener; valid once :meth:`start` returned.

        Clients log in there with ``security_protocol="SASL_PLAINTEXT"``, mechanism ``PLAIN``
        or ``SCRAM-SHA-256``, and one of ``sasl_users``.
        """
        if self._sasl is None:
            raise LocalKafkaError(
                "this broker has no SASL listener; pass sasl_users={name: password} to LocalKafka"
            )
        if not self.sasl_port:
            raise LocalKafkaError("the broker has no address yet; call start() first")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def version(self) -> str:
        """The broker's Apache Kafka version (resolves the jars if that has not happened)."""
        return self.resolve().kafka_version

    @property
    def data_dir(self) -> Path:
        """The data directory; made on first use when none was given."""
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="hopchain-kafka-")).resolve()
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

    def resolve(self) -> ResolvedJars:
        """Resolve the broker jars (once per cache); returns where they are."""
        if self._jars is None:
            started = time.monotonic()
            self._jars = resolve_jars(self.home, self.cache_dir, self._wanted_version)
            self.resolve_seconds = time.monotonic() - started
        return self._jars

    def start(self) -> Self:
        """Provision, format and start the broker; return once it answers metadata requests.

        Raises:
            LocalKafkaError: a tool is missing, a port is taken, the JVM died or did not become
                ready in time. The message names the log to read.
        """
        if self._process is not None:
            raise LocalKafkaError(f"this broker is already running ({self.bootstrap})")
        return self._start(fresh=self._fresh)

    def restart(self, *, kill: bool = False) -> Self:
        """Stop the running broker and start it again on the same data directory and ports.

        Topics, records and committed offsets survive; clients see the broker go away and
        come back at the same address. ``kill`` ends the JVM with SIGKILL (no clean
        shutdown: the broker recovers its logs on start) instead of SIGTERM.

        Raises:
            LocalKafkaError: the broker was not running, or did not come back (see
                :meth:`start`).
        """
        if self._process is None:
            raise LocalKafkaError("only a running broker can be restarted; call start() first")
        self._terminate(signal.SIGKILL if kill else signal.SIGTERM)
        self._start(fresh=False)
        self.restarts += 1
        return self

    def _start(self, *, fresh: bool) -> Self:
        try:
            java, jars, properties = self._prepare(fresh=fresh)
        except BaseException:
            self.port = self.controller_port = self.sasl_port = 0
            if self._temp_data:
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self._data_dir = None
                self._temp_data = False
            raise
        data_dir = self.data_dir
        started_at = time.time()
        self._spawn(java, jars, properties)
        try:
            self._wait_ready()
        except BaseException as exc:
            self._terminate()
            # A broker that failed keeps its logs for reading; an interrupted start does not.
            if self._temp_data and not isinstance(exc, LocalKafkaError):
                shutil.rmtree(data_dir, ignore_errors=True)
            raise
        state = BrokerState(
            pid=self._pid_or_fail(),
            bootstrap=self.bootstrap,
            port=self.port,
            controller_port=self.controller_port,
            kafka_version=jars.kafka_version,
            data_dir=str(data_dir),
            log_path=str(self.log_path),
            started_at=started_at,
            startup_seconds=round(self.startup_seconds, 3),
        )
        (data_dir / STATE_FILE).write_text(state.to_json(), encoding="utf-8")
        return self

    def _prepare(self, *, fresh: bool) -> tuple[str, ResolvedJars, Path]:
        """Everything before the JVM starts: tools, ports, jars, properties, storage format."""
        java = require_tool("java")
        data_dir = self.data_dir
        status, state_pid = status_and_pid(data_dir)
        if status is not BrokerStatus.STOPPED:
            raise LocalKafkaError(
                f"a broker (pid {state_pid}) already runs from {data_dir}; stop it with "
                "`hopchain dev kafka stop` or use another data directory"
            )
        if fresh:
            shutil.rmtree(data_dir, ignore_errors=True)
        self.port, self.controller_port = choose_ports(data_dir, *self._requested_ports)
        self.sasl_port = choose_sasl_port(
            data_dir, self._sasl, self._requested_sasl_port, {self.port, self.controller_port}
        )
        jars = self.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        remove_run_files(data_dir)
        return java, jars, self._format_storage(java, jars, data_dir)

    def detach(self) -> BrokerState:
        """Leave the broker running after this process exits; return what was recorded.

        Stop it later with :func:`stop_broker` on the same data directory.
        """
        state = read_state(self.data_dir)
        if self._process is None or state is None:
            raise LocalKafkaError("only a started broker can be detached; call start() first")
        atexit.unregister(self.stop)
        self._process = None
        return state

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Stop the broker (SIGTERM to its process group, SIGKILL after ``stop_timeout``).

        ``keep_data`` overrides the constructor's choice, for example to keep a temporary data
        directory (and its logs) after a failed test session.
        """
        if self._process is None:
            return
        self._terminate()
        if keep_data is not None:
            self._keep_data = keep_data
        if not self._keep_data_dir():
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

    def _keep_data_dir(self) -> bool:
        return self._keep_data if self._keep_data is not None else not self._temp_data

    def _pid_or_fail(self) -> int:
        if self._process is None:
            raise LocalKafkaError("the broker process is gone")
        return self._process.pid

    def _format_storage(self, java: str, jars: ResolvedJars, data_dir: Path) -> Path:
        properties, seconds = format_storage(
            java,
            jars,
            self.home,
            data_dir,
            port=self.port,
            controller_port=self.controller_port,
            node_id=self.node_id,
            sasl=self._sasl,
            sasl_port=self.sasl_port,
        )
        if seconds is not None:
            self.format_seconds = seconds
        return properties

    def _spawn(self, java: str, jars: ResolvedJars, properties: Path) -> None:
        command = [
            *java_command(java, jars, self.home, self.data_dir, heap=self.heap),
            "kafka.Kafka",
            str(properties),
        ]
        for name, value in self.overrides.items():
            command += ["--override", f"{name}={value}"]
        pid = spawn_logged(java, command, self.log_path, "hopchain LocalKafka")
        self._process = JvmProcess(pid, child=True)
        (self.data_dir / PID_FILE).write_text(f"{pid}\n", encoding="utf-8")
        atexit.register(self.stop)

    def _alive(self) -> bool:
        return self._process is not None and self._process.alive()

    def _died_error(self, what: str) -> LocalKafkaError:
        exit_status = self._process.exit_status if self._process is not None else None
        status = "" if exit_status is None else f" (exit status {exit_status})"
        return LocalKafkaError(
            f"the Kafka broker {what}{status}. Last lines of {self.log_path}:\n"
            f"{tail_file(self.log_path)}\n"
            f"Full logs: {self.log_path} and {self.data_dir / 'logs' / 'server.log'}"
        )

    def _wait_ready(self) -> None:
        started = time.monotonic()
        deadline = started + self.start_timeout
        while not tcp_connects(self.port):
            if not self._alive():
                raise self._died_error("exited during start-up")
            if time.monotonic() > deadline:
                raise self._died_error(
                    f"did not open port {self.port} within {self.start_timeout:.0f} s"
                )
            time.sleep(POLL_SECONDS)
        remaining = max(1.0, deadline - time.monotonic())
        try:
            probe_broker(self.bootstrap, timeout=remaining)
        except LocalKafkaError as exc:
            if not self._alive():
                raise self._died_error("exited during start-up") from exc
            raise self._died_error(f"did not answer metadata requests ({exc})") from exc
        self.startup_seconds = time.monotonic() - started

    def _terminate(self, first_signal: signal.Signals = signal.SIGTERM) -> None:
        process = self._process
        if process is None:
            return
        process.stop(first_signal, self.stop_timeout)
        self._process = None
        atexit.unregister(self.stop)
        remove_run_files(self.data_dir)
