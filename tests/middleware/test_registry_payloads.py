"""Avro through a FastStream stage, on the real broker and the real schema registry.

A producer that has never heard of hopchain frames Avro with confluent-kafka's own
``AvroSerializer``; the stage adopts its records and forwards them; a consumer with
confluent-kafka's ``AvroDeserializer`` reads the stage's output unchanged. What the contract
cannot read is parked byte for byte with its reason code while the stage reads on.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from contextlib import AsyncExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    committed_offsets,
    committed_to_end,
    envelope_consumer_client,
    raw_producer,
    read_topic,
    record_count,
    registry,
    wait_until,
)
from pydantic import BaseModel

from hopchain import (
    ConfluentEnvelopeProducer,
    EnvelopeConsumer,
    EnvelopeProducer,
    Hopchain,
    HopchainMiddleware,
    origin,
)
from hopchain.exceptions import EnvelopeRejected, ReasonCode, SchemaRegistryUnavailable
from hopchain.formats import AvroFormat
from hopchain.schemas import ENVELOPE_HEADER, TopicContract
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
ORDER_V2 = {  # a compatible change: a field with a default added
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}


class Order(BaseModel):
    order_id: str
    amount_cents: int


def avro_contract(topic: str, url: str, **options: Any) -> TopicContract:
    return TopicContract(
        topic=topic,
        model=Order,
        owner="shop-team",
        payload_format=AvroFormat(schema=json.dumps(ORDER_V1), registry_url=url),
        **options,
    )


def foreign_frames(url: str, topic: str, values: list[tuple[dict[str, Any], Any]]) -> list[bytes]:
    """Values framed by confluent-kafka's own serializer, which registers their schemas."""
    context = SerializationContext(topic, MessageField.VALUE)
    framed: list[bytes] = []
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        for schema, value in values:
            data = AvroSerializer(client, json.dumps(schema))(value, context)
            assert data is not None
            framed.append(data)
    return framed


