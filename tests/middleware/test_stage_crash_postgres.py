"""Three instances of the ``file`` stage, killed with SIGKILL again and again, on real Kafka
and a real PostgreSQL server: exactly one ledger row per work item.

The instances (``stage_worker_postgres.py``) share one consumer group over a 6-partition
input topic and one ``PostgresDedupeStore``; the ledger has no unique constraint of its own.
Kills alternate between two windows: inside the effect's transaction (the row and the key
roll back together; the redelivery writes them) and after its commit but before the output
and the offset commit (the redelivery finds the key and does not write again). Each killed
instance is restarted at once, so every kill is also two rebalances.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from faststream.kafka import KafkaBroker
from stage_worker import STAGE_NAME, Claim, Filed, registry
from stage_worker_postgres import HOLD_ENV, LEDGER_DDL, LEDGER_TABLE

from hopchain import Hopchain, HopchainMiddleware, origin
from hopchain.schemas import ContractRegistry, EnvelopeCodec
from hopchain.schemas.ids import stage_intent_key
from hopchain.testing import TopicFactory, partitions_of, read_to_end

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

WORKER = Path(__file__).with_name("stage_worker_postgres.py")
SOAK = os.environ.get("HOPCHAIN_SOAK", "").strip() not in {"", "0", "false", "no"}
INSTANCES = 3
WORK_ITEMS = 3000 if SOAK else 600
KILLS = 20 if SOAK else 6
PARTITIONS = 6
WAIT = 240.0 if SOAK else 150.0
"""Seconds for the whole run to settle after the last kill."""


@dataclass
class Instance:
    """One process of the stage and every line it printed, read as they come."""

    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> None:
        assert self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            self.lines.append(raw.decode().strip())
            self.changed.set()
        self.changed.set()

    async def wait_for(self, prefix: str, after: int = 0) -> str:
        """The first line from index ``after`` on that starts with ``prefix``."""
        while True:
            for line in self.lines[after:]:
                if line.startswith(prefix):
                    return line
            if self.process.returncode is not None:
                raise AssertionError(f"instance exited before {prefix!r}: {self.lines[-5:]}")
            self.changed.clear()
            await self.changed.wait()


@dataclass
class Fleet:
    """The running instances of the stage, and every instance ever started."""

    command: list[str]
    log_dir: Path
    running: list[Instance] = field(default_factory=list)
    started: list[Instance] = field(default_factory=list)

    async def start(self) -> Instance:
        env = {**os.environ, HOLD_ENV: "20"}
        # The instances' own INFO logs would fill a pipe nobody reads: keep stderr in a file.
        with (self.log_dir / f"instance-{len(self.started)}.log").open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                *self.command, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env
            )
        instance = Instance(process=process)
        instance.reader = asyncio.create_task(instance.read())
        self.running.append(instance)
        self.started.append(instance)
        async with asyncio.timeout(90):
            await instance.wait_for("ready")
        return instance

    async def kill(self, instance: Instance) -> None:
        instance.process.send_signal(signal.SIGKILL)
        assert await instance.process.wait() == -signal.SIGKILL
        self.running.remove(instance)

    async def stop_all(self) -> list[int]:
        codes = []
        for instance in list(self.running):
            if instance.process.returncode is None:
                instance.process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(60):
                codes.append(await instance.process.wait())
            self.running.remove(instance)
        return codes

    async def next_to_print(self, prefix: str) -> Instance:
        """The first running instance to print a line starting with ``prefix`` from now on."""
        marks = {id(instance): len(instance.lines) for instance in self.running}
        while True:
            for instance in self.running:
                new = instance.lines[marks[id(instance)] :]
                if any(line.startswith(prefix) for line in new):
                    return instance
            await asyncio.sleep(0.002)

    def count(self, word: str) -> int:
        return sum(line.startswith(f"{word} ") for i in self.started for line in i.lines)


@pytest.fixture
async def fleet(
    kafka_bootstrap: str, postgres_dsn: str, new_topic: TopicFactory, tmp_path: Path
) -> AsyncIterator[Fleet]:
    input_topic = await new_topic(partitions=PARTITIONS, prefix="to-file")
    output_topic = await new_topic(prefix="filed")
    group = f"filer-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, str(WORKER), "--bootstrap", kafka_bootstrap]
    command += ["--input", input_topic, "--output", output_topic, "--group", group]
    running = Fleet(command=[*command, "--dsn", postgres_dsn], log_dir=tmp_path)
    yield running
    for instance in running.started:
        if instance.process.returncode is None:
            instance.process.kill()
            await instance.process.wait()
        if instance.reader is not None:
            await instance.reader


def argument(fleet: Fleet, name: str) -> str:
    return fleet.command[fleet.command.index(name) + 1]


async def feed(bootstrap: str, contracts: ContractRegistry, topic: str) -> dict[str, str]:
    """Publish the work items, keyed by claim; returns each one's intent key."""
    intents = {f"claim-{n:05d}": f"intent-{uuid.uuid4().hex}" for n in range(WORK_ITEMS)}
    broker = KafkaBroker(
        bootstrap, middlewares=[HopchainMiddleware(Hopchain(contracts, component="intake"))]
    )
    await broker.start()
    try:
        for amount, (claim_id, intent) in enumerate(intents.items(), start=1):
            with origin(run_id="run-kill9", work_item_id=claim_id, intent_key=intent):
                await broker.publish(
                    Claim(claim_id=claim_id, amount_cents=amount), topic, key=claim_id.encode()
                )
    finally:
        await broker.stop()
    return intents


