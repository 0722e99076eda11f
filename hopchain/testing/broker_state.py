"""What a broker started by :class:`hopchain.testing.LocalKafka` leaves in its data directory.

A pid file (``kafka.pid``) written as soon as the JVM is started, ``broker.json`` once it is
ready, and ``format.json`` after the storage was formatted. With them any process can tell
whether the broker runs and stop it: ``hopchain dev kafka status|stop`` work this way.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hopchain.exceptions import LocalKafkaError

__all__ = [
    "CONSOLE_LOG",
    "FORMAT_FILE",
    "FORMAT_LOG",
    "PID_FILE",
    "STATE_FILE",
    "BrokerState",
    "BrokerStatus",
    "broker_status",
    "formatted_ports",
    "pid_alive",
    "read_format",
    "read_state",
    "remove_run_files",
    "running_brokers",
    "signal_group",
    "status_and_pid",
    "stop_broker",
]

STATE_FILE = "broker.json"
PID_FILE = "kafka.pid"
FORMAT_FILE = "format.json"
CONSOLE_LOG = "kafka.out"
FORMAT_LOG = "format.out"
_POLL_SECONDS = 0.1
_KILL_WAIT_SECONDS = 10.0


class BrokerStatus(enum.StrEnum):
    """What a data directory's broker is doing, as seen from any process."""

    RUNNING = "running"
    """The JVM is alive and answered a metadata request when it started."""
    STARTING = "starting"
    """The JVM is alive but has not been seen ready yet."""
    STOPPED = "stopped"
    """No live broker JVM belongs to the data directory."""


@dataclass(frozen=True, slots=True)
class BrokerState:
    """What a started broker wrote to ``broker.json`` in its data directory."""

    pid: int
    """Process id of the JVM; also its process group id."""
    bootstrap: str
    """``127.0.0.1:PORT`` of the PLAINTEXT listener."""
    port: int
    """PLAINTEXT (client) port."""
    controller_port: int
    """KRaft controller port."""
    kafka_version: str
    """Apache Kafka version of the broker jars."""
    data_dir: str
    """The data directory (properties, KRaft log, broker logs)."""
    log_path: str
    """The JVM's console output; ``logs/server.log`` beside it holds the same."""
    started_at: float
    """Unix time at which the JVM was started."""
    startup_seconds: float
    """Seconds from starting the JVM until it answered a metadata request."""

    def to_json(self) -> str:
        """Serialise for ``broker.json``."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BrokerState:
        """Parse ``broker.json``; raises ``ValueError``, ``KeyError`` or ``TypeError`` if bad."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise TypeError("broker state is not a JSON object")
        return cls(
            pid=int(raw["pid"]),
            bootstrap=str(raw["bootstrap"]),
            port=int(raw["port"]),
            controller_port=int(raw["controller_port"]),
            kafka_version=str(raw["kafka_version"]),
            data_dir=str(raw["data_dir"]),
            log_path=str(raw["log_path"]),
            started_at=float(raw["started_at"]),
            startup_seconds=float(raw["startup_seconds"]),
        )


def broker_status(data_dir: Path) -> tuple[BrokerStatus, BrokerState | None]:
    """Report on the broker of ``data_dir`` from any process (the CLI's ``status``)."""
    status, _ = status_and_pid(data_dir)
    state = read_state(data_dir) if status is BrokerStatus.RUNNING else None
    return status, state


def stop_broker(data_dir: Path, *, timeout: float = 30.0) -> int | None:
    """Stop the broker of ``data_dir`` started by any process; return its pid, or None.

    Sends SIGTERM to the broker's process group, then SIGKILL after ``timeout`` seconds.
    """
    pid = _live_pid(data_dir)
    if pid is None:
        remove_run_files(data_dir)
        return None
    signal_group(pid, signal.SIGTERM)
    if not _wait_pid_gone(pid, timeout):
        signal_group(pid, signal.SIGKILL)
        if not _wait_pid_gone(pid, _KILL_WAIT_SECONDS):
            raise LocalKafkaError(f"the Kafka JVM (pid {pid}) survived SIGKILL")
    remove_run_files(data_dir)
    return pid


def formatted_ports(data_dir: Path) -> tuple[int, int] | None:
    """The (port, controller port) a data directory was formatted for, if it was."""
    formatted = read_format(data_dir)
    if formatted is None:
        return None
    return int(formatted["port"]), int(formatted["controller_port"])


def status_and_pid(data_dir: Path) -> tuple[BrokerStatus, int | None]:
    """The status of ``data_dir``'s broker and, unless stopped, its pid."""
    pid = _live_pid(data_dir)
    if pid is None:
        return BrokerStatus.STOPPED, None
    state = read_state(data_dir)
    if state is not None and state.pid == pid:
        return BrokerStatus.RUNNING, pid
    return BrokerStatus.STARTING, pid


def read_state(data_dir: Path) -> BrokerState | None:
    """``broker.json`` of ``data_dir``, or None if it is missing or unreadable."""
    try:
        return BrokerState.from_json((data_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_format(data_dir: Path) -> dict[str, int | str] | None:
    """``format.json`` of ``data_dir`` (cluster id, ports, node id), or None."""
    try:
        raw = json.loads((data_dir / FORMAT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def _live_pid(data_dir: Path) -> int | None:
    """The pid in the pid file if that process is alive and is this directory's broker."""
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
    properties = str(data_dir.resolve() / "server.properties").encode()
    return pid if b"kafka.Kafka" in cmdline and properties in cmdline else None


def running_brokers() -> list[BrokerState]:
    """Every broker a :class:`~hopchain.testing.LocalKafka` runs on this machine, by data folder.

    Found through the process table (``/proc``): a broker JVM names its data folder's
    ``server.properties``, and that folder's ``broker.json`` says what it is. Empty where
    there is no ``/proc``.
    """
    found: list[BrokerState] = []
    try:
        pids = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if b"kafka.Kafka" not in arguments:
            continue
        for argument in arguments:
            if argument.endswith(b"/server.properties"):
                data_dir = Path(os.fsdecode(argument)).parent
                status, state = broker_status(data_dir)
                if status is BrokerStatus.RUNNING and state is not None and state.pid == pid:
                    found.append(state)
    return sorted(found, key=lambda state: state.data_dir)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def signal_group(pid: int, signum: signal.Signals) -> None:
    """Send ``signum`` to the process group led by ``pid``; a gone group is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def remove_run_files(data_dir: Path) -> None:
    """Remove the pid file and ``broker.json``: the broker is no longer running."""
    for name in (PID_FILE, STATE_FILE):
        with contextlib.suppress(FileNotFoundError):
            (data_dir / name).unlink()
