"""The dead-letter service through an incident: a burst of small dead letters while it runs.

    HOPCHAIN_BENCH_DLQ_COUNT=1000000 python -m bench.dlq_incident
    HOPCHAIN_BENCH_DLQ_COUNT=100000 python -m bench.dlq_incident --bootstrap 127.0.0.1:9092

Runs ``hopchain dlq serve`` in a process of its own (its index file in a temporary folder)
and parks ``HOPCHAIN_BENCH_DLQ_COUNT`` dead letters (default 100,000: boundary rejections
of a 16-byte value, 3 owners, 5 error types, parked one after another over the last hour;
``HOPCHAIN_BENCH_DLQ_SPREAD=21600`` parks them at random times over 6 hours) in three
3-partition dead-letter topics, as fast as one producer sends them. It reports the live
ingest rate (first send to the last letter indexed, as ``/readyz`` counts them), the
service's resident memory (now and at its peak), the ``/metrics`` scrape time during and
after the burst, the p95 of the list and detail endpoints and of the console's list page,
``hopchain dlq list --owner team-a --limit 50 --index FILE`` (a fresh process, start-up
included), a restart's time to ready with the file, and a rebuild's without it (skipped
with ``HOPCHAIN_BENCH_DLQ_REBUILD=0``). Uses
``--bootstrap``, else $HOPCHAIN_KAFKA_BOOTSTRAP, else a broker of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.dlq_feed import Feed, records_of, send_letters
from hopchain.schemas import ErrorType
from hopchain.schemas.deadletter import DLQ_PREFIX
from hopchain.testing import LocalKafka, delete_topics, unique_topic_name
from hopchain.testing.deadletters import synthetic_dead_letter

HOPCHAIN = (sys.executable, "-c", "from hopchain.cli import main; main()")
"""The ``hopchain`` command of this interpreter (and of this checkout, with PYTHONPATH)."""

OWNERS = ("team-a", "team-b", "team-c")
SOURCE_OFFSET = DLQ_PREFIX + "source-offset"
SOURCE_TIMESTAMP = DLQ_PREFIX + "source-timestamp"
SPREAD = (
    float(os.environ["HOPCHAIN_BENCH_DLQ_SPREAD"])
    if "HOPCHAIN_BENCH_DLQ_SPREAD" in os.environ
    else None
)
ERROR_TYPES = (
    ErrorType.INTERNAL,
    ErrorType.TRANSIENT,
    ErrorType.REJECTED_INPUT,
    ErrorType.CONTRACT_VIOLATION,
    ErrorType.MALFORMED,
)


def letters(count: int, source: str, owner: str, seed: int) -> Feed:
    """Small dead letters, made as they are sent (a million never sit in memory).

    One letter is made per error type; the others are copies of it with their own id,
    source offset and times (:func:`bench.dlq_feed.records_of`), so that the producer, not
    the making, sets the pace.
    """
    rng = random.Random(seed)
    start = time.time() - 3600.0 if SPREAD is None else time.time() - SPREAD
    step = (3600.0 if SPREAD is None else SPREAD) / max(count, 1)
    templates = [
        synthetic_dead_letter(
            owner=owner,
            source_topic=source,
            error_type=error_type,
            parked_at=start,
            value=b'{"n": 1234567890}',
        )
        for error_type in ERROR_TYPES
    ]
    # Parked as an incident parks them, one after another (over the last hour); with
    # HOPCHAIN_BENCH_DLQ_SPREAD=SECONDS, at random times over that many seconds instead.
    times = (
        (start + number * step for number in range(count))
        if SPREAD is None
        else (start + rng.uniform(0, SPREAD) for _ in range(count))
    )
    return records_of(
        templates,
        range(count),
        times,
        owner,
        rng,
        offset_header=SOURCE_OFFSET,
        timestamp_header=SOURCE_TIMESTAMP,
    )


def get(url: str) -> tuple[int, bytes, float]:
    """Status, body and seconds of one GET (a refusal's status too)."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - loopback
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        body, status = error.read(), error.code
    return status, body, time.perf_counter() - started


def p95(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return f"{ordered[int(len(ordered) * 0.95) - 1] * 1000:.1f} ms"


def memory_mib(pid: int) -> tuple[float, float]:
    """Resident and peak resident memory of a process, in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class Served:
    """``hopchain dlq serve`` in a child process, on a port of its own."""

    def __init__(self, env: dict[str, str], port: int, cwd: str | None = None) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.started = time.perf_counter()
        self.process = subprocess.Popen(  # noqa: S603 - our own command
            [*HOPCHAIN, "dlq", "serve", "--port", str(port)],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def ready(self, within: float) -> float:
        """Seconds from the process start until ``/readyz`` says ready."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                if get(f"{self.url}/readyz")[0] == 200:  # noqa: PLR2004
                    return time.perf_counter() - self.started
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"not ready within {within} s")

    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = json.loads(get(f"{self.url}/readyz")[1])
        return counts

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def park_all(bootstrap: str, count: int, sources: dict[str, str]) -> None:
    share = count // len(OWNERS)
    await asyncio.gather(
        *(
            send_letters(
                bootstrap,
                f"{source}.dlq",
                letters(share + (n < count % len(OWNERS)), source, owner, seed=n),
            )
            for n, (owner, source) in enumerate(sources.items())
        )
    )


def measure(  # noqa: PLR0915 - one story
    bootstrap: str, count: int, folder: Path, say: Callable[[str], None] = print
) -> None:
    """Run the incident on ``bootstrap`` and ``say`` each figure, one line each."""
    sources = {owner: unique_topic_name(f"incident-{owner}") for owner in OWNERS}
    index = folder / "dlq-index.sqlite"
    env = {
        **os.environ,
        "HOPCHAIN_KAFKA_BOOTSTRAP": bootstrap,
        "HOPCHAIN_DLQ_TOPICS": json.dumps({f"{t}.dlq": o for o, t in sources.items()}),
        "HOPCHAIN_DLQ_TOPIC_PARTITIONS": "3",
        "HOPCHAIN_DLQ_RESOLUTIONS_TOPIC": unique_topic_name("incident-resolutions"),
        "HOPCHAIN_DLQ_INDEX_PATH": str(index),
    }
    port = free_port()
    served = Served(env, port)
    try:
        served.ready(120)
        idle = memory_mib(served.process.pid)[0]
        started = time.perf_counter()
        producing = asyncio.get_event_loop_policy().new_event_loop()
        scrapes: list[float] = []
        import threading  # noqa: PLC0415

        done = threading.Event()

        def scrape_during() -> None:
            while not done.is_set():
                scrapes.append(get(f"{served.url}/metrics")[2])
                time.sleep(0.5)

        watcher = threading.Thread(target=scrape_during)
        watcher.start()
        producing.run_until_complete(park_all(bootstrap, count, sources))
        produced = time.perf_counter() - started
        while served.counts()["dead_letters"] < count:
            time.sleep(0.05)
        ingested = time.perf_counter() - started
        done.set()
        watcher.join()
        rss, peak = memory_mib(served.process.pid)
        say(f"parked {count:,} in {produced:.1f} s ({count / produced:,.0f}/s produced)")
        say(
            f"ingest (live): all indexed {ingested:.1f} s after the first send "
            f"({count / ingested:,.0f}/s)"
        )
        say(
            f"/metrics during the burst: median {statistics.median(scrapes) * 1000:.1f} ms, "
            f"max {max(scrapes) * 1000:.1f} ms ({len(scrapes)} scrapes)"
        )
        say(
            f"service resident memory: {idle:.0f} MiB idle, {rss:.0f} MiB after, "
            f"peak {peak:.0f} MiB; index file {index.stat().st_size / 2**20:,.0f} MiB"
        )
        after = [get(f"{served.url}/metrics")[2] for _ in range(20)]
        say(
            f"/metrics after: median {statistics.median(after) * 1000:.1f} ms, "
            f"max {max(after) * 1000:.1f} ms"
        )
        listed = json.loads(get(f"{served.url}/dead-letters?owner=team-a&limit=50")[1])
        ids = [row["id"] for row in listed]
        lists, details, pages, deep = [], [], [], []
        for n in range(40):
            owner = OWNERS[n % 3]
            lists.append(get(f"{served.url}/dead-letters?owner={owner}&limit=50")[2])
            deep.append(get(f"{served.url}/dead-letters?limit=50&after={ids[n % len(ids)]}")[2])
            details.append(get(f"{served.url}/dead-letters/{ids[n % len(ids)]}")[2])
            pages.append(get(f"{served.url}/ui/dead-letters?owner={owner}&error_type=internal")[2])
        say(
            f"p95 of 40: list {p95(lists)}, list after an id {p95(deep)}, detail "
            f"{p95(details)}, console list page {p95(pages)}"
        )
        cli = [
            *HOPCHAIN,
            "dlq",
            "list",
            "--owner",
            "team-a",
            "--limit",
            "50",
            "--index",
            str(index),
            "--json",
        ]
        times = []
        for _ in range(3):
            begun = time.perf_counter()
            subprocess.run(cli, env=env, check=True, capture_output=True)  # noqa: S603
            times.append(time.perf_counter() - begun)
        say(
            f"hopchain dlq list --owner team-a --limit 50 --index FILE: "
            f"{min(times):.2f} s best of 3 (a fresh process)"
        )
        served.stop()

        served = Served(env, port)
        restart = served.ready(120)
        say(
            f"restart with the index file: ready in {restart:.2f} s "
            f"(resident {memory_mib(served.process.pid)[0]:.0f} MiB)"
        )
        served.stop()
        if os.environ.get("HOPCHAIN_BENCH_DLQ_REBUILD", "1") == "0":
            return
        for suffix in ("", "-wal", "-shm"):
            Path(f"{index}{suffix}").unlink(missing_ok=True)
        served = Served(env, port)
        rebuild = served.ready(3600)
        rss, peak = memory_mib(served.process.pid)
        say(
            f"rebuild without it: ready in {rebuild:.1f} s ({count / rebuild:,.0f}/s), "
            f"resident {rss:.0f} MiB, peak {peak:.0f} MiB"
        )
    finally:
        if served.process.poll() is None:
            served.stop()
        asyncio.run(
            delete_topics(
                bootstrap,
                *(f"{t}.dlq" for t in sources.values()),
                env["HOPCHAIN_DLQ_RESOLUTIONS_TOPIC"],
            )
        )


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP"))
    arguments = parser.parse_args()
    count = int(os.environ.get("HOPCHAIN_BENCH_DLQ_COUNT", "100000"))
    with tempfile.TemporaryDirectory(prefix="hopchain-incident-") as folder:
        if arguments.bootstrap:
            measure(arguments.bootstrap, count, Path(folder))
            return
        with LocalKafka(heap="1g") as kafka:
            measure(kafka.bootstrap, count, Path(folder))


if __name__ == "__main__":
    main()
