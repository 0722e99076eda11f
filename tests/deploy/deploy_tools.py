"""The Prometheus and Alertmanager binaries the deploy tests run, found on PATH.

A missing binary fails the test that needs it, under CI and locally alike: the alert rules
and the routing are only proven by the real tools.
"""

from __future__ import annotations

import json
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


AGE_RULE = "max by (owner, source_topic) (hopchain_dlq_oldest_age_seconds) > 3600\n        for: 5m"
"""The shipped age alert's expression and ``for:``, as the rules file writes them."""


def age_rule(*, threshold_seconds: int, for_: str) -> str:
    """The age alert with another threshold and ``for:``, so a test need not wait an hour."""
    return AGE_RULE.replace("> 3600", f"> {threshold_seconds}").replace("5m", for_)


def replace_once(text: str, old: str, new: str, where: str) -> str:
    """Replace exactly one occurrence, so a changed config fails here instead of testing
    something else."""
    assert text.count(old) == 1, f"{where} no longer holds {old!r} exactly once"
    return text.replace(old, new)


def prometheus_config(
    folder: Path, dlq_port: int, age: str, alertmanager_port: int | None = None
) -> Path:
    """A Prometheus config that scrapes the service every second with the shipped rules,
    the age rule replaced by ``age`` (see :func:`age_rule`)."""
    rules = (DEPLOY_DIR / "prometheus" / "rules" / "hopchain.rules.yml").read_text()
    rules_file = folder / "hopchain.rules.yml"
    rules_file.write_text(replace_once(rules, AGE_RULE, age, "the age rule"))
    config: dict[str, object] = {  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {
                "job_name": "hopchain-dlq",
                "static_configs": [{"targets": [f"127.0.0.1:{dlq_port}"]}],
            }
        ],
    }
    if alertmanager_port is not None:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        }
    path = folder / "prometheus.yml"
    path.write_text(json.dumps(config, indent=2))
    return path


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
