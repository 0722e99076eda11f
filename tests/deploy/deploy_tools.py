"""The Prometheus and Alertmanager binaries the deploy tests run, found on PATH.

A missing binary fails the test that needs it, under CI and locally alike: the alert rules
and the routing are only proven by the real tools.
"""

from __future__ import annotations

import shutil
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
