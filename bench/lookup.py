"""How long ``hopchain trace`` takes to find one work item among many dead letters.

Fills one single-partition topic with dead letters as the middleware parks them in headers
mode (the original 1 KiB payload and headers, a two-hop envelope, plus the ``hopchain-dlq-*``
headers with a three-hop envelope and the failure), then times :func:`find_record` for the
envelope id of a record near the end, several times.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from bench.workload import make_item
from hopchain.lookup import find_record
from hopchain.schemas import (
    ENVELOPE_HEADER,
    TRACEPARENT_HEADER,
    Attempt,
    AttemptKind,
    AttemptOutcome,
    Decision,
    ErrorType,
    Failure,
    Position,
    append_hop,
    new_envelope,
    new_envelope_id,
)
from hopchain.schemas.deadletter import DeadLetterInfo, dead_letter_headers
from hopchain.schemas.ids import new_span_id
from hopchain.testing import create_topics, delete_topics, unique_topic_name

SOURCE_TOPIC = "orders.enriched"
PRODUCE_WINDOW = 2000


@dataclass
class LookupResult:
    """Times of the repeated look-ups, and what they found."""

    records: int
    target_offset: int
    record_bytes: int
    fill_seconds: float
    seconds: list[float] = field(default_factory=list)
    records_scanned: int = 0
    sightings: int = 0
    chain_ok: bool = False

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else 0.0


def dead_letter(seq: int) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """One parked record: (envelope id, value, headers), as the middleware writes it."""
    now = datetime.now(UTC)
    envelope = new_envelope(
        contract=SOURCE_TOPIC, contract_version=1, run_id="bench", work_item_id=f"item-{seq}"
    )
    origin_span = new_span_id()
    envelope = append_hop(
        envelope,
        component="checkout",
        instance="checkout-1",
        decision=Decision.ORIGINATED,
        span_id=origin_span,
        destination="orders",
    )
    envelope = append_hop(
        envelope,
        component="enrich",
        instance="enrich-1",
        decision=Decision.FORWARDED,
        span_id=new_span_id(),
        received_from=Position(topic="orders", partition=0, offset=seq),
        received_at=now,
        destination=SOURCE_TOPIC,
    )
    failure = Failure(
        component="price",
        error_type=ErrorType.TRANSIENT,
        description="pricing service answered 503 three times",
        locally_resolvable=False,
        attempts=tuple(
            Attempt(
                duration_ms=120,
                error_type=ErrorType.TRANSIENT,
                kind=AttemptKind.TRANSPORT,
                number=number,
                outcome=AttemptOutcome.FAILED,
                started_at=now,
            )
            for number in (1, 2, 3)
        ),
    )
    parked = append_hop(
        envelope,
        component="price",
        instance="price-1",
        decision=Decision.DEAD_LETTERED,
        span_id=new_span_id(),
        received_from=Position(topic=SOURCE_TOPIC, partition=0, offset=seq),
        received_at=now,
        destination=SOURCE_TOPIC + ".dlq",
        failure=failure,
    )
    info = DeadLetterInfo(
        dead_letter_id=new_envelope_id(),
        reason=None,
        path=None,
        error_type=failure.error_type,
        owner="pricing-team",
        component="price",
        group="price",
        source_topic=SOURCE_TOPIC,
        source_partition=0,
        source_offset=seq,
        source_timestamp_ms=int(now.timestamp() * 1000),
        parked_at=now,
        failure=failure,
        envelope=parked,
    )
    item = make_item(seq)
    last = envelope.chain[-1]
    original = [
        (TRACEPARENT_HEADER, f"00-{envelope.trace_id}-{last.span_id}-01".encode()),
        (ENVELOPE_HEADER, envelope.model_dump_json().encode()),
        ("content-type", b"application/json"),
    ]
    headers = original + dead_letter_headers(info)
    return envelope.id, item.__pydantic_serializer__.to_json(item), headers


async def fill(bootstrap: str, topic: str, count: int, target: int) -> tuple[str, int]:
    """Write ``count`` dead letters; return the envelope id at ``target`` and a record's size."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    needle, size = "", 0
    try:
        pending = []
        for seq in range(count):
            envelope_id, value, headers = dead_letter(seq)
            if seq == target:
                needle = envelope_id
                size = len(value) + sum(len(name) + len(raw) for name, raw in headers)
            pending.append(await producer.send(topic, value, headers=headers))
            if len(pending) >= PRODUCE_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return needle, size


async def run_lookup(bootstrap: str, records: int, repeats: int) -> LookupResult:
    """Fill a topic, then time ``repeats`` look-ups of the record 10 from the end."""
    topic = unique_topic_name("bench-lookup-orders.enriched.dlq")
    await create_topics(bootstrap, topic)
    target = max(0, records - 10)
    try:
        started = time.perf_counter()
        needle, size = await fill(bootstrap, topic, records, target)
        result = LookupResult(
            records=records,
            target_offset=target,
            record_bytes=size,
            fill_seconds=time.perf_counter() - started,
        )
        for _ in range(repeats):
            found = await find_record(bootstrap, needle, [topic])
            result.seconds.append(found.seconds)
            result.records_scanned = found.records_scanned
            result.sightings = len(found.sightings)
            result.chain_ok = all(
                s.integrity is not None and s.integrity.ok for s in found.sightings
            )
    finally:
        await delete_topics(bootstrap, topic)
    return result
