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
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._jvm import probe_broker, run_tool, tcp_connects
from hopchain.testing._provision import (
    LOG4J2_CONFIG,
    ResolvedJars,
    cached_jars,
    check_port_free,
    default_cache_dir,
    find_kafka_home,
    free_port,
    render_properties,
    require_tool,
    resolve_jars,
    tail_file,
)
from hopchain.testing._sasl import SASL_MECHANISMS, SaslListener
from hopchain.testing.broker_state import (
    CONSOLE_LOG,
    FORMAT_FILE,
    FORMAT_LOG,
    PID_FILE,
    STATE_FILE,
    BrokerState,
    BrokerStatus,
    pid_alive,
    read_format,
    read_state,
    remove_run_files,
    signal_group,
    status_and_pid,
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

_POLL_SECONDS = 0.1
_KILL_WAIT_SECONDS = 10.0
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


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
        self._pid: int | None = None
        self._is_child = False
        self._exit_status: int | None = None
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
        return self._pid

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
        if self._pid is not None:
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
        if self._pid is None:
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
        self.port, self.controller_port = self._choose_ports(data_dir)
        self.sasl_port = self._choose_sasl_port(data_dir)
        jars = self.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        remove_run_files(data_dir)
        return java, jars, self._format_storage(java, jars, data_dir)

    def detach(self) -> BrokerState:
        """Leave the broker running after this process exits; return what was recorded.

        Stop it later with :func:`stop_broker` on the same data directory.
        """
        state = read_state(self.data_dir)
        if self._pid is None or state is None:
            raise LocalKafkaError("only a started broker can be detached; call start() first")
        atexit.unregister(self.stop)
        self._pid = None
        self._is_child = False
        return state

    def stop(self, *, keep_data: bool | None = None) -> None:
        """Stop the broker (SIGTERM to its process group, SIGKILL after ``stop_timeout``).

        ``keep_data`` overrides the constructor's choice, for example to keep a temporary data
        directory (and its logs) after a failed test session.
        """
        if self._pid is None:
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
        if self._pid is None:
            raise LocalKafkaError("the broker process is gone")
        return self._pid

    def _choose_ports(self, data_dir: Path) -> tuple[int, int]:
        formatted = read_format(data_dir)
        port, controller_port = self._requested_ports
        if formatted is not None:
            old = (int(formatted["port"]), int(formatted["controller_port"]))
            wanted = (port or old[0], controller_port or old[1])
            if wanted != old:
                raise LocalKafkaError(
                    f"{data_dir} was formatted for ports {old[0]}/{old[1]}, not "
                    f"{wanted[0]}/{wanted[1]}; use those ports, or start fresh (--fresh) "
                    "to format it again (its topics are lost)"
                )
            port, controller_port = old
        if port is not None:
            check_port_free(port, "--port")
        if controller_port is not None:
            check_port_free(controller_port, "--controller-port")
        port = port or free_port()
        controller_port = controller_port or free_port()
        while controller_port == port:
            controller_port = free_port()
        return port, controller_port

    def _choose_sasl_port(self, data_dir: Path) -> int:
        if self._sasl is None:
            return 0
        formatted = read_format(data_dir)
        port = self._requested_sasl_port
        if formatted is not None:
            if formatted.get("sasl_fingerprint") != self._sasl.fingerprint:
                raise LocalKafkaError(
                    f"{data_dir} was formatted with other SASL users (SCRAM credentials are "
                    "written at format time); start fresh (--fresh) to format it again"
                )
            port = port or int(formatted.get("sasl_port") or 0) or None
        if port is not None:
            check_port_free(port, "sasl_port")
        taken = {self.port, self.controller_port}
        port = port or free_port()
        while port in taken:
            port = free_port()
        return port

    def _java_base(self, java: str, jars: ResolvedJars, *, heap: str | None = None) -> list[str]:
        memory = [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC"] if heap else []
        return [
            java,
            *memory,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / LOG4J2_CONFIG}",
            f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
            "-cp",
            f"{jars.libs}{os.sep}*",
        ]

    def _format_storage(self, java: str, jars: ResolvedJars, data_dir: Path) -> Path:
        properties = render_properties(
            self.home,
            data_dir,
            port=self.port,
            controller_port=self.controller_port,
            node_id=self.node_id,
            extra_listeners=self._sasl.listener(self.sasl_port) if self._sasl else "",
            sasl_settings=self._sasl.settings() if self._sasl else "",
        )
        if read_format(data_dir) is not None:
            return properties
        started = time.monotonic()
        tool = [*self._java_base(java, jars), "kafka.tools.StorageTool"]
        cluster_id = run_tool([*tool, "random-uuid"], data_dir).strip().splitlines()[-1:]
        if not cluster_id or not _CLUSTER_ID.match(cluster_id[0]):
            raise LocalKafkaError(
                f"StorageTool random-uuid printed no cluster id; see {data_dir / FORMAT_LOG}"
            )
        scram = self._sasl.format_arguments() if self._sasl else []
        run_tool(
            [*tool, "format", "--standalone", "-t", cluster_id[0], "-c", str(properties), *scram],
            data_dir,
            secrets=[self._sasl.users[name] for name in self._sasl.users] if self._sasl else [],
        )
        record: dict[str, object] = {
            "cluster_id": cluster_id[0],
            "port": self.port,
            "controller_port": self.controller_port,
            "node_id": self.node_id,
            "kafka_version": jars.kafka_version,
        }
        if self._sasl is not None:
            record.update(sasl_port=self.sasl_port, sasl_fingerprint=self._sasl.fingerprint)
        (data_dir / FORMAT_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        self.format_seconds = time.monotonic() - started
        return properties

    def _spawn(self, java: str, jars: ResolvedJars, properties: Path) -> None:
        command = [*self._java_base(java, jars, heap=self.heap), "kafka.Kafka", str(properties)]
        for name, value in self.overrides.items():
            command += ["--override", f"{name}={value}"]
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"# hopchain LocalKafka {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
            log.write(f"# {' '.join(command)}\n")
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        try:
            # posix_spawn with setsid: the JVM leads its own process group (so stop() can
            # signal the whole group) and no Popen object outlives a detached start.
            self._pid = os.posix_spawn(
                java,
                command,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log_fd, 1),
                    (os.POSIX_SPAWN_DUP2, log_fd, 2),
                ],
                setsid=True,
            )
        finally:
            os.close(log_fd)
        self._is_child = True
        self._exit_status = None
        (self.data_dir / PID_FILE).write_text(f"{self._pid}\n", encoding="utf-8")
        atexit.register(self.stop)

    def _alive(self) -> bool:
        pid = self._pid
        if pid is None:
            return False
        if not self._is_child:
            return pid_alive(pid)
        if self._exit_status is None:
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    return True
                self._exit_status = os.waitstatus_to_exitcode(status)
                return False
            self._exit_status = -1
        return False

    def _died_error(self, what: str) -> LocalKafkaError:
        status = "" if self._exit_status is None else f" (exit status {self._exit_status})"
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
            time.sleep(_POLL_SECONDS)
        remaining = max(1.0, deadline - time.monotonic())
        try:
            probe_broker(self.bootstrap, timeout=remaining)
        except LocalKafkaError as exc:
            if not self._alive():
                raise self._died_error("exited during start-up") from exc
            raise self._died_error(f"did not answer metadata requests ({exc})") from exc
        self.startup_seconds = time.monotonic() - started

    def _terminate(self, first_signal: signal.Signals = signal.SIGTERM) -> None:
        pid = self._pid
        if pid is None:
            return
        signal_group(pid, first_signal)
        if not self._wait_gone(self.stop_timeout):
            signal_group(pid, signal.SIGKILL)
            if not self._wait_gone(_KILL_WAIT_SECONDS):
                raise LocalKafkaError(f"the Kafka JVM (pid {pid}) survived SIGKILL")
        self._pid = None
        atexit.unregister(self.stop)
        remove_run_files(self.data_dir)

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_SECONDS)
        return True
