"""Running Kafka's JVMs from Python: short-lived tools, readiness probes.

Shared by :class:`~hopchain.testing.kafka.LocalKafka` and
:class:`~hopchain.testing.cluster.LocalKafkaCluster`.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from hopchain.exceptions import LocalKafkaError
from hopchain.testing._provision import tail_file
from hopchain.testing.admin import wait_for_broker
from hopchain.testing.broker_state import FORMAT_LOG

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["probe_broker", "run_tool", "tcp_connects"]

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
