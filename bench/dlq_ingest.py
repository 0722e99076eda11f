"""The dead-letter service's rebuild against its floor, and its cost per letter without Kafka.

    PYTHONPATH=. python -m bench.dlq_ingest --count 200000 --bootstrap 127.0.0.1:9092
    PYTHONPATH=. python -m bench.dlq_ingest --checkout before=../other-checkout --checkout after=.

Parks ``--count`` small dead letters as :mod:`bench.dlq_incident` does (3 owners, 5 error
types, three 3-partition topics), then, on those same topics, measures side by side
(``--rounds`` times, the checkouts taking turns):

- the floor: a plain aiokafka consumer (no hopchain imported) reading every partition to its
  end with ``getmany``, doing nothing per record;
- the rebuild: ``load_index`` into an index file of its own (reading to ready, imports left
  out, as for the floor), and ``hopchain dlq serve`` from process start to ``/readyz`` 200
  with no index file;
- the cost per letter without Kafka: ``--cpu-count`` records read into memory once, then
  indexed into a new index file batch by batch, as the service does; CPU microseconds per
  letter, the best of ``--repeats`` (``--profile DIR`` writes a cProfile of one more run).

Each ``--checkout NAME=PATH`` (default: this one) runs the hopchain found at PATH, every
measurement in a fresh process. ``--keep FILE`` keeps the topics and writes their settings
to FILE; ``--reuse FILE`` measures those topics again instead of parking new ones. Uses
``--bootstrap``, else $HOPCHAIN_KAFKA_BOOTSTRAP, else 127.0.0.1:9092.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.dlq_incident import OWNERS, Served, free_port, park_all
from hopchain.testing import create_topics, delete_topics, unique_topic_name

FLOOR = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer, TopicPartition

async def main(bootstrap, topics, wrapped):
    if wrapped:  # hopchain's reader of odd header names, as the service installs it
        from hopchain.header_names import read_undecodable_header_names
        read_undecodable_header_names()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        partitions = [TopicPartition(t, p) for t in topics
                      for p in sorted(consumer.partitions_for_topic(t) or ())]
        if not all(consumer.partitions_for_topic(t) for t in topics):
            await consumer._client.force_metadata_update()
            partitions = [TopicPartition(t, p) for t in topics
                          for p in sorted(consumer.partitions_for_topic(t))]
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
        seconds = time.perf_counter() - started
        print(json.dumps({"count": count, "seconds": seconds,
                          "cpu": time.process_time() - cpu}))
    finally:
        await consumer.stop()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"))
"""

LOAD = """
import asyncio, json, sys, tempfile, time
from pathlib import Path
from hopchain.consumers import DlqSettings, load_index
from hopchain.consumers.store import LetterStore

settings = DlqSettings.model_validate_json(sys.argv[1])
with tempfile.TemporaryDirectory() as folder:
    store = LetterStore(str(Path(folder) / "index.sqlite"))
    store.open()
    started, cpu = time.perf_counter(), time.process_time()
    snapshot = asyncio.run(load_index(settings, timeout=1800, index=store))
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    store.close()
print(json.dumps({"count": len(snapshot.index), "seconds": seconds, "cpu": cpu}))
"""

CPU = """
import asyncio, cProfile, json, sys, tempfile, time
from pathlib import Path
from aiokafka import AIOKafkaConsumer, TopicPartition
from hopchain.consumers import DlqSettings
from hopchain.consumers.metrics import DlqMetrics
from hopchain.consumers.reader import IndexReader
from hopchain.consumers.store import LetterStore
from hopchain.consumers.topics import plan_topics

settings = DlqSettings.model_validate_json(sys.argv[1])
wanted, repeats, profile = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

async def fetch():
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        partitions = [TopicPartition(t, p) for t in sorted(settings.dlq_topics)
                      for p in sorted(consumer.partitions_for_topic(t))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        batches, count = [], 0
        while count < wanted:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            if not batch:
                break
            batches.append(batch)
            count += sum(len(records) for records in batch.values())
        return batches, count
    finally:
        await consumer.stop()

batches, count = asyncio.run(fetch())
plan = plan_topics(settings, None)

def run(folder):
    store = LetterStore(str(Path(folder) / "index.sqlite"))
    store.open()
    reader = IndexReader(settings, plan, store, DlqMetrics(store), None)
    reader.owners.update(plan.named)
    applier = getattr(reader, "applier", None)  # older checkouts index in the reader
    apply_batch = applier.apply_batch if applier is not None else reader._apply_batch
    started = time.process_time()
    for batch in batches:
        apply_batch(batch)
    spent = time.process_time() - started
    assert len(store) == count, (len(store), count)
    store.close()
    return spent

best = float("inf")
for _ in range(repeats):
    with tempfile.TemporaryDirectory() as folder:
        best = min(best, run(folder))
if profile:
    with tempfile.TemporaryDirectory() as folder:
        profiler = cProfile.Profile()
        profiler.enable()
        run(folder)
        profiler.disable()
        profiler.dump_stats(profile)
print(json.dumps({"count": count, "best_cpu": best, "us_per_letter": best / count * 1e6}))
"""


