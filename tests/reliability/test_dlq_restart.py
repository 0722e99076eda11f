"""The dead-letter service, ``kill -9``-ed and started again, reports exactly what it did before.

``hopchain dlq serve`` runs as a process of its own over two owners' dead-letter topics.
Its state lives in Kafka (the dead-letter topics and a compacted resolutions topic) and, as
a cache, in its index file, so after a SIGKILL and a restart its metrics, once it reports
ready, must be the same;
and killed again and again while dead letters keep arriving, it must end up with every
dead letter exactly once. Its mutating endpoints refuse requests without the token.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from aiokafka import AIOKafkaProducer
from dlq_service import DlqService
from pydantic import BaseModel
from reliability_support import SOAK, scale, table

from hopchain import Hopchain
from hopchain.exceptions import DecodeError, ReasonCode
from hopchain.middleware.producer import ProducerWriter
from hopchain.schemas import ConsumedRecord, ContractRegistry, TopicContract
from hopchain.testing import unique_topic_name

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FIRST = scale(400, 4_000)
SECOND = scale(600, 16_000)
KILLS_WHILE_ARRIVING = 6 if SOAK else 2
DISCARDED = 5
STABLE = (
    "hopchain_dlq_depth",
    "hopchain_dlq_parked",
    "hopchain_dlq_resolved",
    "hopchain_dlq_ready",
    "hopchain_dlq_retention_unsafe",
)
REASONS = (ReasonCode.BAD_JSON, ReasonCode.MISSING_HEADER, ReasonCode.BAD_DIGEST)


class Order(BaseModel):
    number: int


async def _park(
    runtime: Hopchain, bootstrap: str, sources: list[str], count: int, start: int
) -> list[str]:
    """Park ``count`` records the way the middleware does; return their dead-letter ids."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    ids = []
    try:
        for number in range(start, start + count):
            source = sources[number % len(sources)]
            record = ConsumedRecord(
                topic=source,
                partition=0,
                offset=number,
                timestamp_ms=int(time.time() * 1000),
                key=b"order-%d" % number,
                value=b'{"number": "not a number"}',
                headers=(),
            )
            reason = REASONS[number % len(REASONS)]
            error = DecodeError(
                reason, "refused in the test", "$", topic=source, partition=0, offset=number
            )
            info = await runtime.reject(
                record, error, group="orders-reader", writer=ProducerWriter(producer)
            )
            ids.append(info.dead_letter_id)
    finally:
        await producer.stop()
    return ids


def _discard(service: DlqService, ids: list[str]) -> list[int]:
    """Try a discard without the token and with a wrong one (refused, nothing changes),
    then discard ``ids`` with it; return the statuses of the refused attempts."""
    body = {"who": "mallory", "reason": "clearing the queue"}
    target = f"/dead-letters/{ids[0]}/discard"
    refused = [
        service.call("POST", target, body)[0],
        service.call("POST", target, body, token="not-" + service.token)[0],
    ]
    shown = service.call("GET", f"/dead-letters/{ids[0]}", token=service.token)[1]
    assert shown["resolution"] is None
    for dead_letter_id in ids:
        status, _ = service.call(
            "POST",
            f"/dead-letters/{dead_letter_id}/discard",
            {"who": "alice", "reason": "duplicates of filed orders"},
            token=service.token,
        )
        assert status == 200
    return refused


async def _kill_while(service: DlqService, arriving: asyncio.Task[list[str]]) -> list[str]:
    """kill -9 the service every second, and start it again, while dead letters arrive."""
    try:
        for _ in range(KILLS_WHILE_ARRIVING):
            await asyncio.sleep(1.0)
            await service.kill()
            service.start()
        return await arriving
    finally:
        arriving.cancel()


def _same(before: dict[str, Any], after: dict[str, Any]) -> str:
    return "yes" if all(before.get(name) == after.get(name) for name in STABLE) else "NO"


@pytest.mark.kafka
@pytest.mark.slow
async def test_the_dead_letter_service_killed_with_sigkill_restarts_with_identical_metrics(
    kafka_bootstrap: str, tmp_path: Path, report: Callable[[str], None]
) -> None:
    owners = {unique_topic_name("orders-a"): "team-a", unique_topic_name("orders-b"): "team-b"}
    sources = list(owners)
    registry = ContractRegistry(
        [TopicContract(topic=topic, model=Order, owner=owner) for topic, owner in owners.items()]
    )
    runtime = Hopchain(registry, component="orders-reader")
    service = DlqService(
        kafka_bootstrap,
        {f"{topic}.dlq": owner for topic, owner in owners.items()},
        unique_topic_name("resolutions"),
        tmp_path / "dlq-service.log",
    )
    service.start()
    try:
        await service.ready_with(0, within=90)
        first = await _park(runtime, kafka_bootstrap, sources, FIRST, 0)
        await service.ready_with(FIRST, within=120)

        refused = _discard(service, first[:DISCARDED])
        before = service.metrics()
        before_ids = service.listed_ids()

        await service.kill()
        killed_at = time.monotonic()
        service.start()
        ready_seconds = await service.ready_with(FIRST, within=120)
        after = service.metrics()
        after_ids = service.listed_ids()
        elapsed = time.monotonic() - killed_at

        # Killed again and again while more dead letters arrive.
        arriving = asyncio.create_task(_park(runtime, kafka_bootstrap, sources, SECOND, FIRST))
        second = await _kill_while(service, arriving)
        await service.ready_with(FIRST + SECOND, within=180 if SOAK else 120)
        final = service.metrics()
        final_ids = service.listed_ids()
        unresolved = service.listed("all=0")
    finally:
        await service.stop()

    report(
        table(
            "dead-letter service: kill -9 and restart",
            [
                ("dead letters before the first kill", FIRST),
                ("discarded with the token", DISCARDED),
                ("POSTs without / with a wrong token", " / ".join(map(str, refused))),
                ("ready again after kill -9, seconds", f"{ready_seconds:.1f}"),
                ("stable metrics identical after restart", _same(before, after)),
                ("dead letters arriving during kills", SECOND),
                ("kill -9 in all", service.kills),
                ("indexed at the end (expected)", f"{len(final_ids)} ({FIRST + SECOND})"),
                ("lost", len(set(first + second) - set(final_ids))),
                ("counted twice", len(final_ids) - len(set(final_ids))),
            ],
        )
    )
    assert refused == [401, 401]
    for name in STABLE:
        assert after.get(name) == before.get(name), name
    assert sorted(after_ids) == sorted(before_ids)
    ages_before = before["hopchain_dlq_oldest_age_seconds"]
    ages_after = after["hopchain_dlq_oldest_age_seconds"]
    assert ages_after.keys() == ages_before.keys()
    for labels, age in ages_after.items():
        assert ages_before[labels] <= age <= ages_before[labels] + elapsed + 1
    # Every dead letter exactly once; the discarded ones stay resolved across every restart.
    assert len(final_ids) == len(set(final_ids)) == FIRST + SECOND
    assert set(final_ids) == set(first + second)
    assert {letter["id"] for letter in unresolved} == set(first[DISCARDED:] + second)
    depth = Counter[str]()
    for labels, value in final["hopchain_dlq_depth"].items():
        depth[dict(labels)["owner"]] += int(value)
    produced = Counter(owners[sources[n % 2]] for n in range(FIRST + SECOND))
    discarded = Counter(owners[sources[n % 2]] for n in range(DISCARDED))
    assert dict(depth) == dict(produced - discarded)
    assert sum(final["hopchain_dlq_parked"].values()) == FIRST + SECOND
    assert sum(final["hopchain_dlq_resolved"].values()) == DISCARDED
