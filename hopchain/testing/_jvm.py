"""Running Kafka's JVMs from Python: short-lived tools, long-lived brokers, readiness probes.

Shared by :class:`~hopchain.testing.kafka.LocalKafka` and
:class:`~hopchain.testing.cluster.LocalKafkaCluster`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._provision import tail_file
from hopchain.testing.admin import wait_for_broker
from hopchain.testing.broker_state import FORMAT_LOG, pid_alive, signal_group

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["POLL_SECONDS", "JvmProcess", "probe_broker", "run_tool", "spawn_logged", "tcp_connects"]

POLL_SECONDS = 0.1
"""How often a waiting loop looks again at a JVM (alive, port open)."""
_KILL_WAIT_SECONDS = 10.0

_TOOL_TIMEOUT_SECONDS = 120.0


def tcp_connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def run_tool(command: list[str], data_dir: Path, *, secrets: list[str] | None = None) -> str:
    """Run a short-lived Kafka tool JVM; its output is appended to ``format.out``.

    ``secrets`` (passwords on the command line) are masked in what is logged.
    """
    try:
        result = subprocess.run(  # noqa: S603 - fixed argument list, no shell
            command,
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalKafkaError(
            f"{command[-1]} did not finish within {_TOOL_TIMEOUT_SECONDS:.0f} s"
        ) from exc
    log = data_dir / FORMAT_LOG
    shown = " ".join(command)
    for secret in secrets or ():
        shown = shown.replace(secret, "***")
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"# {shown}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise LocalKafkaError(
            f"formatting the broker storage failed (exit {result.returncode}). "
            f"Last lines of {log}:\n{tail_file(log)}"
        )
    return result.stdout


def probe_broker(bootstrap: str, *, timeout: float = 30.0) -> None:
    """Block until a metadata call to ``bootstrap`` succeeds (see :func:`wait_for_broker`).

    Safe to call from synchronous code that runs inside an event loop, such as a fixture.

    Raises:
        LocalKafkaError: no broker answered within ``timeout`` seconds.
    """
    # A thread of its own: the caller may be inside a running event loop (an async fixture),
    # and asyncio.run() in the caller's thread would also reset that thread's current loop.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopchain-kafka-probe") as pool:
        pool.submit(lambda: asyncio.run(wait_for_broker(bootstrap, timeout=timeout))).result()


class JvmProcess:
    """A Kafka JVM this process started (``child``) or found running: is it alive, stop it."""

    def __init__(self, pid: int, *, child: bool) -> None:
        self.pid = pid
        self.child = child
        self.exit_status: int | None = None
        """The exit status, once a child was seen to exit (-1 when it was reaped elsewhere)."""

    def alive(self) -> bool:
        """Whether the process still runs (a child that exited is reaped here)."""
        if not self.child:
            return pid_alive(self.pid)
        if self.exit_status is None:
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done == 0:
                    return True
                self.exit_status = os.waitstatus_to_exitcode(status)
                return False
            self.exit_status = -1
        return False

    def stop(self, first_signal: signal.Signals, timeout: float) -> None:
        """Signal the process group; SIGKILL it after ``timeout`` seconds.

        Raises:
            LocalKafkaError: it survived SIGKILL.
        """
        signal_group(self.pid, first_signal)
        if not self._gone_within(timeout):
            signal_group(self.pid, signal.SIGKILL)
            if not self._gone_within(_KILL_WAIT_SECONDS):
                raise LocalKafkaError(f"the Kafka JVM (pid {self.pid}) survived SIGKILL")

    def _gone_within(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True


def spawn_logged(java: str, command: list[str], log_path: Path, title: str) -> int:
    """Start ``command`` as a process of its own group, output appended to ``log_path``.

    posix_spawn with setsid: the JVM leads its own process group (so a stop can signal the
    whole group) and no Popen object outlives a detached start. Returns its pid.
    """
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"# {title} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        log.write(f"# {' '.join(command)}\n")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    try:
        return os.posix_spawn(
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
