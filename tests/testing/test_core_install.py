"""The core install is enough for the middleware: the wheel, in a clean virtual environment
with only the core dependencies, imports and builds the middleware, and loads no CLI stack,
no web server and no OpenTelemetry SDK. The command names the extra each part needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = (
    "typer",
    "rich",
    "starlette",
    "uvicorn",
    "jinja2",
    "opentelemetry.sdk",
    "click",
    "psycopg",
    "psycopg_pool",
)

CORE_USE = textwrap.dedent(
    """
    import importlib.util, json, sys

    import hopchain.middleware
    from faststream import AckPolicy
    from faststream.kafka import KafkaBroker
    from pydantic import BaseModel

    from hopchain import ContractRegistry, Hopchain, HopchainMiddleware, TopicContract

    class Order(BaseModel):
        order_id: str

    contracts = ContractRegistry([TopicContract(topic="orders", model=Order, owner="team")])
    engine = Hopchain(contracts, component="core-only")
    middleware = HopchainMiddleware(engine, group="core-only")
    broker = KafkaBroker("127.0.0.1:9092", middlewares=[middleware], ack_policy=AckPolicy.ACK)

    @broker.subscriber("orders", group_id="core-only")
    async def handle(order: Order) -> None:
        pass

    middleware.check(broker)
    extras = EXTRAS
    print(json.dumps({
        "middleware": type(middleware).__name__,
        "loaded": sorted(
            name for name in extras
            if any(m == name or m.startswith(name + ".") for m in sys.modules)
        ),
        "installed": sorted(
            name for name in extras
            if importlib.util.find_spec(name.split(".")[0]) is not None
            and (name != "opentelemetry.sdk" or importlib.util.find_spec(name) is not None)
        ),
    }))
    """
).replace("EXTRAS", repr(EXTRAS_ONLY))


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HOPCHAIN_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(  # noqa: S603 - our interpreter, the venv's, fixed arguments
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def ok(*command: str | Path, cwd: Path) -> str:
    result = run(*command, cwd=cwd)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_the_wheel_with_only_the_core_dependencies_runs_the_middleware(
    tmp_path: Path, wheel: Path
) -> None:
    venv, empty = tmp_path / "venv", tmp_path / "empty"
    empty.mkdir()
    ok(sys.executable, "-m", "venv", venv, cwd=empty)
    python = venv / "bin" / "python"
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ok(python, "-m", "pip", "install", "-q", "--no-deps", wheel, cwd=empty)
    ok(python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", *core, cwd=empty)

    installed = {
        entry["name"].lower()
        for entry in json.loads(ok(python, "-m", "pip", "list", "--format=json", cwd=empty))
    }
    assert not installed & {"typer", "rich", "starlette", "uvicorn", "jinja2"}
    assert "opentelemetry-sdk" not in installed
    assert {"hopchain", "faststream", "aiokafka", "opentelemetry-api"} <= installed

    used = json.loads(ok(python, "-c", CORE_USE, cwd=empty))
    assert used == {
        "middleware": "HopchainMiddleware",
        "loaded": [],
        "installed": [],
    }

    # The command is installed with the wheel: it answers --version, and names the extra
    # it needs instead of failing with a traceback.
    hopchain = venv / "bin" / "hopchain"
    assert ok(hopchain, "--version", cwd=empty).startswith("hopchain ")
    listed = run(hopchain, "dlq", "list", cwd=empty)
    assert listed.returncode == 1
    hint = "error: this command needs 'typer', which the 'cli' extra installs: pip install"
    assert listed.stderr.splitlines() == [f"{hint} 'hopchain[cli]'"]
    sdk = run(python, "-c", "import hopchain.telemetry", cwd=empty)
    assert sdk.returncode == 1
    assert "pip install 'hopchain[otel]'" in sdk.stderr
    postgres = run(python, "-c", "import hopchain.middleware.dedupe_postgres", cwd=empty)
    assert postgres.returncode == 1
    assert "pip install 'hopchain[postgres]'" in postgres.stderr

    # With the `cli` extra the command runs, the triage commands too (they read Kafka or an
    # index file); the dead-letter service names the `dlq` extra it needs.
    ok(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "-c",
        ROOT / "constraints.txt",
        f"{wheel}[cli]",
        cwd=empty,
    )
    assert "Usage: hopchain trace" in ok(hopchain, "trace", "--help", cwd=empty)
    listed = run(hopchain, "dlq", "list", "--bootstrap=127.0.0.1:1", "--timeout=5", cwd=empty)
    assert listed.returncode == 1
    assert listed.stderr.startswith("error: Kafka at 127.0.0.1:1: cannot connect"), listed.stderr
    served = run(hopchain, "dlq", "serve", cwd=empty)
    assert served.returncode == 1
    [line] = served.stderr.splitlines()
    assert line.startswith("error: this command needs ")
    assert line.endswith("which the 'dlq' extra installs: pip install 'hopchain[dlq]'")
    assert list(empty.iterdir()) == []
