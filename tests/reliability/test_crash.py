"""kill -9 the claims pipeline's stage workers while records flow; nothing may be lost.

The three stages run as separate processes on a broker of the test's own. Every ~2 s one
of them (in turn) is killed with SIGKILL and started again, while the example's feeder
sends documents with every fault scenario. Afterwards every document is delivered,
dead-lettered or rejected, as its scenario says; a repeat is recognisable by its work item
and envelope id; and the side-effecting ``file`` stage left exactly one ledger entry per
work item, however often it was interrupted.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Self

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from claims_run import (
    PAYLOAD_FRAGMENTS,
    STAGES,
    StageWorkers,
    Tally,
    accounting_table,
    create_claims_topics,
    drain,
    final_account,
    prepare_ledger,
    read_ledger,
)
from reliability_support import SOAK, own_kafka, scale

from examples.claims.feeder import FeedReport, feed
from examples.claims.pipeline import CLASSIFIED, DOCUMENTS, EXTRACTED
from hopchain.testing import partitions_of

if TYPE_CHECKING:
    from collections.abc import Callable

RECORDS = scale(3_000, 20_000)
KILL_EVERY_SECONDS = 2.0
MIN_KILLS = 45 if SOAK else 9
MIN_KILLS_EACH = 12 if SOAK else 2
MIN_FORCED_REPEATS = 5 if SOAK else 1
DRAIN_SECONDS = 600.0 if SOAK else 300.0
OUTPUTS = {
    "extract": (EXTRACTED, f"{DOCUMENTS}.dlq"),
    "classify": (CLASSIFIED, f"{EXTRACTED}.dlq"),
}


class _Outputs:
    """Notices, within milliseconds, a stage's next output: a record on its output topics,
    or for ``file`` an attempted ledger write (its side effect, before it publishes)."""

    def __init__(self, bootstrap: str, ledger: Path) -> None:
        self._bootstrap = bootstrap
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self._partitions: dict[str, list[TopicPartition]] = {}
        self._db = sqlite3.connect(ledger)

    async def __aenter__(self) -> Self:
        await self._consumer.start()
        for stage, topics in OUTPUTS.items():
            self._partitions[stage] = await partitions_of(self._bootstrap, topics)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()
        self._db.close()

    def _ledger_writes(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM write_attempts").fetchone()[0])

    def last_ledger_write(self) -> str:
        """The work item (doc id) of the latest attempted ledger write."""
        row = self._db.execute(
            "SELECT e.doc_id FROM write_attempts w JOIN entries e USING (idempotency_key) "
            "ORDER BY w.n DESC LIMIT 1"
        ).fetchone()
        return str(row[0])

    async def _count(self, stage: str) -> int:
        if stage == "file":
            return self._ledger_writes()
        ends = await self._consumer.end_offsets(self._partitions[stage])
        return int(sum(ends.values()))

    async def next_of(self, stage: str, within: float) -> bool:
        """Wait for the stage's next output; False if it produced none in time (idle)."""
        seen = await self._count(stage)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            await asyncio.sleep(0.001)
            if await self._count(stage) > seen:
                return True
        return False


@dataclass
class _Chaos:
    kills: int = 0
    forced_repeats: set[str] = field(default_factory=set)
    """Work items whose filing was killed after the ledger write, before its output."""


