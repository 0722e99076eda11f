from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from hopchain.__about__ import __version__
from hopchain.cli.app import app
from hopchain.testing import create_topics, probe_broker, unique_topic_name
from hopchain.testing.broker_state import pid_alive
from hopchain.testing.kafka import default_run_dir
from hopchain.testing.kafka_tools import KAFKA_TOOLS, kafka_tool_command

if TYPE_CHECKING:
    from pathlib import Path

    from hopchain.testing import TopicFactory

runner = CliRunner()


def hopchain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a process of its own, as a user would."""
    return subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
        [sys.executable, "-c", "from hopchain.cli.app import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


def test_version_flag_prints_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])

    assert result.exit_code == 0
    assert result.output == f"hopchain {__version__}\n"


def test_version_is_the_installed_distributions_both_ways() -> None:
    # The build backend reads hopchain/__about__.py: what pip installed must say the same.
    installed = importlib.metadata.version("hopchain")
    command = [sys.executable, "-m", "hopchain.cli"]
    alone = subprocess.run(  # noqa: S603 - our own interpreter; answered before Typer loads
        [*command, "--version"], capture_output=True, text=True, check=False
    )
    among = hopchain("--version", "--help")  # answered by the Typer app

    assert installed == __version__
    assert alone.stdout == f"hopchain {installed}\n"
    assert among.stdout == f"hopchain {installed}\n"


def test_status_of_a_broker_that_never_ran_exits_3(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dev", "kafka", "status", "--data-dir", str(tmp_path), "--json"])

    assert result.exit_code == 3
    assert json.loads(result.stdout) == {"status": "stopped", "data_dir": str(tmp_path)}


def test_stop_without_a_broker_is_not_an_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dev", "kafka", "stop", "--data-dir", str(tmp_path)])

    assert result.exit_code == 0
    assert "no broker running" in result.output


def cache_of_its_own(tmp_path: Path) -> dict[str, str]:
    """An environment whose user cache is new (its default data folder empty), sharing jars."""
    cache = tmp_path / "cache"
    (cache / "kafka").mkdir(parents=True)
    for entry in default_run_dir().parent.iterdir():
        if entry.name != default_run_dir().name:  # the resolved jars: no minute of Maven per test
            (cache / "kafka" / entry.name).symlink_to(entry, target_is_directory=True)
    env = {**os.environ, "HOPCHAIN_CACHE_DIR": str(cache)}
    env.pop("HOPCHAIN_KAFKA_DATA_DIR", None)
    return env


def export_line(stdout: str) -> str:
    """The bootstrap address of ``start``'s last line, which must be the export line."""
    last = stdout.splitlines()[-1]
    assert re.fullmatch(r"export HOPCHAIN_KAFKA_BOOTSTRAP=127\.0\.0\.1:[0-9]+", last), stdout
    return last.partition("=")[2]


@pytest.mark.kafka
def test_start_detaches_and_another_process_reports_and_stops_it(tmp_path: Path) -> None:
    data_dir = str((tmp_path / "run").resolve())
    ports = ["--port", "0", "--controller-port", "0"]
    env = cache_of_its_own(tmp_path)

    started = hopchain("dev", "kafka", "start", "--data-dir", data_dir, *ports, env=env)
    assert started.returncode == 0, started.stderr
    bootstrap = export_line(started.stdout)
    try:
        assert f"stop it with: hopchain dev kafka stop --data-dir {data_dir}\n" in started.stdout
        status = hopchain("dev", "kafka", "status", "--data-dir", data_dir, "--json", env=env)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["bootstrap"] == bootstrap
        assert pid_alive(state["pid"])  # outlived the process that started it
        probe_broker(bootstrap, timeout=30)
        # The default folder holds no broker: the message says where one runs, and how.
        elsewhere = hopchain("dev", "kafka", "stop", env=env)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert f"hopchain dev kafka stop --data-dir {data_dir}" in elsewhere.stdout
        assert pid_alive(state["pid"])
    finally:
        stopped = hopchain("dev", "kafka", "stop", "--data-dir", data_dir, env=env)

    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {state['pid']}" in stopped.stdout
    assert not pid_alive(state["pid"])
    after = hopchain("dev", "kafka", "status", "--data-dir", data_dir, env=env)
    assert after.returncode == 3
    assert (tmp_path / "run" / "logs" / "server.log").is_file()  # logs stay for inspection


