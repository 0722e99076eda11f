"""A side-effecting stage killed with SIGKILL after its effect, before its offset commit.

The stage (``stage_worker.py``, a process of its own on the real broker) files claims into a
ledger keyed by the stage's idempotency key. It is killed while handling the second of three
claims, then restarted without the kill switch. After the redelivery the ledger holds exactly
one row per claim, every claim's output was sent exactly once, and the redelivered claim's
output names the row the killed process wrote (the key survived the crash unchanged).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from faststream.kafka import KafkaBroker
from stage_worker import KILL_ENV, LEDGER_TABLE, STAGE_NAME, Claim, Filed, registry

from hopchain import Hopchain, HopchainMiddleware, origin
from hopchain.schemas import ContractRegistry, Decision, EffectKind, EnvelopeCodec
from hopchain.schemas.ids import stage_intent_key
from hopchain.testing import TopicFactory

WORKER = Path(__file__).with_name("stage_worker.py")
WAIT = 90.0
"""Seconds one worker may take to start, be killed, or hand over after a crash."""

CLAIMS = ("claim-1", "claim-2", "claim-3")
KILLED_AT = "claim-2"
BATCHED = os.environ.get("HOPCHAIN_COMMITS", "auto") != "record"
"""hopchain commits in batches (the worker's subscriber is on ``middleware.ack_policy``):
outputs leave without waiting, offsets follow later."""


@dataclass
class Worker:
    """One run of the stage worker: its process, what it printed, and when."""

    process: asyncio.subprocess.Process
    started: float
    lines: list[str] = field(default_factory=list)
    seen: dict[str, float] = field(default_factory=dict)

    async def wait_for(self, line: str) -> float:
        """Read the worker's output until ``line``; seconds since the worker started."""
        assert self.process.stdout is not None
        async with asyncio.timeout(WAIT):
            while line not in self.seen:
                raw = await self.process.stdout.readline()
                if not raw:
                    raise AssertionError(f"worker exited before {line!r}; it said {self.lines}")
                text = raw.decode().strip()
                self.lines.append(text)
                self.seen.setdefault(text, time.monotonic() - self.started)
        return self.seen[line]

    async def exit_code(self) -> int:
        async with asyncio.timeout(WAIT):
            assert self.process.stdout is not None
            self.lines += (await self.process.stdout.read()).decode().splitlines()
            return await self.process.wait()


@pytest.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    """Workers a test started; any still running when it ends (a failure) are killed."""
    running: list[Worker] = []
    yield running
    for worker in running:
        if worker.process.returncode is None:
            worker.process.kill()
            await worker.process.wait()


async def start_worker(
    bootstrap: str, topics: tuple[str, str], group: str, ledger: Path, *, kill: str | None
) -> Worker:
    env = {key: value for key, value in os.environ.items() if key != KILL_ENV}
    if kill is not None:
        env[KILL_ENV] = kill
    # The worker's own INFO logs would fill the pipe nobody reads: keep stderr in a file.
    stderr = (ledger.parent / f"worker-{uuid.uuid4().hex[:6]}.log").open("wb")
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        "--bootstrap",
        bootstrap,
        "--input",
        topics[0],
        "--output",
        topics[1],
        "--group",
        group,
        "--ledger",
        str(ledger),
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=env,
    )
    stderr.close()
    return Worker(process=process, started=started)


async def feed(bootstrap: str, contracts: ContractRegistry, topic: str) -> dict[str, str]:
    """Publish the claims; returns each claim's intent key, named before the first attempt."""
    intents = {claim_id: f"intent-{uuid.uuid4().hex}" for claim_id in CLAIMS}
    broker = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(contracts, component="intake"))]
    )
    await broker.start()
    try:
        for amount, claim_id in enumerate(CLAIMS, start=1):
            with origin(run_id="run-crash", work_item_id=claim_id, intent_key=intents[claim_id]):
                await broker.publish(Claim(claim_id=claim_id, amount_cents=amount * 100), topic)
    finally:
        await broker.stop()
    return intents


