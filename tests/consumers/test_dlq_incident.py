"""An incident on the real broker: a burst of dead letters parked while the service runs.

The service runs as ``hopchain dlq serve`` in a process of its own, so that its resident
memory is the service's alone. While the burst is parked, health, metrics and the console
keep answering; afterwards depth is exact and memory stayed under its bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dlq_helpers import report_figure, scrape

from hopchain.schemas import ErrorType
from hopchain.testing import unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    produce_dead_letters,
    synthetic_dead_letter,
)

COUNT = 60_000
MEMORY_BOUND_MIB = 256
"""The service's peak resident memory: the index cache is 64 MiB whatever the depth."""
ANSWER_SECONDS = 2.0


def small_letters(source: str, count: int) -> Iterator[SyntheticDeadLetter]:
    rng = random.Random(11)
    now = time.time()
    for number in range(count):
        yield synthetic_dead_letter(
            owner="team-a",
            source_topic=source,
            error_type=rng.choice([ErrorType.INTERNAL, ErrorType.TRANSIENT]),
            parked_at=now - rng.uniform(60.0, 3600.0),
            value=b'{"n": 1}',
            key=f"order-{number}".encode(),
        )


def timed_get(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=ANSWER_SECONDS * 4) as response:  # noqa: S310
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    return status, time.perf_counter() - started


def peak_resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")


@pytest.mark.kafka
async def test_a_burst_parked_while_serving_keeps_health_metrics_and_console_answering(
    kafka_bootstrap: str, tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    source = unique_topic_name("incident")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "HOPCHAIN_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "HOPCHAIN_DLQ_TOPICS": json.dumps({f"{source}.dlq": "team-a"}),
        "HOPCHAIN_DLQ_TOPIC_PARTITIONS": "3",
        "HOPCHAIN_DLQ_RESOLUTIONS_TOPIC": unique_topic_name("incident-resolutions"),
        "HOPCHAIN_DLQ_INDEX_PATH": str(tmp_path / "index.sqlite"),
    }
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from hopchain.cli import main; main()"]
    service = await asyncio.create_subprocess_exec(
        *command, "dlq", "serve", f"--port={port}", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while (await asyncio.to_thread(timed_get_or_down, f"{url}/readyz")) != 200:
            assert service.returncode is None, "the service exited"
            assert time.monotonic() < deadline, "not ready within 60 s"
            await asyncio.sleep(0.1)

        started = time.perf_counter()
        parking = asyncio.create_task(
            produce_dead_letters(kafka_bootstrap, f"{source}.dlq", small_letters(source, COUNT))
        )
        answers: dict[str, list[float]] = {"readyz": [], "metrics": [], "ui": []}
        depth = 0.0
        while depth < COUNT:
            for name, path in (
                ("readyz", "/readyz"),
                ("metrics", "/metrics"),
                ("ui", "/ui/dead-letters?owner=team-a&error_type=internal"),
            ):
                status, seconds = await asyncio.to_thread(timed_get, url + path)
                assert status == 200, (name, status)
                answers[name].append(seconds)
            seen = await asyncio.to_thread(scrape, url)
            depth = sum(seen.get("hopchain_dlq_depth", {}).values())
            assert time.perf_counter() - started < 120, f"{depth:.0f} of {COUNT} indexed"
            await asyncio.sleep(0.2)
        ingested = time.perf_counter() - started
        await parking
        peak = peak_resident_mib(service.pid)
    finally:
        service.terminate()
        _, errors = await asyncio.wait_for(service.communicate(), 60)

    assert service.returncode == 0, errors.decode()[-2000:]
    slowest = {name: max(seconds) for name, seconds in answers.items()}
    assert all(seconds < ANSWER_SECONDS for seconds in slowest.values()), slowest
    assert min(len(seconds) for seconds in answers.values()) >= 3, answers
    assert peak < MEMORY_BOUND_MIB
    report_figure(
        pytestconfig,
        f"incident: {COUNT:,} dead letters parked while serving, indexed in {ingested:.1f} s "
        f"({COUNT / ingested:,.0f}/s); slowest answers during it: "
        + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in slowest.items())
        + f"; service peak resident memory {peak:.0f} MiB",
    )


def timed_get_or_down(url: str) -> int:
    """The status of a GET, or 0 while nothing listens yet."""
    try:
        return timed_get(url)[0]
    except OSError:
        return 0
