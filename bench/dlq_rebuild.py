"""How fast the dead-letter consumer ingests dead letters and rebuilds its index from Kafka.

    python bench/dlq_rebuild.py                      # 100,000 dead letters
    python bench/dlq_rebuild.py --count 20000 --bootstrap 127.0.0.1:9092

Parks ``--count`` dead letters (3 owners, 5 error types, half with an envelope, parked over
the last 6 hours) in three new dead-letter topics of 3 partitions, with a service running
that indexes them as they arrive (the ingest rate). Then it stops the service and measures
the two rebuilds: a new service from start to ready, and the CLI's ``load_index``; then the
floor of the latter, a plain aiokafka consumer reading the same topics in a fresh process
with ``getmany`` and doing nothing per record. Uses ``--bootstrap``, else
$HOPCHAIN_KAFKA_BOOTSTRAP, else 127.0.0.1:9092.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import time
import urllib.request
from collections import defaultdict

from hopchain.consumers import DeadLetterService, DlqSettings
from hopchain.schemas import ErrorType
from hopchain.testing import delete_topics, unique_topic_name
from hopchain.testing.deadletters import (
    SyntheticDeadLetter,
    envelope_for,
    produce_dead_letters,
    synthetic_dead_letter,
)

OWNERS = ("team-a", "team-b", "team-c")
ERROR_TYPES = (
    ErrorType.INTERNAL,
    ErrorType.TRANSIENT,
    ErrorType.REJECTED_INPUT,
    ErrorType.CONTRACT_VIOLATION,
    ErrorType.MALFORMED,
)


def scrape_times(url: str, times: int) -> list[float]:
    """Seconds each of ``times`` scrapes of ``url`` took, body read in full."""
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback
            response.read()
        seconds.append(time.perf_counter() - started)
    return seconds


CHILD = """
import asyncio, json, os, sys, time
from hopchain.consumers import DlqSettings, load_index

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

settings = DlqSettings.model_validate_json(sys.argv[1])
profile = os.environ.get("HOPCHAIN_BENCH_PROFILE")
if profile:  # where the time goes (the timing then includes cProfile's own cost)
    import cProfile
    profiler = cProfile.Profile()
    profiler.enable()
before = resident_mib()
started, cpu = time.perf_counter(), time.process_time()
snapshot = asyncio.run(load_index(settings, timeout=600))
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
if profile:
    profiler.disable()
    profiler.dump_stats(profile)
print(json.dumps({"count": len(snapshot.index), "seconds": seconds, "cpu": cpu,
                  "before_mib": before, "after_mib": resident_mib()}))
"""

FLOOR = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer, TopicPartition

async def main(bootstrap, topics):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        partitions = [TopicPartition(t, p) for t in topics
                      for p in sorted(consumer.partitions_for_topic(t) or ())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        started, cpu = time.perf_counter(), time.process_time()
        count, left = 0, {tp for tp, end in ends.items() if end > 0}
        while left:
            batch = await consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batch.items():
                count += len(records)
                if records and records[-1].offset + 1 >= ends[tp]:
                    left.discard(tp)
        print(json.dumps({"count": count, "seconds": time.perf_counter() - started,
                          "cpu": time.process_time() - cpu}))
    finally:
        await consumer.stop()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


async def fresh_process(code: str, *args: str) -> dict[str, float]:
    """The JSON line ``code`` prints, run in a fresh interpreter."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await child.communicate()
    measured: dict[str, float] = json.loads(out)
    return measured


def make_letters(count: int, sources: dict[str, str]) -> dict[str, list[SyntheticDeadLetter]]:
    rng = random.Random(7)
    now = time.time()
    envelopes = {owner: envelope_for(topic) for owner, topic in sources.items()}
    by_topic: dict[str, list[SyntheticDeadLetter]] = defaultdict(list)
    for number in range(count):
        owner = OWNERS[number % len(OWNERS)]
        by_topic[f"{sources[owner]}.dlq"].append(
            synthetic_dead_letter(
                owner=owner,
                source_topic=sources[owner],
                error_type=rng.choice(ERROR_TYPES),
                parked_at=now - rng.uniform(60.0, 6 * 3600.0),
                envelope=envelopes[owner] if number % 2 else None,
                key=f"order-{number}".encode(),
                source_offset=number,
            )
        )
    return by_topic


