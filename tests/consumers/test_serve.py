"""``hopchain dlq serve`` as a process of its own, as a container or an operator runs it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys

import pytest
from dlq_helpers import call, scrape, wait_until
from typer.testing import CliRunner

from hopchain.cli.app import app
from hopchain.testing import unique_topic_name

SERVING = re.compile(rb"serving on (http://127\.0\.0\.1:\d+)")


async def _serve(bootstrap: str, topic: str, **environment: str) -> asyncio.subprocess.Process:
    """``hopchain dlq serve`` of ``topic`` on a free port, its log on a pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hopchain.cli",
        "dlq",
        "serve",
        f"--bootstrap={bootstrap}",
        f"--dlq-topic={topic}=team-a",
        f"--resolutions-topic={unique_topic_name('resolutions')}",
        "--port=0",
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        env={**os.environ, "HOPCHAIN_DLQ_TOKEN": "", **environment},
    )


@pytest.mark.kafka
async def test_serve_creates_its_topics_reports_ready_and_stops_cleanly_on_sigterm(
    kafka_bootstrap: str,
) -> None:
    topic = unique_topic_name("serve") + ".dlq"
    process = await _serve(kafka_bootstrap, topic)
    assert process.stderr is not None
    log = b""
    try:
        async with asyncio.timeout(60):
            while (found := SERVING.search(log)) is None:
                line = await process.stderr.readline()
                assert line, f"serve exited early:\n{log.decode()}"
                log += line
        url = found[1].decode()
        await wait_until(
            lambda: asyncio.to_thread(lambda: call("GET", f"{url}/readyz")[0] == 200),
            within=30,
            what="/readyz to answer 200",
        )
        metrics = await asyncio.to_thread(scrape, url)
        assert metrics["hopchain_dlq_ready"] == {(): 1.0}
        assert metrics["hopchain_dlq_retention_unsafe"][(("topic", topic),)] == 0.0
        status, _ = await asyncio.to_thread(
            call, "POST", f"{url}/dead-letters/x/discard", {"who": "a", "reason": "b"}, "t"
        )
        assert status == 403  # an empty HOPCHAIN_DLQ_TOKEN leaves them disabled
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            rest = await process.stderr.read()
            code = await process.wait()
    assert code == 0, (log + rest).decode()
    assert f"created topic {topic}".encode() in log


@pytest.mark.kafka
async def test_serve_writes_json_lines_with_hopchain_log_format_json(kafka_bootstrap: str) -> None:
    """A log shipper reads the service's lines as it reads the middleware's: one object each."""
    topic = unique_topic_name("serve-json") + ".dlq"
    process = await _serve(kafka_bootstrap, topic, HOPCHAIN_LOG_FORMAT="json")
    assert process.stderr is not None
    lines: list[dict[str, object]] = []
    try:
        async with asyncio.timeout(60):
            while not any(SERVING.search(str(line["message"]).encode()) for line in lines):
                raw = await process.stderr.readline()
                assert raw, f"serve exited early after {lines}"
                lines.append(json.loads(raw))  # every line is one JSON object
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            rest = await process.stderr.read()
            code = await process.wait()
    lines += [json.loads(raw) for raw in rest.splitlines() if raw.strip()]
    assert code == 0, lines
    created = [line for line in lines if str(line["message"]).startswith(f"created topic {topic}")]
    assert len(created) == 1
    assert created[0]["level"] == "INFO"
    assert str(created[0]["logger"]).startswith("hopchain")
    assert {"ts", "level", "logger", "message"} <= set(created[0])


def test_serve_refuses_a_dlq_topic_without_a_name() -> None:
    result = CliRunner().invoke(app, ["dlq", "serve", "--dlq-topic==team-a"])

    assert result.exit_code == 2
    assert "--dlq-topic '=team-a': expected NAME or NAME=OWNER" in result.output
