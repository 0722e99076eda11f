"""The Prometheus and Alertmanager binaries the deploy tests run, found on PATH.

A missing binary fails the test that needs it, under CI and locally alike: the alert rules
and the routing are only proven by the real tools.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"
"""The repository's deploy/ folder."""

INSTALL_HINT = "apt-get install prometheus prometheus-alertmanager"

# Debian installs Alertmanager as prometheus-alertmanager; upstream archives call it alertmanager.
_NAMES = {
    "prometheus": ("prometheus",),
    "promtool": ("promtool",),
    "alertmanager": ("alertmanager", "prometheus-alertmanager"),
    "amtool": ("amtool",),
}


def tool(name: str) -> str:
    """The binary's path, or the test fails naming how to install it."""
    for candidate in _NAMES[name]:
        path = shutil.which(candidate)
        if path is not None:
            return path
    pytest.fail(
        f"{' or '.join(_NAMES[name])} is not on PATH; the deploy tests run the real "
        f"Prometheus and Alertmanager. Install them: {INSTALL_HINT}",
        pytrace=False,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Processes:
    """Processes this test started, each with its log file; stopped (by handle) at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, *command: str) -> None:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(  # noqa: S603 - binaries found on PATH, our arguments
                command, stdout=out, stderr=subprocess.STDOUT, cwd=self.folder
            )
        self.running.append((name, process, log))

    def check_alive(self) -> None:
        for name, process, log in self.running:
            if process.poll() is not None:
                pytest.fail(f"{name} exited with {process.returncode}:\n{self.tail(log)}")

    @staticmethod
    def tail(log: Path) -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(log)}" for name, _, log in self.running)

    def stop(self) -> None:
        for _, process, _ in self.running:
            process.terminate()
        for _, process, _ in self.running:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
