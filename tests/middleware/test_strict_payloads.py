"""Strict payloads through the plain aiokafka wrapper, on the real broker.

A producer whose model drifted writes ``"id": "1000"`` where the topic's contract declares an
integer. Pydantic's lax mode would convert it; hopchain reads payloads in strict JSON mode by
default, as the exported JSON Schema says. Report-only shows the strict-only refusal before
anyone enforces it, and ``lax_payloads=True`` is the explicit opt-out for one topic.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiokafka import AIOKafkaProducer
from middleware_helpers import (
    OWNER,
    Doc,
    envelope_consumer_client,
    raw_producer,
    record_count,
    registry,
    wait_until,
)
from pydantic import BaseModel

from hopchain import EnvelopeConsumer, EnvelopeProducer, Hopchain, HopchainConfig, TopicContract
from hopchain.exceptions import ReasonCode
from hopchain.middleware.context import HopContext
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka]


class DriftedDoc(BaseModel):
    """The producer's idea of the payload: its id became text."""

    id: str
    text: str


async def _send_both(bootstrap: str, topic: str) -> None:
    """One record as the drifted producer writes it, then one as the contract says."""
    async with raw_producer(bootstrap) as producer:
        drifted = Hopchain(
            registry(TopicContract(topic=topic, model=DriftedDoc, owner=OWNER)), component="old"
        )
        await EnvelopeProducer(producer, drifted).send(topic, DriftedDoc(id="1000", text="a"))
        current = Hopchain(
            registry(TopicContract(topic=topic, model=Doc, owner=OWNER)), component="new"
        )
        await EnvelopeProducer(producer, current).send(topic, Doc(id=1001, text="b"))


async def _read_two(bootstrap: str, contract: TopicContract) -> tuple[Hopchain, list[HopContext]]:
    runtime = Hopchain(registry(contract), component="reader", config=HopchainConfig())
    group = unique_topic_name("strict")
    read: list[HopContext] = []
    async with (
        envelope_consumer_client(bootstrap, contract.topic, group) as consumer,
        contextlib.AsyncExitStack() as stack,
    ):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        stack.push_async_callback(producer.stop)
        reader = EnvelopeConsumer(consumer, producer, runtime, group=group)

        async def loop() -> None:
            async for hop in reader:
                read.append(hop)
                await reader.commit(hop)

        task = asyncio.create_task(loop())
        try:
            await wait_until(lambda: len(read) >= 2 or task.done(), within=60, what="2 records")
            if task.done():
                task.result()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return runtime, read


def _would_reject(runtime: Hopchain, topic: str) -> dict[str, float]:
    return {
        sample.labels["reason"]: sample.value
        for metric in runtime.metrics.registry.collect()
        for sample in metric.samples
        if sample.name == "hopchain_would_reject_total" and sample.labels.get("topic") == topic
    }


async def test_a_value_only_lax_mode_accepts_is_reported_in_report_only_mode_and_not_parked(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    await _send_both(kafka_bootstrap, topic)

    runtime, read = await _read_two(
        kafka_bootstrap, TopicContract(topic=topic, model=Doc, owner=OWNER, report_only=True)
    )

    drifted, valid = read
    assert drifted.reported is not None
    assert (drifted.reported.code, drifted.reported.path) == (
        ReasonCode.PAYLOAD_INVALID,
        "$.payload.id",
    )
    assert getattr(drifted.payload, "id", None) == "1000"  # passed on as sent, unvalidated
    assert valid.reported is None
    assert valid.payload == Doc(id=1001, text="b")
    assert _would_reject(runtime, topic) == {"payload_invalid": 1.0}
    assert await record_count(kafka_bootstrap, f"{topic}.dlq") == 0

    # The explicit opt-out: the same record, converted by lax mode, is not refused at all.
    lax, read = await _read_two(
        kafka_bootstrap, TopicContract(topic=topic, model=Doc, owner=OWNER, lax_payloads=True)
    )
    assert [hop.reported for hop in read] == [None, None]
    assert [hop.payload for hop in read] == [Doc(id=1000, text="a"), Doc(id=1001, text="b")]
    assert _would_reject(lax, topic) == {}
    assert await record_count(kafka_bootstrap, f"{topic}.dlq") == 0
