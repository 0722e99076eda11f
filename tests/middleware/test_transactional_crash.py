"""kill -9 of transactional stages while records flow: nothing lost, nothing doubled downstream.

Feeder -> stage A -> stage B -> reader, on the real broker. Both stages are
``txn_worker.py`` processes (a :class:`~hopchain.TransactionalConsumer` each); one of them, in
turn, is killed with SIGKILL at a random moment and started again, while the feeder sends
documents (every 25th one invalid, parked by stage A in the input's dead-letter topic inside
its transaction). Afterwards a ``read_committed`` reader finds every valid document exactly
once on the last topic and every invalid one exactly once in the dead-letter topic; the
outputs of the killed transactions are on the topics too, aborted, and never shown.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from txn_worker import Doc, read_all, registry

from hopchain import EnvelopeProducer, Hopchain, origin
from hopchain.testing import create_topics, unique_topic_name

WORKER = Path(__file__).with_name("txn_worker.py")
SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
RECORDS = 20_000 if SOAK else 1_500
RATE = 400.0 if SOAK else 150.0
"""Records per second the feeder sends: the kills land while records flow."""
MIN_KILLS = 40 if SOAK else 6
INVALID_EVERY = 25
WAIT = 120.0 if not SOAK else 600.0


@dataclass
class Stages:
    """The two stage processes, restarted after each kill."""

    bootstrap: str
    topics: list[str]
    folder: Path
    running: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    kills: Counter[str] = field(default_factory=Counter)

    async def start(self, name: str) -> None:
        index = 0 if name == "a" else 1
        log = (self.folder / f"stage-{name}-{sum(self.kills.values())}.log").open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            "--bootstrap",
            self.bootstrap,
            "--input",
            self.topics[index],
            "--output",
            self.topics[index + 1],
            "--group",
            f"stage-{name}",
            "--txn-id",
            f"stage-{name}-0",
            # Transactions stay open about a second, so every kill lands in one that holds
            # outputs (committed as soon as the stage caught up, at this rate most are not).
            "--hold-seconds",
            "1.0",
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
        log.close()
        assert process.stdout is not None
        async with asyncio.timeout(WAIT):
            line = await process.stdout.readline()
        assert line.strip() == b"ready", (name, line)
        self.running[name] = process

    async def kill(self, name: str) -> None:
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        await process.wait()
        self.kills[name] += 1

    async def stop_all(self) -> dict[str, int]:
        for process in self.running.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes: dict[str, int] = {}
        for name, process in self.running.items():
            try:
                async with asyncio.timeout(30):
                    codes[name] = await process.wait()
            except TimeoutError:
                process.kill()
                codes[name] = await process.wait()
        return codes

    def log_tails(self) -> str:
        return "\n".join(
            f"{path.name}: {path.read_text(errors='replace')[-800:]}"
            for path in sorted(self.folder.glob("stage-*.log"))
        )


@pytest.fixture
async def stages(kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stages]:
    names = [unique_topic_name(f"txn-crash-{hop}") for hop in ("in", "mid", "out")]
    await create_topics(kafka_bootstrap, *names, *(f"{name}.dlq" for name in names))
    running = Stages(kafka_bootstrap, names, tmp_path)
    yield running
    for process in running.running.values():
        if process.returncode is None:
            process.kill()
            await process.wait()


async def feed(bootstrap: str, topic: str) -> tuple[set[int], set[int]]:
    """Send the documents at :data:`RATE`; returns the valid and the invalid sequence numbers."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    sender = EnvelopeProducer(producer, Hopchain(registry(topic), component="feeder"))
    valid: set[int] = set()
    invalid: set[int] = set()
    started = time.monotonic()
    try:
        for seq in range(RECORDS):
            await asyncio.sleep(max(0.0, started + seq / RATE - time.monotonic()))
            if seq % INVALID_EVERY == INVALID_EVERY - 1:
                await producer.send(topic, f"not an envelope {seq}".encode(), key=str(seq).encode())
                invalid.add(seq)
                continue
            with origin(run_id="txn-crash", work_item_id=f"doc-{seq}"):
                await sender.send_soon(topic, Doc(seq=seq))
            valid.add(seq)
        await producer.flush()
    finally:
        await producer.stop()
    return valid, invalid


async def committed_seqs(bootstrap: str, topic: str) -> Counter[int]:
    records = await read_all(bootstrap, [topic], "read_committed")
    return Counter(Doc.model_validate_json(record.value).seq for record in records)


@pytest.mark.kafka
@pytest.mark.slow
async def test_kill_9_of_transactional_stages_loses_and_duplicates_nothing(
    stages: Stages,
) -> None:
    bootstrap, (first, middle, last) = stages.bootstrap, stages.topics
    await asyncio.gather(stages.start("a"), stages.start("b"))
    rng = random.Random(15)
    feeding = asyncio.create_task(feed(bootstrap, first))
    turn = 0
    while not feeding.done() or sum(stages.kills.values()) < MIN_KILLS:
        await asyncio.sleep(rng.uniform(0.3, 1.2))
        name = "ab"[turn % 2]
        turn += 1
        await stages.kill(name)
        await stages.start(name)
    valid, invalid = await feeding

    async def delivered() -> Counter[int]:
        return await committed_seqs(bootstrap, last)

    deadline = time.monotonic() + WAIT
    seen: Counter[int] = Counter()
    while time.monotonic() < deadline:
        seen = await delivered()
        if set(seen) >= valid:
            break
        await asyncio.sleep(1.0)
    codes = await stages.stop_all()
    seen = await delivered()
    parked = await read_all(bootstrap, [f"{first}.dlq"], "read_committed")
    everything = await read_all(bootstrap, [middle, last], "read_uncommitted")
    shown = await read_all(bootstrap, [middle, last], "read_committed")

    lost = sorted(valid - set(seen))
    duplicates = {seq: count for seq, count in seen.items() if count > 1}
    print(  # noqa: T201 - the figures RELIABILITY.md quotes
        f"txn crash: {len(valid)} valid + {len(invalid)} invalid documents, kills "
        f"a/b {stages.kills['a']}/{stages.kills['b']}; lost {len(lost)}, duplicates "
        f"downstream {sum(count - 1 for count in duplicates.values())}, aborted outputs "
        f"never shown {len(everything) - len(shown)}"
    )
    assert lost == [], stages.log_tails()
    assert duplicates == {}
    assert set(seen) == valid
    parked_keys = Counter(int(record.key) for record in parked)
    assert parked_keys == Counter(invalid)
    assert sum(stages.kills.values()) >= MIN_KILLS
    # Killed transactions held outputs; they are in the log, aborted, and nobody saw them.
    assert len(everything) > len(shown)
    assert codes == {"a": 0, "b": 0}