async def _chaos(
    workers: StageWorkers,
    feeding: asyncio.Task[FeedReport],
    tally: Tally,
    outputs: _Outputs,
    rng: random.Random,
) -> _Chaos:
    """About every 2 s, kill -9 the next stage in turn at the moment it produced an output.

    ``extract`` and ``classify`` are killed right after a record appears on their output
    topics (around their offset commit). ``file`` is frozen (SIGSTOP) right after it wrote
    to the ledger; if its output for that claim is not on the topic yet, the kill lands
    after the side effect and before the commit, so the filing must run again and the
    idempotency key must absorb it. A stage that produces nothing within the interval
    (idle, or still joining its group) is passed over. It goes on until the feed ended and
    enough kills happened, or nothing is left to do.
    """
    done = _Chaos()
    rotation = itertools.cycle(STAGES)
    while True:
        await asyncio.sleep(KILL_EVERY_SECONDS * rng.uniform(0.25, 0.75))
        await tally.update()
        enough = (
            done.kills >= MIN_KILLS
            and min(workers.kills[s] for s in STAGES) >= MIN_KILLS_EACH
            and len(done.forced_repeats) >= MIN_FORCED_REPEATS
        )
        if feeding.done() and (enough or tally.account.accounted(feeding.result()) >= RECORDS):
            return done
        if exited := workers.exited():
            raise AssertionError(f"a stage exited by itself: {exited}\n{workers.log_tails()}")
        stage = next(rotation)
        if not await outputs.next_of(stage, within=KILL_EVERY_SECONDS):
            continue
        if stage == "file":
            workers.pause(stage)
            item = outputs.last_ledger_write()
            await tally.catch_up()
            if item not in tally.account.delivered:
                done.forced_repeats.add(item)
        await workers.kill(stage)
        workers.start(stage)
        done.kills += 1


@pytest.mark.kafka
@pytest.mark.slow
async def test_kill_9_of_stage_workers_loses_nothing_and_files_each_claim_once(
    kafka_home: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    started = time.monotonic()
    async with own_kafka(kafka_home) as kafka:
        bootstrap = kafka.bootstrap
        await create_claims_topics(bootstrap)
        ledger_path = prepare_ledger(tmp_path)
        workers = StageWorkers(bootstrap, tmp_path)
        workers.start_all()
        try:
            async with Tally(bootstrap) as tally:
                feeding = asyncio.create_task(
                    feed(bootstrap, RECORDS, run_id=f"crash-{uuid.uuid4().hex[:8]}", seed=11)
                )
                try:
                    async with _Outputs(bootstrap, ledger_path) as outputs:
                        chaos = await _chaos(workers, feeding, tally, outputs, random.Random(11))
                    sent = await feeding
                finally:
                    feeding.cancel()
                    # Waited for, so that its producer is closed before the test goes on.
                    await asyncio.gather(feeding, return_exceptions=True)
                feed_seconds = time.monotonic() - started
                drain_seconds = await drain(tally, sent, workers, within=DRAIN_SECONDS)
        finally:
            codes = await workers.stop_all()
        account = await final_account(bootstrap)
    ledger = read_ledger(ledger_path)
    leaked = workers.lines_containing(PAYLOAD_FRAGMENTS)

    report(
        accounting_table(
            f"crash: kill -9 of stage workers, {sent.sent} documents",
            sent,
            account,
            ledger,
            [
                ("kill -9 in all", chaos.kills),
                ("  extract / classify / file", "/".join(str(workers.kills[s]) for s in STAGES)),
                ("  file: after the write, before output", len(chaos.forced_repeats)),
                ("seconds: feed+chaos / drain", f"{feed_seconds:.0f} / {drain_seconds:.0f}"),
            ],
            forced=chaos.forced_repeats,
        )
    )
    assert account.lost(sent) == []
    assert account.misplaced(sent) == []
    assert chaos.kills >= MIN_KILLS
    assert all(workers.kills[stage] >= MIN_KILLS_EACH for stage in STAGES), workers.kills
    assert sum(workers.kills.values()) == chaos.kills
    assert len(chaos.forced_repeats) >= MIN_FORCED_REPEATS
    # A repeat is the same work item with the same envelope id: identifiable downstream.
    assert {item: len(ids) for item, ids in account.delivered.items() if len(ids) != 1} == {}
    # The side effect happened once per work item, whatever was repeated around it.
    assert ledger.rows == ledger.distinct_docs == len(account.delivered)
    assert set(ledger.entries) == set(account.delivered)
    named = dict(account.ledger_entries_named)
    assert {item: {ledger.entries[item]} for item in named} == named
    assert ledger.write_attempts >= ledger.rows
    # Every filing killed after its ledger write ran again, and still left one entry.
    assert chaos.forced_repeats <= set(ledger.entries)
    assert codes == dict.fromkeys(STAGES, 0)
    assert leaked == []
