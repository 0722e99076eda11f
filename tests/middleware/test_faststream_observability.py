"""What FastStream's own Prometheus middleware sees of the records hopchain refuses.

On the real broker, with FastStream's ``KafkaPrometheusMiddleware`` before and after
hopchain's: the valid records are counted by both; a refused record is counted by hopchain
only (it is refused before FastStream parses it, so no consume scope runs for it).
"""

from __future__ import annotations

from typing import Any

import pytest
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.prometheus import KafkaPrometheusMiddleware
from middleware_helpers import Doc, contract, doc, raw_producer, registry, wait_until
from prometheus_client import CollectorRegistry

from hopchain import EnvelopeProducer, Hopchain, HopchainMiddleware
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = pytest.mark.kafka


def _total(metrics: CollectorRegistry, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for metric in metrics.collect()
        for sample in metric.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@pytest.mark.parametrize(
    "prometheus_first", [True, False], ids=["prometheus-first", "hopchain-first"]
)
async def test_faststreams_prometheus_middleware_counts_handled_records_not_refused_ones(
    kafka_bootstrap: str, new_topic: TopicFactory, prometheus_first: bool
) -> None:
    topic = await new_topic()
    await create_topics(kafka_bootstrap, f"{topic}.dlq")
    metrics = CollectorRegistry()
    runtime = Hopchain(registry(contract(topic)), component="counted", metrics_registry=metrics)
    hop = HopchainMiddleware(runtime, group="counted")
    prometheus = KafkaPrometheusMiddleware(registry=metrics)
    order: list[Any] = [prometheus, hop] if prometheus_first else [hop, prometheus]
    broker = KafkaBroker(kafka_bootstrap, middlewares=order, ack_policy=AckPolicy.ACK)
    handled: list[int] = []

    @broker.subscriber(topic, group_id=unique_topic_name("counted"), auto_offset_reset="earliest")
    async def handle(item: Doc) -> None:
        handled.append(item.id)

    hop.check(broker)
    feeder = Hopchain(registry(contract(topic)), component="feeder")
    async with raw_producer(kafka_bootstrap) as producer:
        sender = EnvelopeProducer(producer, feeder)
        await sender.send(topic, doc(1))
        await producer.send_and_wait(topic, b'{"id": 2, "text": "bare"}')  # bare: refused, parked
        await sender.send(topic, doc(3))
    await broker.start()
    try:
        await wait_until(
            lambda: (
                len(handled) == 2 and _total(metrics, "hopchain_rejected_total", topic=topic) == 1
            ),
            within=60,
            what="two handled, one refused",
        )
    finally:
        await broker.stop()
        await hop.close()
    assert sorted(handled) == [1, 3]
    assert _total(metrics, "hopchain_dead_lettered_total", topic=topic) == 1
    # FastStream's own counters saw the two handled records only, in either order.
    assert _total(metrics, "faststream_received_messages_total", handler=topic) == 2
    assert (
        _total(
            metrics, "faststream_received_processed_messages_total", handler=topic, status="acked"
        )
        == 2
    )
