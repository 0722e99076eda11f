"""``hopchain dev registry start|stop|status`` in processes of their own, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from typing import TYPE_CHECKING

import pytest

from hopchain.testing._jvm import tcp_connects
from hopchain.testing.broker_state import pid_alive

if TYPE_CHECKING:
    from pathlib import Path

    from hopchain.testing.jdk import JavaRuntime


def hopchain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-c", "from hopchain.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.registry
@pytest.mark.slow
def test_start_ends_with_an_export_line_and_another_process_reports_and_stops_it(
    tmp_path: Path, registry_java_runtime: JavaRuntime
) -> None:
    data_dir = str(tmp_path / "run")

    started = hopchain("dev", "registry", "start", "--port", "0", "--data-dir", data_dir)
    assert started.returncode == 0, started.stderr
    name, _, url = started.stdout.splitlines()[-1].removeprefix("export ").partition("=")
    try:
        assert name == "HOPCHAIN_SCHEMA_REGISTRY_URL"
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/apis/ccompat/v7")
        with urllib.request.urlopen(f"{url}/subjects", timeout=10) as response:  # noqa: S310 - loopback
            assert json.load(response) == []

        again = hopchain("dev", "registry", "start", "--port", "0", "--data-dir", data_dir)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[-1] == f"export {name}={url}"  # the running one's
        assert "already running" in again.stderr

        status = hopchain("dev", "registry", "status", "--data-dir", data_dir, "--json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["status"] == "running"
        assert state["url"] == url
        assert state["java"] == str(registry_java_runtime.path)
        assert pid_alive(state["pid"])  # outlived the process that started it
    finally:
        stopped = hopchain("dev", "registry", "stop", "--data-dir", data_dir)

    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {state['pid']}" in stopped.stdout
    assert not pid_alive(state["pid"])
    assert not tcp_connects(state["port"])
    after = hopchain("dev", "registry", "status", "--data-dir", data_dir)
    assert after.returncode == 3
    assert (tmp_path / "run" / "registry.out").is_file()  # the log stays for reading


def test_start_on_a_too_old_java_is_one_line_that_names_the_fix(tmp_path: Path) -> None:
    java = tmp_path / "jdk-17" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.15\" 2025-04-15' >&2\n")
    java.chmod(0o755)

    result = hopchain(
        "dev", "registry", "start", "--java", str(java), "--data-dir", str(tmp_path / "run")
    )

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: Apicurio Registry needs Java 21 or newer, but --java")


def test_status_of_a_registry_that_never_ran_exits_3(tmp_path: Path) -> None:
    result = hopchain("dev", "registry", "status", "--data-dir", str(tmp_path), "--json")

    assert result.returncode == 3
    assert json.loads(result.stdout)["status"] == "stopped"


def test_stop_without_a_registry_is_not_an_error(tmp_path: Path) -> None:
    result = hopchain("dev", "registry", "stop", "--data-dir", str(tmp_path))

    assert result.returncode == 0
    assert "no registry running" in result.stdout


def test_help_shows_what_to_write_and_no_python_types() -> None:
    for name in ("start", "stop", "status"):
        run = hopchain("dev", "registry", name, "--help")
        assert run.returncode == 0, run.stderr
        for label in ("<bool>", "<str>", "<int", "<float", "<dir>", "<path>"):
            assert label not in run.stdout, (name, label)
    assert "HOPCHAIN_REGISTRY_JAVA" in hopchain("dev", "registry", "start", "--help").stdout
