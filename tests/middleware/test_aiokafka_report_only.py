"""Report-only through the plain aiokafka wrapper, on the real broker.

The same 1,000 mixed records are read once enforcing and once report-only: what
report-only says it would park equals what enforcing parked, reason by reason, every
record reaches the caller, and nothing is parked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from middleware_helpers import (
    OVERSIZE_LIMIT,
    MalformedFactory,
    committed_offsets,
    contract,
    mixed_plan,
    raw_producer,
    record_count,
    registry,
    send_mixed,
    wait_until,
)

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain, HopchainConfig, Limits
from hopchain.schemas import Decision
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOTAL = 1000
PER_KIND = 20


def _by_reason(runtime: Hopchain, name: str, topic: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for metric in runtime.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name != name or sample.labels.get("topic") != topic:
                continue
            if sample.labels.get("direction", "consume") == "consume":
                found[sample.labels["reason"]] = sample.value
    return found


def _decided(runtime: Hopchain, topic: str) -> float:
    names = {"hopchain_consumed_total", "hopchain_rejected_total"}
    return sum(
        sample.value
        for metric in runtime.metrics.registry.collect()
        for sample in metric.samples
        if sample.name in names and sample.labels.get("topic") == topic
    )


async def _read_all(
    bootstrap: str, topic: str, *, report_only: bool
) -> tuple[Hopchain, Counter[str], str]:
    """Read ``topic`` to its end through the wrapper; what the caller was handed, by kind."""
    runtime = Hopchain(
        registry(contract(topic)),
        component="rollout",
        config=HopchainConfig(report_only=report_only),
        limits=Limits(max_record_bytes=OVERSIZE_LIMIT),
    )
    group = unique_topic_name("rollout")
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await consumer.start()
    await producer.start()
    handed: Counter[str] = Counter()

    reader = EnvelopeConsumer(consumer, producer, runtime, group=group)

    async def loop_reader() -> None:
        async for hop in reader:
            if hop.reported is None:
                handed["valid"] += 1
            else:
                handed[hop.reported.code.value] += 1
                [origin] = hop.envelope.chain
                assert origin.decision is Decision.ORIGINATED
                assert "would be parked" in origin.observation
            await reader.commit(hop)

    task = asyncio.create_task(loop_reader())
    try:
        await wait_until(
            lambda: task.done() or _decided(runtime, topic) >= TOTAL,
            within=180,
            what="every record decided",
        )
        if task.done():
            task.result()  # a failed assertion in the loop
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()
        await producer.stop()
    return runtime, handed, group


async def test_report_only_through_the_aiokafka_wrapper_counts_what_enforcing_parks(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    plan = mixed_plan(TOTAL, PER_KIND, seed=41)
    strict_topic, report_topic = await new_topic(), await new_topic()
    await create_topics(kafka_bootstrap, f"{strict_topic}.dlq", f"{report_topic}.dlq")
    feeder = Hopchain(registry(contract(strict_topic), contract(report_topic)), component="f")
    async with raw_producer(kafka_bootstrap) as producer:
        for topic in (strict_topic, report_topic):
            await send_mixed(
                producer, EnvelopeProducer(producer, feeder), MalformedFactory(feeder, topic), plan
            )

    strict, strict_handed, _ = await _read_all(kafka_bootstrap, strict_topic, report_only=False)
    report, report_handed, group = await _read_all(kafka_bootstrap, report_topic, report_only=True)

    malformed = TOTAL - plan.count("valid")
    parked = _by_reason(strict, "hopchain_rejected_total", strict_topic)
    would = _by_reason(report, "hopchain_would_reject_total", report_topic)
    assert sum(parked.values()) == malformed
    assert would == parked
    # Enforcing handed the caller the valid records only; report-only handed every record,
    # each refused one marked with the reason it would have been parked for.
    assert strict_handed == Counter(valid=plan.count("valid"))
    assert report_handed == Counter(
        valid=plan.count("valid"), **{k: int(v) for k, v in would.items()}
    )
    assert await record_count(kafka_bootstrap, f"{strict_topic}.dlq") == malformed
    assert await record_count(kafka_bootstrap, f"{report_topic}.dlq") == 0
    assert sum((await committed_offsets(kafka_bootstrap, group)).values()) == TOTAL
