"""W3C trace context across the hopchain boundary, both ways, on a real broker."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from faststream.kafka import KafkaBroker
from opentelemetry import propagate, trace
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware, origin
from hopchain.schemas import ENVELOPE_HEADER, ContractRegistry, TopicContract
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import TopicFactory, capture_spans, parent_span_id, spans_by_id
from hopchain.tracing import KafkaHeadersGetter

pytestmark = pytest.mark.kafka


class Ping(BaseModel):
    n: int


async def _first(bootstrap: str, topic: str) -> Any:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        return await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()


async def test_a_trace_started_elsewhere_continues_through_hopchain_and_out_again(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    spans = capture_spans()
    topic = await new_topic()
    registry = ContractRegistry([TopicContract(topic=topic, model=Ping, owner="team")])
    broker = KafkaBroker(
        kafka_bootstrap, middlewares=[HopchainMiddleware(Hopchain(registry, component="api"))]
    )
    await broker.start()
    tracer = trace.get_tracer("a-service-without-hopchain")
    try:
        # A service that knows nothing of hopchain has a trace going (an HTTP request, say).
        with (
            tracer.start_as_current_span("POST /pings") as request_span,
            origin(run_id="r", work_item_id="ping-1"),
        ):
            await broker.publish(Ping(n=1), topic)
    finally:
        await broker.stop()
    request = request_span.get_span_context()
    record = await _first(kafka_bootstrap, topic)
    envelope = load_envelope(dict(record.headers)[ENVELOPE_HEADER])

    # In: the envelope's trace is the caller's, and the origin hop is a child of its span.
    assert envelope.trace_id == trace.format_trace_id(request.trace_id)
    origin_span = spans_by_id(spans)[envelope.chain[0].span_id]
    assert parent_span_id(origin_span) == trace.format_span_id(request.span_id)

    # Out: a consumer that knows nothing of hopchain continues the same trace from the
    # headers with the standard propagator.
    context = propagate.extract(list(record.headers), getter=KafkaHeadersGetter())
    with tracer.start_as_current_span("legacy consumer", context=context) as legacy:
        legacy_context = legacy.get_span_context()
    assert trace.format_trace_id(legacy_context.trace_id) == envelope.trace_id
    legacy_span = spans_by_id(spans)[trace.format_span_id(legacy_context.span_id)]
    assert parent_span_id(legacy_span) == envelope.chain[-1].span_id


@pytest.mark.parametrize(
    "telemetry_first", [True, False], ids=["telemetry-first", "hopchain-first"]
)
async def test_faststreams_telemetry_middleware_in_either_order_keeps_one_trace(
    kafka_bootstrap: str, new_topic: TopicFactory, telemetry_first: bool
) -> None:
    from faststream import AckPolicy  # noqa: PLC0415
    from faststream.kafka.opentelemetry import KafkaTelemetryMiddleware  # noqa: PLC0415

    spans = capture_spans()
    first, second = await new_topic(prefix="pings"), await new_topic(prefix="pongs")
    registry = ContractRegistry(
        [
            TopicContract(topic=first, model=Ping, owner="team"),
            TopicContract(topic=second, model=Ping, owner="team"),
        ]
    )

    def broker(component: str) -> KafkaBroker:
        hop = HopchainMiddleware(Hopchain(registry, component=component), group=component)
        telemetry = KafkaTelemetryMiddleware(tracer_provider=trace.get_tracer_provider())
        order: list[Any] = [telemetry, hop] if telemetry_first else [hop, telemetry]
        built = KafkaBroker(kafka_bootstrap, middlewares=order, ack_policy=AckPolicy.ACK)
        brokers[built] = hop
        return built

    brokers: dict[KafkaBroker, HopchainMiddleware] = {}

    feeder, relay, sink = broker("feeder"), broker("relay"), broker("sink")
    chains: list[list[str]] = []

    @relay.subscriber(first, group_id="relay", auto_offset_reset="earliest")
    @relay.publisher(second)
    async def forward(ping: Ping) -> Ping:
        return Ping(n=ping.n + 1)

    @sink.subscriber(second, group_id="sink", auto_offset_reset="earliest")
    async def land(ping: Ping) -> None:
        from hopchain import current_hop  # noqa: PLC0415

        hop = current_hop()
        assert hop is not None
        chains.append([h.span_id for h in hop.envelope.chain] + [hop.span_id])

    for one in (feeder, relay, sink):
        brokers[one].check(one)
        await one.start()
    try:
        with origin(run_id="r", work_item_id="ping-1"):
            await feeder.publish(Ping(n=1), first)
        for _ in range(300):  # up to 30 s
            if chains:
                break
            await asyncio.sleep(0.1)
    finally:
        for one in (feeder, relay, sink):
            await one.stop()
    assert chains, "the record never reached the sink: parked on the way?"
    [hops] = chains
    # Exactly one traceparent on each record hopchain wrote, naming its last hop's span.
    for topic, last in ((first, hops[0]), (second, hops[1])):
        record = await _first(kafka_bootstrap, topic)
        parents = [raw for name, raw in record.headers if name == "traceparent"]
        assert len(parents) == 1
        assert parents[0].decode().split("-")[2] == last
    by_id = spans_by_id(spans)
    # One trace: every hop's span is the previous hop's child, origin to sink.
    assert {trace.format_trace_id(by_id[h].context.trace_id) for h in hops} == {
        trace.format_trace_id(by_id[hops[0]].context.trace_id)
    }
    for parent, child in itertools.pairwise(hops):
        assert parent_span_id(by_id[child]) == parent
    # The relay's forward has a PRODUCER span under its hop's span, labelled as the
    # OpenTelemetry messaging conventions label a send (partition once acknowledged).
    [send] = [
        span
        for span in by_id.values()
        if span.name == f"send {second}" and parent_span_id(span) == hops[1]
    ]
    assert send.kind is trace.SpanKind.PRODUCER
    attributes = dict(send.attributes or {})
    assert attributes["messaging.system"] == "kafka"
    assert attributes["messaging.destination.name"] == second
    assert attributes["messaging.destination.partition.id"] == "0"
    assert attributes["server.address"] == kafka_bootstrap
    assert str(attributes["messaging.client.id"]).strip()