@pytest.mark.kafka
async def test_the_default_folders_broker_is_found_without_data_dir_and_tools_reach_it(
    tmp_path: Path,
) -> None:
    env = cache_of_its_own(tmp_path)
    started = hopchain("dev", "kafka", "start", "--port", "0", "--controller-port", "0", env=env)
    assert started.returncode == 0, started.stderr
    bootstrap = export_line(started.stdout)
    try:
        assert "stop it with: hopchain dev kafka stop\n" in started.stdout
        topic = unique_topic_name("tools")
        await create_topics(bootstrap, topic)
        status = hopchain("dev", "kafka", "status", "--json", env=env)
        listed = hopchain("dev", "kafka", "tool", "topics", "--list", env=env)
        again = hopchain("dev", "kafka", "start", env=env)  # already running: the same line
    finally:
        stopped = hopchain("dev", "kafka", "stop", env=env)
    gone = hopchain("dev", "kafka", "tool", "topics", "--list", env=env)

    assert json.loads(status.stdout)["bootstrap"] == bootstrap
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.splitlines()
    assert export_line(again.stdout) == bootstrap
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the Kafka broker" in stopped.stdout
    # No broker: one line saying so and what to do, not the tool's Java stack trace.
    assert gone.returncode == 3
    assert gone.stdout == ""
    [line] = gone.stderr.splitlines()
    assert line.startswith("error: no broker running from ")
    assert "`hopchain dev kafka start`" in line
    assert "Exception" not in line


def test_an_unknown_tool_is_one_line_naming_the_known_ones() -> None:
    result = hopchain("dev", "kafka", "tool", "consumer-grups", "--list")

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "no Kafka tool called 'consumer-grups'" in result.stderr
    assert "consumer-groups" in result.stderr


def test_tools_get_the_local_bootstrap_unless_they_name_one() -> None:
    injected = kafka_tool_command("topics", ["--list"], bootstrap="127.0.0.1:1")
    named = kafka_tool_command(
        "topics", ["--list", "--bootstrap-server=127.0.0.1:2"], bootstrap="127.0.0.1:1"
    )
    offline = kafka_tool_command("dump-log", ["--files", "x.log"], bootstrap="127.0.0.1:1")
    by_class = kafka_tool_command("org.apache.kafka.tools.TopicCommand", ["--version"])

    assert injected[-4:] == [
        KAFKA_TOOLS["topics"].main_class,
        "--bootstrap-server",
        "127.0.0.1:1",
        "--list",
    ]
    assert named[-3:] == [
        KAFKA_TOOLS["topics"].main_class,
        "--list",
        "--bootstrap-server=127.0.0.1:2",
    ]
    assert offline[-3:] == [KAFKA_TOOLS["dump-log"].main_class, "--files", "x.log"]
    assert by_class[-2:] == ["org.apache.kafka.tools.TopicCommand", "--version"]


@pytest.mark.kafka
async def test_a_kafka_tool_runs_against_the_broker_with_its_exit_status(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic(partitions=2)

    listed = hopchain(
        "dev",
        "kafka",
        "tool",
        "topics",
        "--bootstrap-server",
        kafka_bootstrap,
        "--describe",
        "--topic",
        topic,
    )
    missing = hopchain(
        "dev",
        "kafka",
        "tool",
        "topics",
        "--bootstrap-server",
        kafka_bootstrap,
        "--describe",
        "--topic",
        topic + "-missing",
    )

    assert listed.returncode == 0, listed.stderr
    assert f"Topic: {topic}\tTopicId:" in listed.stdout
    assert "PartitionCount: 2" in listed.stdout
    assert missing.returncode == 1
    assert f"Topic '{topic}-missing' does not exist" in missing.stdout + missing.stderr
