"""Kill -9 of a confluent-kafka stage during a feed: nothing is lost (real broker).

The stage (``confluent_worker.py``, a process of its own) forwards valid documents and parks
invalid ones, per record or a batch at a time; it is killed with SIGKILL at random moments
while a feeder sends on plain confluent-kafka, and started again each time. At least once:
every valid document reaches the output and every invalid one its dead-letter topic;
duplicates (records handled again after a kill) are counted, not refused.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from txn_worker import Doc, read_all, registry

from hopchain import ConfluentEnvelopeProducer, Hopchain, origin
from hopchain.testing import create_topics, unique_topic_name

WORKER = Path(__file__).with_name("confluent_worker.py")
RECORDS = 900
RATE = 150.0
"""Records per second the feeder sends: the kills land while records flow."""
MIN_KILLS = 5
INVALID_EVERY = 25
WAIT = 90.0


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def start_worker(
    bootstrap: str, source: str, output: str, mode: str, log: Path
) -> asyncio.subprocess.Process:
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            *("--bootstrap", bootstrap, "--input", source, "--output", output),
            *("--group", f"confluent-{mode}", *(["--batches"] if mode == "batch" else [])),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    async with asyncio.timeout(WAIT):
        line = await process.stdout.readline()
    assert line.strip() == b"ready", tail(log)
    return process


async def feed(bootstrap: str, topic: str) -> tuple[set[int], set[int]]:
    """Send documents at :data:`RATE`, every 25th one invalid; returns both sets."""
    valid: set[int] = set()
    invalid: set[int] = set()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sender = ConfluentEnvelopeProducer(producer, Hopchain(registry(topic), component="feeder"))
    queued = []
    started = time.monotonic()
    for seq in range(RECORDS):
        await asyncio.sleep(max(0.0, started + seq / RATE - time.monotonic()))
        key = str(seq).encode()
        if seq % INVALID_EVERY == INVALID_EVERY - 1:
            producer.produce(topic, f"not an envelope {seq}".encode(), key, partition=0)
            invalid.add(seq)
            continue
        with origin(run_id="confluent-crash", work_item_id=f"doc-{seq}"):
            queued.append(await sender.send_soon(topic, Doc(seq=seq), key=key, partition=0))
        valid.add(seq)
    await asyncio.gather(*queued)
    await sender.close()
    return valid, invalid


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["record", "batch"])
async def test_kill_9_of_a_confluent_stage_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, mode: str
) -> None:
    source, output = (unique_topic_name(f"confluent-crash-{mode}-{hop}") for hop in ("in", "out"))
    await create_topics(kafka_bootstrap, source, output, f"{source}.dlq", f"{output}.dlq")
    log = tmp_path / "stage.log"
    process = await start_worker(kafka_bootstrap, source, output, mode, log)
    feeding = asyncio.create_task(feed(kafka_bootstrap, source))
    rng = random.Random(27)
    kills = 0
    try:
        while not feeding.done() or kills < MIN_KILLS:
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            process.send_signal(signal.SIGKILL)
            await process.wait()
            kills += 1
            process = await start_worker(kafka_bootstrap, source, output, mode, log)
        valid, invalid = await feeding

        async def seen() -> Counter[int]:
            records = await read_all(kafka_bootstrap, [output], "read_uncommitted")
            return Counter(Doc.model_validate_json(r.value).seq for r in records)

        async def parked() -> Counter[int]:
            records = await read_all(kafka_bootstrap, [f"{source}.dlq"], "read_uncommitted")
            return Counter(int(r.key) for r in records)

        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if set(await seen()) >= valid and set(await parked()) >= invalid:
                break
            await asyncio.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    delivered, dead = await seen(), await parked()
    lost = sorted(valid - set(delivered))
    duplicates = sum(count - 1 for count in delivered.values())
    print(  # noqa: T201 - the figures the report quotes
        f"confluent crash ({mode}): {len(valid)} valid + {len(invalid)} invalid, {kills} kills; "
        f"lost {len(lost)}, duplicates {duplicates}, "
        f"parked twice {sum(count - 1 for count in dead.values())}"
    )
    assert lost == [], tail(log)
    assert set(delivered) == valid
    assert set(dead) == invalid
    assert kills >= MIN_KILLS
    assert code == 0, tail(log)
