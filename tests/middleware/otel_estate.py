"""The processes of ``test_otel_processes.py``, each run under ``opentelemetry-instrument``.

``estate`` is the part of the estate that has not adopted hopchain: a plain aiokafka producer
writes bare orders to the first topic, inside one request span, then a plain aiokafka
consumer reads what reaches the last topic. ``service`` is a FastStream service wrapped with
hopchain that reads one topic and forwards to the next (the first one adopts bare records).
Both export their spans over OTLP (``hopchain.telemetry.configure_tracing`` reads the
standard ``OTEL_*`` variables) and write what they saw as JSON to ``--out``.

    python otel_estate.py estate --bootstrap B --first T1 --last T3 --expect 2 --out F
    python otel_estate.py service --bootstrap B --input T1 --output T2 --adopt --out F

A service stops cleanly when its standard input is closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from opentelemetry import trace
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware, current_hop
from hopchain.schemas import ContractRegistry, TopicContract
from hopchain.telemetry import configure_tracing

BARE_ORDERS = (
    b'{"order_id":"o-1","amount_cents":1200}',
    b'{"order_id":"o-3"}',
    b"not json at all",
    b'{"order_id":"o-2","amount_cents":5}',
    b'{"order_id":"o-5","amount_cents":"abc"}',
)
"""What a producer that knows nothing of hopchain sends: two valid orders, three not."""


class Order(BaseModel):
    order_id: str
    amount_cents: int


async def estate(args: argparse.Namespace) -> dict[str, Any]:
    """Send the bare orders in one request's trace; read what reaches the last topic."""
    tracer = trace.get_tracer("estate")
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, client_id="legacy-orders")
    await producer.start()
    sent = []
    try:
        with tracer.start_as_current_span("POST /orders/import") as request:
            for number, value in enumerate(BARE_ORDERS):
                meta = await producer.send_and_wait(
                    args.first, value=value, key=f"order-{number}".encode()
                )
                sent.append([meta.partition, meta.offset])
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        args.last,
        bootstrap_servers=args.bootstrap,
        group_id="legacy-reports",
        auto_offset_reset="earliest",
        client_id="legacy-reports",
    )
    await consumer.start()
    received: list[dict[str, Any]] = []
    try:
        while len(received) < args.expect:
            record = await asyncio.wait_for(consumer.getone(), 90)
            received.append(
                {
                    "value": (record.value or b"").decode(),
                    "traceparents": [
                        (raw or b"").decode()
                        for name, raw in record.headers
                        if name == "traceparent"
                    ],
                }
            )
    finally:
        await consumer.stop()
    context = request.get_span_context()
    return {"trace_id": trace.format_trace_id(context.trace_id), "sent": sent, "received": received}


async def service(args: argparse.Namespace) -> dict[str, Any]:
    """Forward orders from ``--input`` to ``--output`` until standard input closes."""
    registry = ContractRegistry(
        [
            TopicContract(topic=args.input, model=Order, owner="orders", adopt_bare=args.adopt),
            TopicContract(topic=args.output, model=Order, owner="orders"),
        ]
    )
    hopchain = Hopchain(registry, component=args.component)
    middleware = HopchainMiddleware(hopchain, group=args.component)
    middlewares: list[Any] = [middleware]
    if args.telemetry != "none":
        from faststream.kafka.opentelemetry import KafkaTelemetryMiddleware  # noqa: PLC0415

        telemetry = KafkaTelemetryMiddleware(tracer_provider=trace.get_tracer_provider())
        middlewares.insert(0 if args.telemetry == "first" else 1, telemetry)
    broker = KafkaBroker(args.bootstrap, middlewares=middlewares, ack_policy=AckPolicy.ACK)
    handled: list[dict[str, Any]] = []

    source, target, group = str(args.input), str(args.output), str(args.component)

    @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(target)
    async def forward(order: Order) -> Order:
        hop = current_hop()
        assert hop is not None
        handled.append({"order_id": order.order_id, "span_id": hop.span_id})
        return order

    middleware.check(broker)
    await middleware.prepare()
    await broker.start()
    print("ready", flush=True)  # noqa: T201 - the test waits for it
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await broker.stop()
        await middleware.close()
    counts = {
        sample.name + json.dumps(sample.labels, sort_keys=True): sample.value
        for metric in hopchain.metrics.registry.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.value
    }
    return {"handled": handled, "metrics": counts}


def main() -> None:
    """Run one role; write its findings to ``--out``; flush the spans before exiting."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["estate", "service"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--first")
    parser.add_argument("--last")
    parser.add_argument("--expect", type=int, default=0)
    parser.add_argument("--input")
    parser.add_argument("--output")
    parser.add_argument("--component", default="orders-service")
    parser.add_argument("--adopt", action="store_true")
    parser.add_argument("--telemetry", choices=["none", "first", "last"], default="none")
    args = parser.parse_args()
    provider = configure_tracing(args.component if args.role == "service" else "legacy-estate")
    try:
        found = asyncio.run(estate(args) if args.role == "estate" else service(args))
    finally:
        provider.shutdown()  # exports what is left before the process ends
    args.out.write_text(json.dumps(found))


if __name__ == "__main__":
    main()
