"""Stop and start the broker while documents flow; clients recover by themselves, nothing is lost.

The claims pipeline runs as separate stage processes against a broker of the test's own.
While the example's feeder sends, the broker is stopped and started again on the same
data directory and ports (SIGTERM; under soak also SIGKILL, an unclean stop that the
broker recovers from its logs). Neither the feeder nor the stages are told: they must
ride out the outage themselves, and afterwards every document is accounted for.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

import pytest
from claims_run import (
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
from reliability_support import SOAK, own_kafka, scale, wait_until

from examples.claims.feeder import feed

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from hopchain.testing import LocalKafka

RECORDS = scale(2_000, 20_000)
RESTARTS = (False, True, False, True) if SOAK else (False,)
"""One entry per restart: whether it is a SIGKILL (unclean) rather than a SIGTERM."""
DRAIN_SECONDS = 600.0 if SOAK else 240.0


async def _restart_during(
    kafka: LocalKafka, sent: list[int], feeding: asyncio.Task[object]
) -> list[float]:
    """Restart the broker when the feed is 1/(n+1), 2/(n+1) ... of the way through."""
    outages: list[float] = []
    for number, hard in enumerate(RESTARTS, start=1):
        mark = RECORDS * number // (len(RESTARTS) + 1)
        await wait_until(
            lambda mark=mark: sent[0] >= mark or feeding.done(),  # type: ignore[misc]
            within=300,
            what=f"{mark} documents to be sent",
        )
        assert not feeding.done(), "the feed ended before the broker could be restarted"
        began = time.monotonic()
        await asyncio.to_thread(kafka.restart, kill=hard)
        outages.append(time.monotonic() - began)
    return outages


@pytest.mark.kafka
@pytest.mark.slow
async def test_a_broker_restart_mid_stream_is_ridden_out_and_loses_nothing(
    kafka_home: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    started = time.monotonic()
    async with own_kafka(kafka_home) as kafka:
        bootstrap = kafka.bootstrap
        await create_claims_topics(bootstrap)
        ledger_path = prepare_ledger(tmp_path)
        workers = StageWorkers(bootstrap, tmp_path)
        workers.start_all()
        sent = [0]

        def one_more() -> None:
            sent[0] += 1

        try:
            feeding = asyncio.create_task(
                feed(
                    bootstrap,
                    RECORDS,
                    run_id=f"restart-{uuid.uuid4().hex[:8]}",
                    seed=23,
                    on_sent=one_more,
                )
            )
            try:
                outages = await _restart_during(kafka, sent, feeding)
                fed = await feeding
            finally:
                feeding.cancel()
                # Waited for, so that its producer is closed before the test goes on.
                await asyncio.gather(feeding, return_exceptions=True)
            feed_seconds = time.monotonic() - started
            async with Tally(bootstrap) as tally:
                drain_seconds = await drain(tally, fed, workers, within=DRAIN_SECONDS)
        finally:
            codes = await workers.stop_all()
        account = await final_account(bootstrap)
        restarts = kafka.restarts
    ledger = read_ledger(ledger_path)

    report(
        accounting_table(
            f"broker restart mid-stream: {fed.sent} documents",
            fed,
            account,
            ledger,
            [
                (
                    "broker restarts (SIGTERM/SIGKILL)",
                    f"{RESTARTS.count(False)}/{RESTARTS.count(True)}",
                ),
                ("outage per restart, seconds", " ".join(f"{s:.1f}" for s in outages)),
                ("stage processes restarted", 0),
                ("seconds: feed / drain", f"{feed_seconds:.0f} / {drain_seconds:.0f}"),
            ],
        )
    )
    assert restarts == len(RESTARTS)
    assert fed.sent == RECORDS
    assert account.lost(fed) == []
    assert account.misplaced(fed) == []
    assert {item: len(ids) for item, ids in account.delivered.items() if len(ids) != 1} == {}
    assert ledger.rows == ledger.distinct_docs == len(account.delivered)
    # The stages were never restarted: each rode out the outage in its first process.
    assert dict(workers.generation) == dict.fromkeys(STAGES, 1)
    assert codes == dict.fromkeys(STAGES, 0)
