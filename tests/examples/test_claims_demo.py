"""The demo's pipeline, end to end at a small scale, on the session's real broker."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.kafka
@pytest.mark.slow
async def test_every_document_is_accounted_for_and_the_service_agrees(
    kafka_bootstrap: str,
) -> None:
    env = {key: value for key, value in os.environ.items() if key != "CLAIMS_TOPIC_PREFIX"} | {
        "HOPCHAIN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "COLUMNS": "200",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "examples.claims.demo",
        "--documents",
        "200",
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output_bytes, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    output = output_bytes.decode()
    assert process.returncode == 0, output
    sent = re.search(r"sent\s+│\s+(\d+)", output)
    unaccounted = re.search(r"unaccounted\s+│\s+(\d+)", output)
    assert sent is not None
    assert unaccounted is not None, output
    assert (int(sent.group(1)), int(unaccounted.group(1))) == (200, 0)
    assert "dead-letter service depth matches the dead-letter topics" in output
    assert "hopchain_dlq_oldest_age_seconds{" in output
    assert "dead_lettered" in output  # the trace of one dead letter
