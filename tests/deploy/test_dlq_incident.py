"""An incident on the real broker: a burst of dead letters parked while the service runs,
watched by the real Prometheus with the shipped rules.

The service runs as ``hopchain dlq serve`` in a process of its own, so that its resident
memory is the service's alone. While the burst is parked, health, metrics and the console
keep answering, and the age alert fires within its ``for:`` plus one scrape and one rule
evaluation of the moment the service first shows a letter that old. Afterwards the depth
Prometheus scraped is exact and memory stayed under its bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_tools import Processes, age_rule, free_port, prometheus_config, tool

from hopchain.schemas import ErrorType
from hopchain.testing import unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    produce_dead_letters,
    synthetic_dead_letter,
)

COUNT = 200_000
MEMORY_BOUND_MIB = 256
"""The service's peak resident memory: the index cache is 64 MiB whatever the depth."""
ANSWER_SECONDS = 2.0
AGE_THRESHOLD_SECONDS = 1800
"""Half the burst's letters are older than this (they were parked 60 to 3,600 s ago)."""
FOR_SECONDS = 5
SCRAPE_SECONDS = EVALUATION_SECONDS = 1  # as prometheus_config sets them
SLACK_SECONDS = 3.0
"""This test's own polling (every 0.2 s) and a loaded machine's late scrape."""
INDEXED_WITHIN_SECONDS = 300


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


def timed_get(url: str) -> tuple[int, bytes, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=ANSWER_SECONDS * 4) as response:  # noqa: S310
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read(), error.code
    return status, body, time.perf_counter() - started


def status_or_down(url: str) -> int:
    """The status of a GET, or 0 while nothing listens yet."""
    try:
        return timed_get(url)[0]
    except OSError:
        return 0


def oldest_age(metrics: bytes) -> float:
    """The largest ``hopchain_dlq_oldest_age_seconds`` sample of a /metrics page (0 if none)."""
    ages = [
        float(line.rsplit(b" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(b"hopchain_dlq_oldest_age_seconds{")
    ]
    return max(ages, default=0.0)


def prometheus_query(port: int, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    url = f"http://127.0.0.1:{port}/api/v1/{path}{query}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())["data"]


def age_alert_state(port: int) -> str | None:
    """``pending`` or ``firing`` when Prometheus holds the age alert, else None."""
    try:
        alerts = prometheus_query(port, "alerts")["alerts"]
    except OSError:
        return None  # not listening yet
    states = {a["state"] for a in alerts if a["labels"]["alertname"] == "HopchainDeadLetterTooOld"}
    return "firing" if "firing" in states else ("pending" if states else None)


def peak_resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")


@pytest.mark.kafka
@pytest.mark.slow
async def test_a_burst_parked_while_serving_keeps_answering_and_pages_in_time(  # noqa: PLR0915 - one story
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prometheus = tool("prometheus")
    source = unique_topic_name("incident")
    port, prometheus_port = free_port(), free_port()
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
    watching = Processes(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while (await asyncio.to_thread(status_or_down, f"{url}/readyz")) != 200:
            assert service.returncode is None, "the service exited"
            assert time.monotonic() < deadline, "not ready within 60 s"
            await asyncio.sleep(0.1)
        rule = age_rule(threshold_seconds=AGE_THRESHOLD_SECONDS, for_=f"{FOR_SECONDS}s")
        watching.start(
            "prometheus",
            prometheus,
            f"--config.file={prometheus_config(tmp_path, port, rule)}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
        )
        while await asyncio.to_thread(prometheus_query_up, prometheus_port) != 1:
            watching.check_alive()
            assert time.monotonic() < deadline + 60, "Prometheus never scraped the service"
            await asyncio.sleep(0.2)

        started = time.perf_counter()
        parking = asyncio.create_task(
            produce_dead_letters(kafka_bootstrap, f"{source}.dlq", small_letters(source, COUNT))
        )
        answers: dict[str, list[float]] = {"readyz": [], "metrics": [], "ui": []}
        shown_old_at = fired_at = None
        indexed = 0
        while indexed < COUNT or fired_at is None:
            for name, path in (
                ("readyz", "/readyz"),
                ("metrics", "/metrics"),
                ("ui", "/ui/dead-letters?owner=team-a&error_type=internal"),
            ):
                status, body, seconds = await asyncio.to_thread(timed_get, url + path)
                assert status == 200, (name, status)
                answers[name].append(seconds)
                if name == "readyz":
                    indexed = json.loads(body)["dead_letters"]
                old = name == "metrics" and oldest_age(body) > AGE_THRESHOLD_SECONDS
                if old and shown_old_at is None:
                    shown_old_at = time.perf_counter()
            state = None if fired_at else await asyncio.to_thread(age_alert_state, prometheus_port)
            if state == "firing":
                fired_at = time.perf_counter()
            watching.check_alive()
            elapsed = time.perf_counter() - started
            assert elapsed < INDEXED_WITHIN_SECONDS, f"{indexed} of {COUNT} indexed"
            await asyncio.sleep(0.2)
        ingested = time.perf_counter() - started
        await parking
        await asyncio.sleep(2 * SCRAPE_SECONDS)
        depth = prometheus_query(prometheus_port, "query", query="sum(hopchain_dlq_depth)")
        peak = peak_resident_mib(service.pid)
    finally:
        watching.stop()
        service.terminate()
        _, errors = await asyncio.wait_for(service.communicate(), 60)

    assert service.returncode == 0, errors.decode()[-2000:]
    slowest = {name: max(seconds) for name, seconds in answers.items()}
    assert all(seconds < ANSWER_SECONDS for seconds in slowest.values()), slowest
    assert min(len(seconds) for seconds in answers.values()) >= 3, answers
    assert peak < MEMORY_BOUND_MIB
    assert float(depth["result"][0]["value"][1]) == COUNT
    assert shown_old_at is not None
    paged_after = fired_at - shown_old_at
    assert paged_after <= FOR_SECONDS + SCRAPE_SECONDS + EVALUATION_SECONDS + SLACK_SECONDS
    sys.stdout.write(
        f"\nincident: {COUNT:,} dead letters indexed in {ingested:.1f} s "
        f"({COUNT / ingested:,.0f}/s); age alert firing {paged_after:.1f} s after the service "
        f"first showed it (for: {FOR_SECONDS} s); slowest answers: "
        + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in slowest.items())
        + f"; peak resident memory {peak:.0f} MiB\n"
    )


def prometheus_query_up(port: int) -> int:
    """``up`` of the service's scrape job: 1 once Prometheus scraped it, 0 before."""
    try:
        result = prometheus_query(port, "query", query='up{job="hopchain-dlq"}')["result"]
    except OSError:
        return 0
    return int(float(result[0]["value"][1])) if result else 0
