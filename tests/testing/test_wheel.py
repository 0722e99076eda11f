"""The wheel alone runs the local broker: built, installed into a clean virtual environment and
used from an empty folder, as a new user would, with caches in the user's cache directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ["first", "second", "third"]
PACKAGE_DATA = (
    "pom.xml",
    "server.properties.template",
    "log4j2.properties",
    "tools-log4j2.properties",
)


class Session:
    """Runs commands in one folder with one environment and keeps a transcript of them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env
        self.lines: list[str] = []

    def run(
        self, *command: str | Path, stdin: str | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        shown = " ".join(Path(part).name if part == command[0] else str(part) for part in command)
        started = time.monotonic()
        result = subprocess.run(  # noqa: S603 - our interpreter, the venv's scripts, fixed args
            [str(part) for part in command],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.lines.append(f"$ {shown}")
        self.lines.extend(result.stdout.rstrip().splitlines())
        self.lines.extend(f"  (stderr) {line}" for line in result.stderr.rstrip().splitlines())
        self.lines.append(f"  -> exit {result.returncode} in {time.monotonic() - started:.1f} s")
        return result

    def ok(self, *command: str | Path, stdin: str | None = None) -> str:
        result = self.run(*command, stdin=stdin)
        assert result.returncode == 0, self.transcript()
        return result.stdout

    def transcript(self) -> str:
        return "\n".join(self.lines)


def clean_environment(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without anything hopchain- or venv-specific, with a fresh
    XDG cache; HOME stays, so Maven's own repository (~/.m2) is reused as a user's would be."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOPCHAIN_", "PYTHON", "PIP_", "VIRTUAL_ENV", "XDG_"))
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.mark.kafka
@pytest.mark.slow
def test_a_wheel_in_a_clean_venv_runs_the_broker_and_its_tools_from_an_empty_folder(
    tmp_path: Path,
) -> None:
    env = clean_environment(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    session = Session(empty, env)
    dist, venv = tmp_path / "dist", tmp_path / "venv"

    session.ok(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    (wheel,) = dist.glob("hopchain-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    for name in PACKAGE_DATA:
        assert f"hopchain/testing/kafka_home/{name}" in shipped
    assert not any(name.startswith(("deploy/", "tests/")) for name in shipped)

    session.ok(sys.executable, "-m", "venv", venv)
    # The local broker and its tools come with the `testing` extra (the CLI and test helpers).
    session.ok(
        venv / "bin" / "pip", "install", "-q", "-c", ROOT / "constraints.txt", f"{wheel}[testing]"
    )
    hopchain = venv / "bin" / "hopchain"

    started = json.loads(
        session.ok(
            hopchain, "dev", "kafka", "start", "--port", "0", "--controller-port", "0", "--json"
        )
    )
    cache = tmp_path / "xdg-cache" / "hopchain"
    try:
        assert started["status"] == "running"
        assert started["data_dir"] == str(cache / "kafka" / "run")
        status = json.loads(session.ok(hopchain, "dev", "kafka", "status", "--json"))
        assert status["bootstrap"] == started["bootstrap"]

        topic, group = f"wheel-{uuid.uuid4().hex[:8]}", f"wheel-group-{uuid.uuid4().hex[:8]}"
        tool = (hopchain, "dev", "kafka", "tool")
        session.ok(*tool, "topics", "--create", "--topic", topic, "--partitions", "1")
        session.ok(*tool, "console-producer", "--topic", topic, stdin="\n".join(RECORDS) + "\n")
        consumed = session.ok(
            *tool,
            "console-consumer",
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            str(len(RECORDS)),
        )
        assert consumed.splitlines() == RECORDS
        listed = session.ok(*tool, "consumer-groups", "--list")
        assert group in listed.split()
        described = session.ok(*tool, "consumer-groups", "--describe", "--group", group)
        row = next(line.split() for line in described.splitlines() if topic in line)
        assert row[:6] == [group, topic, "0", "3", "3", "0"]  # offset 3 of 3 committed, lag 0
    finally:
        stopped = session.run(hopchain, "dev", "kafka", "stop")
    assert stopped.returncode == 0, session.transcript()
    after = session.run(hopchain, "dev", "kafka", "status")
    print(session.transcript())  # noqa: T201 - shown with -rP: the transcript of a user's run

    assert after.returncode == 3
    assert list(empty.iterdir()) == []  # nothing written into the working folder
    (jars,) = (cache / "kafka").glob("*-*/libs")
    assert any(jars.glob("kafka-tools-*.jar"))