async def read(bootstrap: str, topic: str, count: int) -> list[ConsumerRecord[Any, Any]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[ConsumerRecord[Any, Any]] = []
    try:
        async with asyncio.timeout(WAIT):
            while len(records) < count:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def end_offset(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        ends: dict[TopicPartition, int] = await consumer.end_offsets([partition])
        return ends[partition]
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group: str, topic: str) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    found = offsets.get(TopicPartition(topic, 0))
    return None if found is None else int(found.offset)


async def sent_and_committed(
    bootstrap: str, output_topic: str, group: str, input_topic: str
) -> tuple[int, int]:
    """Outputs on the topic and the committed input offset right after the kill, checked."""
    sent = await end_offset(bootstrap, output_topic)
    done = await committed(bootstrap, group, input_topic) or 0
    if BATCHED:
        # claim-1's output may still have been in flight; no offset passed an unsent output.
        assert sent in {0, 1}
        assert done <= sent
    else:
        assert (sent, done) == (1, 1)
    return sent, done


def first_of_each(codec: EnvelopeCodec, outputs: list[ConsumerRecord[Any, Any]]) -> list[Any]:
    """The outputs decoded, without repeats: a repeat carries the first send's envelope id."""
    decoded: dict[str, Any] = {}
    for record in outputs:
        found = codec.decode(record.topic, record.value, list(record.headers))
        decoded.setdefault(found.envelope.id, found)
    return list(decoded.values())


def ledger_rows(path: Path) -> tuple[list[tuple[str, str, str, int]], Counter[str]]:
    """The ledger's rows (key, claim, row id, writer pid) and how often each key was written."""
    with sqlite3.connect(path) as ledger:
        rows = ledger.execute(
            f"SELECT key, claim_id, row_id, pid FROM {LEDGER_TABLE} ORDER BY claim_id"  # noqa: S608 - a constant table name
        ).fetchall()
        writes = Counter(key for (key,) in ledger.execute("SELECT key FROM write_log"))
    ledger.close()
    return rows, writes


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    [
        # Killed between the ledger's commit and the dedupe store's: the action runs again on
        # redelivery and the ledger's primary key refuses the second row.
        "after_write",
        # Killed after both commits, before the output and the offset: the dedupe store
        # answers with the stored row id and the action is not run again.
        "after_once",
    ],
)
async def test_a_killed_side_effecting_stage_commits_its_effect_once_after_redelivery(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    tmp_path: Path,
    workers: list[Worker],
    point: str,
) -> None:
    action_runs_again = point == "after_write"
    input_topic, output_topic = await new_topic(prefix="to-file"), await new_topic(prefix="filed")
    contracts = registry(input_topic, output_topic)
    group, ledger = f"filer-{uuid.uuid4().hex[:8]}", tmp_path / "ledger.sqlite"
    intents = await feed(kafka_bootstrap, contracts, input_topic)
    keys = {claim_id: stage_intent_key(intent, STAGE_NAME) for claim_id, intent in intents.items()}

    # First run: files claim-1, then dies while filing claim-2.
    first = await start_worker(
        kafka_bootstrap,
        (input_topic, output_topic),
        group,
        ledger,
        kill=f"{KILLED_AT}:{point}",
    )
    workers.append(first)
    first_ready = await first.wait_for("ready")
    first_killed = await first.wait_for(f"killing myself at {point} of {KILLED_AT}")
    assert await first.exit_code() == -signal.SIGKILL
    assert "handled claim-1" in first.lines
    assert f"handled {KILLED_AT}" not in first.lines

    rows, writes = ledger_rows(ledger)
    assert [(key, claim) for key, claim, _, _ in rows] == [
        (keys["claim-1"], "claim-1"),
        (keys[KILLED_AT], KILLED_AT),
    ]
    killed_row = rows[1][2]
    assert rows[1][3] == first.process.pid
    # Its effect is committed, its output is not, and its offset was not committed past it.
    sent_before, committed_before = await sent_and_committed(
        kafka_bootstrap, output_topic, group, input_topic
    )

    # Second run, no kill switch: claim-2 is redelivered, then claim-3 is handled.
    second = await start_worker(
        kafka_bootstrap, (input_topic, output_topic), group, ledger, kill=None
    )
    workers.append(second)
    try:
        second_ready = await second.wait_for("ready")
        redelivered = await second.wait_for(f"handled {KILLED_AT}")
        await second.wait_for("handled claim-3")
        # An output sent before the crash whose offset was not committed is sent again.
        repeats = sent_before - committed_before
        outputs = await read(kafka_bootstrap, output_topic, len(CLAIMS) + repeats)
    finally:
        second.process.send_signal(signal.SIGTERM)
        assert await second.exit_code() == 0
    if committed_before == 1:
        assert "handled claim-1" not in second.lines  # committed before the crash: not redone

    # Exactly one ledger row per claim, and the killed process's row is the one kept.
    rows, writes = ledger_rows(ledger)
    assert [(key, claim) for key, claim, _, _ in rows] == [(keys[c], c) for c in CLAIMS]
    assert rows[1][2] == killed_row
    assert writes == {
        keys["claim-1"]: 1,
        keys[KILLED_AT]: 2 if action_runs_again else 1,
        keys["claim-3"]: 1,
    }

    # Every claim's output was sent once, in order; the redelivered one names the kept row.
    assert await end_offset(kafka_bootstrap, output_topic) == len(CLAIMS) + repeats
    decoded = first_of_each(EnvelopeCodec(contracts), outputs)
    assert len(decoded) == len(CLAIMS)
    payloads = [d.payload for d in decoded]
    assert all(isinstance(p, Filed) for p in payloads)
    assert [p.claim_id for p in payloads if isinstance(p, Filed)] == list(CLAIMS)
    assert payloads[1] == Filed(claim_id=KILLED_AT, ledger_row=killed_row)
    hop = decoded[1].envelope.chain[-1]
    assert hop.decision is Decision.FORWARDED
    assert [(e.kind, e.target, e.identifier) for e in hop.effects] == [
        (EffectKind.RECORD_WRITTEN, LEDGER_TABLE, killed_row)
    ]
    assert decoded[1].envelope.intent_key == intents[KILLED_AT]
    assert await committed(kafka_bootstrap, group, input_topic) == len(CLAIMS)

    timings = {
        "first_ready_s": round(first_ready, 2),
        "first_killed_s": round(first_killed, 2),
        "second_ready_s": round(second_ready, 2),
        "second_redelivered_s": round(redelivered, 2),
        "kill_to_redelivered_s": round(
            (second.started + redelivered) - (first.started + first_killed), 2
        ),
    }
    print(f"\n[{point}] {timings}")  # noqa: T201 - timings for the run report (pytest -s)