async def wait_for(service: DeadLetterService, count: int, within: float) -> None:
    deadline = time.monotonic() + within
    while len(service.index) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(service.index):,} of {count:,} indexed in {within} s")
        await asyncio.sleep(0.01)


def check(indexed: int, count: int, what: str) -> None:
    if indexed != count:
        raise SystemExit(f"{what} indexed {indexed:,} dead letters, expected {count:,}")


async def main(count: int, bootstrap: str) -> None:
    sources = {owner: unique_topic_name(f"bench-{owner}") for owner in OWNERS}
    settings = DlqSettings(
        kafka_bootstrap=bootstrap,
        dlq_topics={f"{topic}.dlq": owner for owner, topic in sources.items()},
        dlq_topic_partitions=3,
        dlq_resolutions_topic=unique_topic_name("bench-resolutions"),
        dlq_port=0,
    )
    topics = [f"{topic}.dlq" for topic in sources.values()]
    started = time.perf_counter()
    letters = make_letters(count, sources)
    print(f"built {count:,} dead letters in {time.perf_counter() - started:.1f} s")
    try:
        async with DeadLetterService(settings) as live:
            await live.wait_ready(timeout=60)
            started = time.perf_counter()
            producing = asyncio.gather(
                *(produce_dead_letters(bootstrap, topic, chunk) for topic, chunk in letters.items())
            )
            await producing
            produced = time.perf_counter() - started
            await wait_for(live, count, within=600)
            ingested = time.perf_counter() - started
        print(f"produced {count:,} in {produced:.2f} s ({count / produced:,.0f}/s)")
        print(
            f"ingest (service indexing while they were produced): all indexed "
            f"{ingested:.2f} s after the first send ({count / ingested:,.0f}/s)"
        )
        # Measure the rebuilds without the synthetic records in memory (nor their GC cost).
        del letters
        gc.collect()

        service = DeadLetterService(settings)
        started = time.perf_counter()
        await service.start()
        try:
            await service.wait_ready(timeout=600)
            ready = time.perf_counter() - started
            check(len(service.index), count, "the restarted service")
            scrapes = await asyncio.to_thread(scrape_times, f"{service.url}/metrics", 20)
        finally:
            await service.stop()
        del service
        gc.collect()
        print(
            f"rebuild (service start to ready): {ready:.2f} s ({count / ready:,.0f} dead letters/s)"
        )
        print(
            f"/metrics scrape with {count:,} dead letters indexed: median "
            f"{statistics.median(scrapes) * 1000:.1f} ms, max {max(scrapes) * 1000:.1f} ms "
            f"(20 scrapes)"
        )

        # The CLI's rebuild, in a fresh process so its memory is the index's alone.
        measured = await fresh_process(CHILD, settings.model_dump_json())
        check(int(measured["count"]), count, "load_index")
        loaded = measured["seconds"]
        print(
            f"rebuild (CLI load_index, fresh process): {loaded:.2f} s ({count / loaded:,.0f}/s; "
            f"its CPU {measured['cpu']:.2f} s, {measured['cpu'] / count * 1e6:.1f} µs per letter)"
        )
        print(
            f"resident memory of that process: {measured['before_mib']:,.0f} MiB after imports, "
            f"{measured['after_mib']:,.0f} MiB with the index of {count:,} "
            f"(~{(measured['after_mib'] - measured['before_mib']) * 2**20 / count:,.0f} bytes "
            "per dead letter)"
        )
        floor = await fresh_process(FLOOR, bootstrap, json.dumps(topics))
        check(int(floor["count"]), count, "the floor")
        print(
            f"floor (plain aiokafka getmany, nothing per letter, fresh process): "
            f"{floor['seconds']:.2f} s ({count / floor['seconds']:,.0f}/s, CPU "
            f"{floor['cpu']:.2f} s); load_index runs at {floor['seconds'] / loaded:.0%} of its rate"
        )
    finally:
        await delete_topics(bootstrap, *topics, settings.dlq_resolutions_topic)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="dead letters to park")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers")
    arguments = parser.parse_args()
    asyncio.run(
        main(
            arguments.count,
            arguments.bootstrap or os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        )
    )