async def ledger_count(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        row = await (await db.execute(f"SELECT count(*) FROM {LEDGER_TABLE}")).fetchone()  # noqa: S608 - a constant table name
    return int(row[0]) if row else 0


async def lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of ``topic`` the group has not committed yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await admin.start()
    await consumer.start()
    try:
        partitions = await partitions_of(bootstrap, [topic])
        ends = await consumer.end_offsets(partitions)
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await consumer.stop()
        await admin.close()
    return sum(ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in partitions)


async def test_three_instances_killed_repeatedly_file_one_ledger_row_per_work_item(
    kafka_bootstrap: str, postgres_dsn: str, fleet: Fleet
) -> None:
    input_topic, output_topic = argument(fleet, "--input"), argument(fleet, "--output")
    group = argument(fleet, "--group")
    contracts = registry(input_topic, output_topic)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as db:
        await db.execute(LEDGER_DDL)
    intents = await feed(kafka_bootstrap, contracts, input_topic)
    started = time.monotonic()
    await asyncio.gather(*(fleet.start() for _ in range(INSTANCES)))

    kills = {"in_transaction": 0, "after_commit": 0}
    for number in range(KILLS):
        # Spread the kills over the run: the next one once the ledger has grown enough.
        async with asyncio.timeout(WAIT):
            threshold = (number + 1) * WORK_ITEMS // (KILLS + 2)
            while await ledger_count(postgres_dsn) < threshold:  # noqa: ASYNC110 - database state
                await asyncio.sleep(0.1)
        window = "in_transaction" if number % 2 == 0 else "after_commit"
        async with asyncio.timeout(WAIT):
            victim = await fleet.next_to_print(
                "writing " if window == "in_transaction" else "filed "
            )
        await fleet.kill(victim)
        kills[window] += 1
        await fleet.start()

    async with asyncio.timeout(WAIT):
        while await lag(kafka_bootstrap, group, input_topic) > 0:  # noqa: ASYNC110 - broker state
            await asyncio.sleep(0.5)
    settled = time.monotonic() - started
    assert await fleet.stop_all() == [0] * INSTANCES

    # Exactly one ledger row per work item, written under its stage key, and the key's entry
    # names that row.
    keys = {claim: stage_intent_key(intent, STAGE_NAME) for claim, intent in intents.items()}
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as db:
        ledger = await (
            await db.execute(f"SELECT claim_id, key, 'row-' || id FROM {LEDGER_TABLE}")  # noqa: S608 - a constant table name
        ).fetchall()
        entries: dict[str, str] = dict(
            await (await db.execute("SELECT key, identifier FROM hopchain_effects")).fetchall()
        )
    per_claim = Counter(claim for claim, _, _ in ledger)
    assert len(ledger) == WORK_ITEMS
    assert set(per_claim) == set(intents)
    assert max(per_claim.values()) == 1
    rows = {claim: row for claim, _, row in ledger}
    assert all(key == keys[claim] for claim, key, _ in ledger)
    assert entries == {keys[claim]: rows[claim] for claim in intents}

    # Every work item reached the output; a repeat names the same row as the first.
    codec = EnvelopeCodec(contracts)
    outputs = [
        codec.decode(r.topic, r.value, list(r.headers)).payload
        for r in await read_to_end(kafka_bootstrap, [output_topic])
    ]
    assert all(isinstance(p, Filed) for p in outputs)
    named = {(p.claim_id, p.ledger_row) for p in outputs if isinstance(p, Filed)}
    assert named == set(rows.items())

    written, filed, replayed = fleet.count("writing"), fleet.count("filed"), fleet.count("replayed")
    # Each "writing" line is one run of the effect: it either committed (one row) or rolled
    # back with its key when its instance was killed inside the transaction.
    rolled_back = written - len(ledger)
    assert 0 <= rolled_back <= kills["in_transaction"]
    assert WORK_ITEMS - rolled_back <= filed <= WORK_ITEMS
    assert kills == {"in_transaction": (KILLS + 1) // 2, "after_commit": KILLS // 2}
    assert replayed >= 1
    figures = {
        "instances": INSTANCES,
        "instances_started": len(fleet.started),
        "kills": kills,
        "work_items": WORK_ITEMS,
        "ledger_rows": len(ledger),
        "dedupe_entries": len(entries),
        "effects_rolled_back": rolled_back,
        "duplicates_suppressed": replayed,
        "outputs": len(outputs),
        "duplicate_outputs_same_row": len(outputs) - WORK_ITEMS,
        "seconds": round(settled, 1),
    }
    print(f"\n[kill -9 x {KILLS}] {figures}")  # noqa: T201 - figures for RELIABILITY.md (pytest -s)