async def test_foreign_avro_is_adopted_forwarded_unchanged_and_what_cannot_be_read_is_parked(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    url = schema_registry_url
    orders, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{shipped}.dlq")
    runtime = Hopchain(
        registry(
            avro_contract(orders, url, adopt_bare=True),
            avro_contract(shipped, url),
        ),
        component="shipper",
    )
    group = unique_topic_name("shipper")
    broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    handled: list[Order] = []

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(shipped)
    async def ship(order: Order) -> Order:
        handled.append(order)
        return order

    good = foreign_frames(
        url,
        orders,
        [
            (ORDER_V1, {"order_id": "o-1", "amount_cents": 1200}),
            (ORDER_V2, {"order_id": "o-2", "amount_cents": 7, "note": "gift"}),
        ],
    )
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        known = client.get_latest_version(f"{orders}-value").schema_id
    assert known is not None
    bad = {
        b"json": (b'{"order_id":"o-3","amount_cents":1}', "wrong_magic_byte"),
        b"unknown-id": (b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x02o\x02", "unknown_schema"),
        b"truncated": (b"\x00" + known.to_bytes(4, "big") + b"\x08o", "undecodable_payload"),
    }
    async with raw_producer(kafka_bootstrap) as plain:
        await plain.send_and_wait(orders, good[0], key=b"o-1")
        for key, (value, _) in bad.items():
            await plain.send_and_wait(orders, value, key=key)
        await plain.send_and_wait(orders, good[1], key=b"o-2")
    await broker.start()
    try:
        await wait_until(
            lambda: record_count(kafka_bootstrap, shipped), within=60, what="orders shipped"
        )
        await wait_until(
            lambda: committed_to_end(kafka_bootstrap, group, orders),
            within=60,
            what="every order read and committed",
        )
    finally:
        await broker.stop()

    assert handled == [
        Order(order_id="o-1", amount_cents=1200),
        Order(order_id="o-2", amount_cents=7),
    ]
    out = await read_topic(kafka_bootstrap, shipped)
    # The producer's own bytes, whatever schema version framed them, under hopchain's envelope.
    assert [record.value for record in out] == good
    assert all(ENVELOPE_HEADER in dict(record.headers) for record in out)
    context = SerializationContext(shipped, MessageField.VALUE)
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        assert [foreign(record.value, context) for record in out] == [
            {"order_id": "o-1", "amount_cents": 1200},
            {"order_id": "o-2", "amount_cents": 7, "note": "gift"},
        ]
    parked = await read_topic(kafka_bootstrap, f"{orders}.dlq")
    found = {}
    for record in parked:
        info = read_dead_letter_headers(record.headers)
        assert info.reason is not None
        found[record.key] = (record.value, info.reason.value, info.path)
    assert found == {key: (value, code, "$.payload") for key, (value, code) in bad.items()}


class SwitchableRegistry:
    """A proxy in front of the real registry that can be made to answer 503, as one that is
    restarting or overloaded does, or to hang: its answers wait while ``answering`` is clear."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.down = True
        self.refused = 0
        self.asked = 0
        self.answering = threading.Event()
        self.answering.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.asked += 1
                if owner.down:
                    owner.refused += 1
                    self._answer(503, b'{"error_code":50301,"message":"restarting"}')
                    return
                owner.answering.wait(timeout=60)
                base = owner.upstream.split("/apis/", 1)[0]
                try:
                    with urllib.request.urlopen(base + self.path, timeout=10) as answer:  # noqa: S310 - the test's own registry
                        self._answer(answer.status, answer.read())
                except urllib.error.HTTPError as error:
                    self._answer(error.code, error.read())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                """Quiet: the test reads its counters, not a log."""

        class Server(ThreadingHTTPServer):
            def handle_error(self, *_: Any) -> None:
                """A client that stopped waiting closed its socket: nothing to report."""

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = (
            f"http://127.0.0.1:{self.server.server_port}/apis/" + upstream.split("/apis/", 1)[1]
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.answering.set()
        self.server.shutdown()
        self.server.server_close()


async def test_a_registry_that_answers_503_pauses_the_stage_and_parks_nothing(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    orders, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{shipped}.dlq")
    sent = foreign_frames(
        schema_registry_url,
        orders,
        [(ORDER_V1, {"order_id": f"o-{n}", "amount_cents": n}) for n in range(5)],
    )
    async with raw_producer(kafka_bootstrap) as plain:
        for value in sent:
            await plain.send_and_wait(orders, value)
    with SwitchableRegistry(schema_registry_url) as proxy:
        runtime = Hopchain(
            registry(
                avro_contract(orders, proxy.url, adopt_bare=True),
                avro_contract(shipped, proxy.url),
            ),
            component="shipper",
        )
        group = unique_topic_name("shipper")
        broker = KafkaBroker(
            kafka_bootstrap,
            middlewares=[HopchainMiddleware(runtime, group=group)],
            ack_policy=AckPolicy.ACK,
        )
        handled: list[str] = []

        @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
        @broker.publisher(shipped)
        async def ship(order: Order) -> Order:
            handled.append(order.order_id)
            return order

        await broker.start()
        try:
            await wait_until(lambda: proxy.refused >= 3, within=60, what="lookups refused")
            # While the registry is down: nothing handled, parked or committed.
            assert handled == []
            assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
            assert await committed_offsets(kafka_bootstrap, group) in ({}, {(orders, 0): 0})
            proxy.down = False
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, orders),
                within=60,
                what="every order handled once the registry answers",
            )
            # Down again: a schema id seen once is cached, so the stage reads on without it.
            proxy.down, refused = True, proxy.refused
            async with raw_producer(kafka_bootstrap) as plain:
                await plain.send_and_wait(orders, sent[0])
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, orders),
                within=60,
                what="an order of a known schema handled while the registry is down",
            )
        finally:
            await broker.stop()

    assert handled == [*(f"o-{n}" for n in range(5)), "o-0"]
    assert proxy.refused == refused  # the registry was not asked
    unavailable = runtime.metrics.registry.get_sample_value(
        "hopchain_schema_registry_unavailable_total", {"topic": orders}
    )
    assert unavailable is not None
    assert unavailable >= 1
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
    assert [record.value for record in await read_topic(kafka_bootstrap, shipped)] == [
        *sent,
        sent[0],
    ]


@pytest.mark.parametrize("family", ["aiokafka", "confluent-kafka"])
async def test_a_plain_producer_frames_with_the_registered_schema_and_registers_none(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str, family: str
) -> None:
    registered, unregistered = await new_topic(prefix="orders"), await new_topic(prefix="refunds")
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        client.register_schema(f"{registered}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    runtime = Hopchain(
        registry(
            avro_contract(registered, schema_registry_url),
            avro_contract(unregistered, schema_registry_url),
        ),
        component="checkout",
    )
    async with AsyncExitStack() as stack:
        sender: EnvelopeProducer | ConfluentEnvelopeProducer
        if family == "aiokafka":
            producer = await stack.enter_async_context(raw_producer(kafka_bootstrap))
            sender = EnvelopeProducer(producer, runtime)
        else:
            sender = ConfluentEnvelopeProducer(
                Producer({"bootstrap.servers": kafka_bootstrap}), runtime
            )
            stack.push_async_callback(sender.close)
        with origin("checkout-run", "cart-1"):
            await sender.send(registered, Order(order_id="o-9", amount_cents=990))
            with pytest.raises(EnvelopeRejected) as caught:
                await sender.send(unregistered, {"order_id": "r-1", "amount_cents": 5})

    assert (caught.value.code, caught.value.path) == (ReasonCode.UNKNOWN_SCHEMA, "$.payload")
    assert await record_count(kafka_bootstrap, unregistered) == 0  # nothing was sent
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        assert client.get_subjects().count(f"{unregistered}-value") == 0  # nor registered
        [record] = await read_topic(kafka_bootstrap, registered)
        context = SerializationContext(registered, MessageField.VALUE)
        assert AvroDeserializer(client)(record.value, context) == {
            "order_id": "o-9",
            "amount_cents": 990,
        }


async def test_a_plain_aiokafka_consumer_is_rewound_when_the_registry_does_not_answer(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    orders = await new_topic(prefix="orders")
    await create_topics(kafka_bootstrap, f"{orders}.dlq")
    sent = foreign_frames(
        schema_registry_url,
        orders,
        [(ORDER_V1, {"order_id": f"o-{n}", "amount_cents": n}) for n in range(2)],
    )
    group = unique_topic_name("reader")
    async with raw_producer(kafka_bootstrap) as producer:
        for value in sent:
            await producer.send_and_wait(orders, value)
        with SwitchableRegistry(schema_registry_url) as proxy:
            runtime = Hopchain(
                registry(avro_contract(orders, proxy.url, adopt_bare=True)), component="reader"
            )
            async with envelope_consumer_client(kafka_bootstrap, orders, group) as consumer:
                records = EnvelopeConsumer(consumer, producer, runtime, group=group)
                with pytest.raises(SchemaRegistryUnavailable):
                    await asyncio.wait_for(records.next(), timeout=60)
                proxy.down = False
                read = []
                for _ in sent:
                    hop = await asyncio.wait_for(records.next(), timeout=30)
                    read.append((hop.record.offset, hop.payload))
                    await records.commit(hop)

    # The record the registry could not help with was read again, not skipped nor parked.
    assert read == [
        (0, Order(order_id="o-0", amount_cents=0)),
        (1, Order(order_id="o-1", amount_cents=1)),
    ]
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