def child(code: str, checkout: str, *args: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with ``checkout`` first on the path; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    done = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=checkout,  # ``-c`` puts the working directory first on the path
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"a measuring process failed:\n{done.stderr}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_rebuild(checkout: str, settings: dict[str, Any], count: int) -> tuple[float, float]:
    """Seconds from ``hopchain dlq serve``'s process start to ready, with no index file, and
    the CPU seconds it used by then."""
    with tempfile.TemporaryDirectory(prefix="hopchain-ingest-") as folder:
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(checkout).resolve()),
            "HOPCHAIN_KAFKA_BOOTSTRAP": settings["kafka_bootstrap"],
            "HOPCHAIN_DLQ_TOPICS": json.dumps(settings["dlq_topics"]),
            "HOPCHAIN_DLQ_TOPIC_PARTITIONS": "3",
            "HOPCHAIN_DLQ_RESOLUTIONS_TOPIC": settings["dlq_resolutions_topic"],
            "HOPCHAIN_DLQ_INDEX_PATH": str(Path(folder) / "index.sqlite"),
        }
        served = Served(env, free_port(), cwd=checkout)
        try:
            seconds = served.ready(1800)
            cpu = cpu_seconds(served.process.pid)
            indexed = served.counts()["dead_letters"]
        finally:
            served.stop()
    if indexed != count:
        raise SystemExit(f"the service indexed {indexed:,} dead letters, expected {count:,}")
    return seconds, cpu


def measure(arguments: argparse.Namespace, settings: dict[str, Any], count: int) -> None:
    topics = json.dumps(sorted(settings["dlq_topics"]))
    bootstrap = settings["kafka_bootstrap"]
    text = json.dumps(settings)
    here = str(Path(__file__).resolve().parent.parent)
    checkouts = dict(item.split("=", 1) for item in arguments.checkout) or {"this": here}
    checkouts = {
        f"{name} #{n + 1}" if arguments.rounds > 1 else name: path
        for n in range(arguments.rounds)
        for name, path in checkouts.items()
    }
    floors = []
    if arguments.profile:
        Path(arguments.profile).mkdir(parents=True, exist_ok=True)
    for name, checkout in checkouts.items():
        print(f"load average {os.getloadavg()[0]:.2f}")
        for wrapped, said in (("0", "plain aiokafka"), ("1", "with the header-name reader")):
            floor = child(FLOOR, checkout if wrapped == "1" else here, bootstrap, topics, wrapped)
            floors.append(floor["count"] / floor["seconds"])
            print(
                f"floor ({said}: getmany, nothing per record): {floor['count']:,} in "
                f"{floor['seconds']:.2f} s ({floors[-1]:,.0f}/s, CPU {floor['cpu']:.2f} s)"
            )
        loaded = child(LOAD, checkout, text)
        if loaded["count"] != count:
            raise SystemExit(f"load_index indexed {loaded['count']:,}, expected {count:,}")
        rate = count / loaded["seconds"]
        print(
            f"[{name}] rebuild (load_index into an index file): {loaded['seconds']:.2f} s "
            f"({rate:,.0f}/s, {rate / floors[-2]:.0%} of the plain floor; "
            f"CPU {loaded['cpu']:.2f} s)"
        )
        seconds, cpu = serve_rebuild(checkout, settings, count)
        print(
            f"[{name}] rebuild (dlq serve, process start to ready): {seconds:.2f} s "
            f"({count / seconds:,.0f}/s; CPU {cpu:.2f} s, {cpu / count * 1e6:.1f} µs per letter)"
        )
        file = name.replace(" #", "-")
        profile = str(Path(arguments.profile) / f"{file}.prof") if arguments.profile else ""
        alone = child(
            CPU, checkout, text, str(arguments.cpu_count), str(arguments.repeats), profile
        )
        print(
            f"[{name}] in-process indexing, no Kafka: {alone['us_per_letter']:.1f} µs CPU per "
            f"letter (best of {arguments.repeats}, {alone['count']:,} letters)"
            + (f"; profile {profile}" if profile else "")
        )
    print(f"load average: {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000, help="dead letters to park")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers")
    parser.add_argument("--checkout", action="append", default=[], help="NAME=PATH")
    parser.add_argument("--cpu-count", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="measure each checkout N times")
    parser.add_argument("--profile", default=None, help="folder for cProfile output")
    parser.add_argument("--keep", default=None, help="keep the topics; their settings here")
    parser.add_argument("--reuse", default=None, help="measure the topics a --keep kept")
    arguments = parser.parse_args()
    bootstrap = (
        arguments.bootstrap or os.environ.get("HOPCHAIN_KAFKA_BOOTSTRAP") or "127.0.0.1:9092"
    )
    if arguments.reuse:
        kept = json.loads(Path(arguments.reuse).read_text())
        measure(arguments, kept["settings"], kept["count"])
        return
    sources = {owner: unique_topic_name(f"ingest-{owner}") for owner in OWNERS}
    settings: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "dlq_topics": {f"{topic}.dlq": owner for owner, topic in sources.items()},
        "dlq_topic_partitions": 3,
        "dlq_resolutions_topic": unique_topic_name("ingest-resolutions"),
    }
    asyncio.run(create_topics(bootstrap, *settings["dlq_topics"], partitions=3))
    started = time.perf_counter()
    asyncio.run(park_all(bootstrap, arguments.count, sources))
    produced = time.perf_counter() - started
    print(f"parked {arguments.count:,} in {produced:.1f} s ({arguments.count / produced:,.0f}/s)")
    try:
        measure(arguments, settings, arguments.count)
    finally:
        if arguments.keep:
            Path(arguments.keep).write_text(
                json.dumps({"settings": settings, "count": arguments.count})
            )
        else:
            asyncio.run(
                delete_topics(bootstrap, *settings["dlq_topics"], settings["dlq_resolutions_topic"])
            )


if __name__ == "__main__":
    main()
