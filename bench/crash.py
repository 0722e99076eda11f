"""kill -9 of the pipeline's stages while records flow: records lost and repeated, per variant.

Producer -> stage A -> stage B on fresh topics, the processes of :mod:`bench.pipeline_roles`.
While the producer sends at a paced rate, stage A and stage B in turn are killed with SIGKILL
at a random moment and started again, until the feed ended and enough kills happened. Once
the last topic stops growing (or holds every record), the stages are stopped and the topics
read from the beginning with ``read_committed``, as a downstream service reads them:

- lost: records the producer sent that never reached the last topic;
- duplicates downstream: extra copies of a record on the last topic;
- duplicates suppressed: outputs written to the stages' topics but never shown to a
  ``read_committed`` reader (the outputs of killed transactions; 0 without transactions).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.pipeline import STOP_TIMEOUT, _Process, role_environment
from bench.workload import Item, Variant
from hopchain.testing import create_topics, delete_topics, unique_topic_name

STALL_SECONDS = 45.0
"""The last topic not growing this long after the feed and the kills: the run is over."""
QUIET_SECONDS = 6.0
"""Every record arrived and the topic did not grow for this long: the run is over."""


@dataclass
class CrashRun:
    """The accounting of one crash run of one variant."""

    variant: Variant
    records: int
    rate: float
    kills: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    suppressed: int = 0
    seconds: float = 0.0
    load1: float = 0.0
    ok: bool = False
    error: str = ""


async def _read(bootstrap: str, topics: list[str], isolation: str) -> list[Any]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, 0) for topic in topics]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        async with asyncio.timeout(120):
            for partition in partitions:
                while await consumer.position(partition) < ends[partition]:
                    batch = await consumer.getmany(partition, timeout_ms=500, max_records=5000)
                    records.extend(batch.get(partition, []))
        return records
    finally:
        await consumer.stop()


async def _delivered(bootstrap: str, topic: str) -> Counter[int]:
    records = await _read(bootstrap, [topic], "read_committed")
    return Counter(Item.model_validate_json(record.value).seq for record in records)


class _Stages:
    """Stage A and B of one crash run, each restarted after its kill."""

    def __init__(
        self, topics: list[str], common: list[str], folder: Path, variant: Variant
    ) -> None:
        self.topics = topics
        self.common = common
        self.folder = folder
        self.env = role_environment(variant)
        self.running: dict[str, _Process] = {}
        self.starts = 0

    async def start(self, name: str) -> None:
        index = 0 if name == "stage-a" else 1
        self.starts += 1
        process = _Process(
            name,
            self.folder / f"{name}-{self.starts}.json",
            self.folder / f"{name}-{self.starts}.log",
        )
        wiring = ["stage", "--input", self.topics[index], "--output", self.topics[index + 1]]
        await process.start([*wiring, "--name", name, *self.common], self.env)
        self.running[name] = process
        await process.ready()

    async def kill(self, name: str) -> None:
        process = self.running.pop(name)
        process.kill()
        await process.wait(STOP_TIMEOUT)

    async def stop(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            with contextlib.suppress(TimeoutError):
                await process.wait(STOP_TIMEOUT)
            process.kill()


async def run_crash(
    bootstrap: str, variant: Variant, records: int, *, rate: float, kills: int, seed: int = 15
) -> CrashRun:
    """One crash run: ``records`` records at ``rate``/s, at least ``kills`` kill -9 of a stage."""
    topics = [unique_topic_name(f"crash-{variant.value}-{hop}") for hop in ("in", "mid", "out")]
    await create_topics(bootstrap, *topics)
    run = CrashRun(variant=variant, records=records, rate=rate)
    common = ["--variant", variant.value, "--bootstrap", bootstrap, "--topics", ",".join(topics)]
    common += ["--count", str(records)]
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hopchain-crash-") as scratch:
        folder = Path(scratch)
        stages = _Stages(topics, common, folder, variant)
        producer = _Process("producer", folder / "producer.json", folder / "producer.log")
        try:
            await asyncio.gather(stages.start("stage-a"), stages.start("stage-b"))
            argv = ["producer", "--output", topics[0], "--rate", str(rate), *common]
            await producer.start(argv, role_environment(variant))
            assert producer.proc is not None  # noqa: S101 - started just now
            while producer.proc.returncode is None or run.kills < kills:
                await asyncio.sleep(rng.uniform(0.5, 2.0))
                name = ("stage-a", "stage-b")[run.kills % 2]
                await stages.kill(name)
                run.kills += 1
                await stages.start(name)
            await _until_settled(bootstrap, topics[2], records)
            await stages.stop()
            seen = await _delivered(bootstrap, topics[2])
            run.delivered = len(seen)
            run.lost = records - len(set(range(records)) & set(seen))
            run.duplicates = sum(count - 1 for count in seen.values())
            written = await _read(bootstrap, topics[1:], "read_uncommitted")
            shown = await _read(bootstrap, topics[1:], "read_committed")
            run.suppressed = len(written) - len(shown)
            run.ok = True
        except (TimeoutError, RuntimeError, OSError, ValueError, KeyError) as exc:
            tails = " ; ".join(p.tail() for p in stages.running.values() if p.log.exists())
            run.error = f"{type(exc).__name__}: {exc} ; {tails}"[:2000]
        finally:
            await stages.stop()
            producer.kill()
    run.seconds = time.monotonic() - started
    run.load1 = os.getloadavg()[0]
    with contextlib.suppress(Exception):
        await delete_topics(bootstrap, *topics)
    return run


async def _until_settled(bootstrap: str, topic: str, records: int) -> None:
    """Until the last topic holds every record, or stops growing for :data:`STALL_SECONDS`."""
    last, since = -1, time.monotonic()
    while time.monotonic() - since < STALL_SECONDS:
        seen = await _delivered(bootstrap, topic)
        total = sum(seen.values())
        if total != last:
            last, since = total, time.monotonic()
        elif len(seen) >= records and time.monotonic() - since >= QUIET_SECONDS:
            # Everything arrived and nothing more (no late repeat) for a while.
            return
        await asyncio.sleep(2.0)
