"""What the numbers were measured on: CPU, memory, load, versions, the commit."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("faststream", "aiokafka", "pydantic", "pydantic-core", "opentelemetry-sdk")


@dataclass
class Machine:
    """The machine and software a run used."""

    cpu_model: str
    cores: int
    memory_gib: float
    kernel: str
    python: str
    kafka: str
    packages: dict[str, str]
    commit: str
    dirty: bool
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_samples: list[float] = field(default_factory=list)
    """1-minute load average, sampled between benchmark steps."""


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def _git(*args: str) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - fixed arguments
            ["git", *args],  # noqa: S607 - git from PATH
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def describe(kafka_version: str) -> Machine:
    """Describe this machine now (the load after the run is filled in later)."""
    return Machine(
        cpu_model=_cpu_model(),
        cores=os.cpu_count() or 0,
        memory_gib=_memory_gib(),
        kernel=platform.release(),
        python=platform.python_version(),
        kafka=kafka_version,
        packages={name: version(name) for name in PACKAGES},
        commit=_git("rev-parse", "--short", "HEAD") or "unknown",
        # Only tracked files count: a dirty tree means the measured code is not the commit's.
        dirty=bool(_git("status", "--porcelain", "--untracked-files=no", "--", "hopchain")),
        load_before=os.getloadavg(),
    )
