"""A schema registry that is down, on every consume path: real broker, real registry.

The registry stands behind a proxy that answers 503 while it is "down" (an in-memory
registry that really restarts forgets its schema ids; the proxy keeps them, as a registry
with durable storage would). While it is down nothing is parked for it, no offset moves past
a record that needs it, records whose schema id is cached read on, and the pause before a
record is read again grows; once it answers, every record is handled exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
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
from test_registry_payloads import (
    ORDER_V1,
    ORDER_V2,
    Order,
    SwitchableRegistry,
    avro_contract,
    foreign_frames,
)
from txn_worker import read_all

from hopchain import (
    ConfluentEnvelopeConsumer,
    EnvelopeConsumer,
    Hopchain,
    HopchainMiddleware,
    TransactionalConsumer,
    origin,
)
from hopchain.exceptions import SchemaRegistryUnavailable
from hopchain.middleware.aiokafka_producer import EnvelopeProducer
from hopchain.middleware.outage import RegistryBackoff
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

WRONG_MAGIC = b"\x07not framed by a registry serializer"
"""Refused without asking the registry (wrong_magic_byte): parked exactly once."""


def orders(schema: dict[str, Any], numbers: range) -> list[tuple[dict[str, Any], Any]]:
    extra = {"note": "v2"} if schema is ORDER_V2 else {}
    return [(schema, {"order_id": f"o-{n}", "amount_cents": n, **extra}) for n in numbers]


def pauses(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The pauses hopchain logged for the registry, in order."""
    return [
        float(getattr(record, "pause_seconds", 0.0))
        for record in caplog.records
        if getattr(record, "hopchain_event", None) == "schema_registry_unavailable"
    ]


def assert_growing(seen: list[float], backoff: RegistryBackoff) -> None:
    """Each pause longer than the one before until the cap; none longer than the cap."""
    assert seen, "no pause was logged"
    assert seen[0] <= backoff.first
    assert max(seen) <= backoff.longest
    below_cap = [p for p in seen if p < backoff.longest * (1 - backoff.jitter)]
    assert all(b > a for a, b in itertools.pairwise(below_cap)), seen


def unavailable_count(runtime: Hopchain, topic: str) -> float:
    value = runtime.metrics.registry.get_sample_value(
        "hopchain_schema_registry_unavailable_total", {"topic": topic}
    )
    return value or 0.0


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with raw_producer(bootstrap) as plain:
        sending = [await plain.send(topic, value) for value in values]
        await asyncio.gather(*sending)


async def test_an_outage_amid_2000_records_parks_none_and_handles_each_once(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = 8.0  # seconds the unseen schema waits; bench/registry_outage.py takes 30 s
    caplog.set_level(logging.WARNING, logger="hopchain")
    source, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{source}.dlq", f"{shipped}.dlq")
    # 500 read before the outage (their schema id is then cached), 500 more of that schema
    # during it, then 1,000 of a schema version the stage has never seen.
    known = foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(1000)))
    unseen = foreign_frames(schema_registry_url, source, orders(ORDER_V2, range(1000, 2000)))
    backoff = RegistryBackoff(first=0.25, longest=2.0)
    handled: list[str] = []
    with SwitchableRegistry(schema_registry_url) as proxy:
        proxy.down = False
        runtime = Hopchain(
            registry(
                avro_contract(source, proxy.url, adopt_bare=True),
                avro_contract(shipped, proxy.url),
            ),
            component="shipper",
        )
        group = unique_topic_name("shipper")
        middleware = HopchainMiddleware(runtime, group=group, registry_backoff=backoff)
        broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
        @broker.publisher(shipped)
        async def ship(order: Order) -> Order:
            handled.append(order.order_id)
            return order

        await produce(kafka_bootstrap, source, known[:500])
        await broker.start()
        try:
            await wait_until(lambda: len(handled) == 500, within=120, what="500 orders")
            proxy.down = True
            await produce(kafka_bootstrap, source, known[500:] + unseen)
            # A cached schema id needs no registry: those records read on.
            await wait_until(lambda: len(handled) == 1000, within=120, what="cached ids read on")
            await wait_until(lambda: pauses(caplog), within=60, what="the first unseen one paused")
            # The records of the unseen schema wait `outage` seconds for the registry.
            await asyncio.sleep(outage)
            # Still down: nothing of the unseen schema handled, parked or committed past.
            assert len(handled) == 1000
            assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
            assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 1000}
            during = pauses(caplog)
            proxy.down = False
            up_at = time.monotonic()
            await wait_until(lambda: len(handled) > 1000, within=30, what="the first unseen one")
            resumed = time.monotonic() - up_at
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, source),
                within=180,
                what="every order handled once the registry answers",
            )
            caught_up = time.monotonic() - up_at
        finally:
            await middleware.close()
            await broker.stop()

    logging.getLogger("tests").warning(
        "outage %.1f s: %d pauses, longest %.2f s; first record %.2f s and all %.2f s after "
        "the registry answered",
        outage,
        len(during),
        max(during),
        resumed,
        caught_up,
    )
    counts = Counter(handled)
    assert set(counts) == {f"o-{n}" for n in range(2000)}  # lost 0
    assert set(counts.values()) == {1}  # each exactly once
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
    assert await record_count(kafka_bootstrap, shipped) == 2000
    assert_growing(during, backoff)
    assert len(during) >= 4  # 0.25 + 0.5 + 1 + 2 s fit in the 8 s
    assert resumed <= backoff.longest + 5.0  # no longer than one pause, and a fetch
    assert unavailable_count(runtime, source) == len(pauses(caplog))


def faststream_broker(
    kind: str, bootstrap: str, middleware: HopchainMiddleware, *, batched: bool
) -> Any:
    """A broker of ``kind``; ``batched``: hopchain commits (``AckPolicy.MANUAL``)."""
    policy = middleware.ack_policy if batched else AckPolicy.ACK
    if kind == "confluent":
        from faststream.confluent import KafkaBroker as ConfluentBroker  # noqa: PLC0415

        return ConfluentBroker(bootstrap, middlewares=[middleware], ack_policy=policy)
    return KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=policy)


@pytest.mark.parametrize(
    ("kind", "batch", "batched"),
    [
        ("aiokafka", True, False),
        ("aiokafka", False, True),
        ("confluent", False, False),
        ("confluent", True, False),
    ],
    ids=["aiokafka-batch", "aiokafka-batched-commits", "confluent-record", "confluent-batch"],
)
async def test_a_faststream_subscriber_waits_out_an_outage_and_parks_only_the_malformed_once(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    *,
    batch: bool,
    batched: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="hopchain")
    source, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{source}.dlq", f"{shipped}.dlq")
    framed = foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(60)))
    await produce(kafka_bootstrap, source, [WRONG_MAGIC, *framed])
    backoff = RegistryBackoff(first=0.2, longest=1.0)
    handled: list[str] = []
    with SwitchableRegistry(schema_registry_url) as proxy:
        runtime = Hopchain(
            registry(
                avro_contract(source, proxy.url, adopt_bare=True),
                avro_contract(shipped, proxy.url),
            ),
            component="shipper",
        )
        group = unique_topic_name("shipper")
        middleware = HopchainMiddleware(runtime, group=group, registry_backoff=backoff)
        broker = faststream_broker(kind, kafka_bootstrap, middleware, batched=batched)

        async def ship_all(batch_of: list[Order]) -> list[Order]:
            handled.extend(order.order_id for order in batch_of)
            return batch_of

        async def ship(order: Order) -> Order:
            handled.append(order.order_id)
            return order

        # Either family's broker: its decorators applied as calls.
        subscribe = broker.subscriber(
            source, group_id=group, auto_offset_reset="earliest", batch=batch
        )
        subscribe(broker.publisher(shipped, batch=batch)(ship_all if batch else ship))
        middleware.check(broker)
        await broker.start()
        try:
            await wait_until(lambda: len(pauses(caplog)) >= 4, within=60, what="four pauses")
            # Down: not even the malformed record is parked (its batch is read again whole).
            assert handled == []
            if batch:
                assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
                assert await committed_offsets(kafka_bootstrap, group) in ({}, {(source, 0): 0})
            else:
                # One record at a time: the malformed one is parked and passed; no further.
                await wait_until(
                    lambda: committed_offsets(kafka_bootstrap, group),
                    within=30,
                    what="the parked record committed",
                )
                assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 1}
            during = pauses(caplog)
            proxy.down = False
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, source),
                within=120,
                what="every order handled once the registry answers",
            )
        finally:
            await middleware.close()
            await broker.stop()

    counts = Counter(handled)
    assert set(counts) == {f"o-{n}" for n in range(60)}
    assert set(counts.values()) == {1}
    letters = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert [letter.value for letter in letters] == [WRONG_MAGIC]  # parked once, not per retry
    assert await record_count(kafka_bootstrap, shipped) == 60
    assert_growing(during, backoff)
    assert unavailable_count(runtime, source) >= len(during)


def confluent_settings(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
    }


async def read_batches_through_an_outage(
    next_batch: Callable[[], Any],
    settle: Callable[[Any], Any],
    proxy: SwitchableRegistry,
    expected: int,
) -> tuple[list[str], list[float], list[float]]:
    """Read batches while the registry is down (each read raises), then until ``expected``.

    Returns the order ids handled, each refusal's ``retry_after`` and the seconds each read
    after a refusal took to raise again.
    """
    retry_after: list[float] = []
    waited: list[float] = []
    for _ in range(4):
        started = time.monotonic()
        with pytest.raises(SchemaRegistryUnavailable) as caught:
            await asyncio.wait_for(next_batch(), timeout=60)
        if retry_after:
            waited.append(time.monotonic() - started)
        retry_after.append(caught.value.retry_after)
    proxy.down = False
    handled: list[str] = []
    while len(handled) < expected:
        batch = await asyncio.wait_for(next_batch(), timeout=60)
        handled.extend(hop.payload.order_id for hop in batch.hops)
        await settle(batch)
    return handled, retry_after, waited


async def test_envelope_consumer_batches_are_rewound_and_read_again_after_a_growing_pause(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    source = await new_topic(prefix="orders")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    framed = foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(40)))
    await produce(kafka_bootstrap, source, [WRONG_MAGIC, *framed])
    group = unique_topic_name("reader")
    backoff = RegistryBackoff(first=0.3, longest=1.5, jitter=0.0)
    async with raw_producer(kafka_bootstrap) as producer:
        with SwitchableRegistry(schema_registry_url) as proxy:
            runtime = Hopchain(
                registry(avro_contract(source, proxy.url, adopt_bare=True)), component="reader"
            )
            async with envelope_consumer_client(kafka_bootstrap, source, group) as consumer:
                records = EnvelopeConsumer(
                    consumer, producer, runtime, group=group, registry_backoff=backoff
                )
                batches = records.batches(max_records=25, timeout=0.5)

                async def commit(batch: Any) -> None:
                    await batch.commit()

                handled, retry_after, waited = await read_batches_through_an_outage(
                    batches.__anext__, commit, proxy, 40
                )
                assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 41}

    assert retry_after == [0.3, 0.6, 1.2, 1.5]
    # Each read after a refusal first waited out the pause it announced.
    assert all(took >= pause - 0.05 for took, pause in zip(waited, retry_after, strict=False))
    assert Counter(handled) == Counter(f"o-{n}" for n in range(40))
    letters = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert [letter.value for letter in letters] == [WRONG_MAGIC]
    assert unavailable_count(runtime, source) == 4


async def test_transactional_batches_are_rewound_and_read_again_after_a_growing_pause(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    source, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{source}.dlq", f"{shipped}.dlq")
    framed = foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(40)))
    await produce(kafka_bootstrap, source, [WRONG_MAGIC, *framed])
    group = unique_topic_name("reader")
    backoff = RegistryBackoff(first=0.3, longest=1.5, jitter=0.0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=group)
    await producer.start()
    try:
        with SwitchableRegistry(schema_registry_url) as proxy:
            runtime = Hopchain(
                registry(
                    avro_contract(source, proxy.url, adopt_bare=True),
                    avro_contract(shipped, proxy.url),
                ),
                component="reader",
            )
            async with envelope_consumer_client(kafka_bootstrap, source, group) as consumer:
                stage = TransactionalConsumer(
                    consumer, producer, runtime, group=group, registry_backoff=backoff
                )
                batches = stage.batches(max_records=25, timeout=0.5)

                async def forward(batch: Any) -> None:
                    for hop in batch.hops:
                        await batch.send(hop, shipped, hop.payload)
                    await batch.commit()

                handled, retry_after, waited = await read_batches_through_an_outage(
                    batches.__anext__, forward, proxy, 40
                )
                await stage.close()
                assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 41}
    finally:
        await producer.stop()

    assert retry_after == [0.3, 0.6, 1.2, 1.5]
    assert all(took >= pause - 0.05 for took, pause in zip(waited, retry_after, strict=False))
    assert Counter(handled) == Counter(f"o-{n}" for n in range(40))
    letters = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert [letter.value for letter in letters] == [WRONG_MAGIC]
    # Each output shown once to a read_committed reader (the log holds the transactions'
    # markers too).
    shown = await read_all(kafka_bootstrap, [shipped], "read_committed", at_least=40)
    assert len(shown) == 40
    assert unavailable_count(runtime, source) == 4


async def test_confluent_consumer_batches_are_rewound_and_read_again_after_a_growing_pause(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    source = await new_topic(prefix="orders")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    framed = foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(40)))
    await produce(kafka_bootstrap, source, [WRONG_MAGIC, *framed])
    group = unique_topic_name("reader")
    backoff = RegistryBackoff(first=0.3, longest=1.5, jitter=0.0)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    with SwitchableRegistry(schema_registry_url) as proxy:
        runtime = Hopchain(
            registry(avro_contract(source, proxy.url, adopt_bare=True)), component="reader"
        )
        async with ConfluentEnvelopeConsumer(
            confluent_settings(kafka_bootstrap, group),
            producer,
            runtime,
            topics=[source],
            registry_backoff=backoff,
        ) as records:
            batches = records.batches(max_records=25, timeout=0.5)

            async def commit(batch: Any) -> None:
                await batch.commit()

            handled, retry_after, waited = await read_batches_through_an_outage(
                batches.__anext__, commit, proxy, 40
            )
            assert await committed_offsets(kafka_bootstrap, group) == {(source, 0): 41}

    assert retry_after == [0.3, 0.6, 1.2, 1.5]
    assert all(took >= pause - 0.05 for took, pause in zip(waited, retry_after, strict=False))
    assert Counter(handled) == Counter(f"o-{n}" for n in range(40))
    letters = await read_topic(kafka_bootstrap, f"{source}.dlq")
    assert [letter.value for letter in letters] == [WRONG_MAGIC]
    assert unavailable_count(runtime, source) == 4


class ForwardingRegistry(SwitchableRegistry):
    """:class:`SwitchableRegistry` that forwards POSTs too (a writer's schema lookup)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        handler = self.server.RequestHandlerClass
        owner = self

        def do_post(request: Any) -> None:
            if owner.down:
                owner.refused += 1
                request._answer(503, b'{"error_code":50301,"message":"restarting"}')
                return
            body = request.rfile.read(int(request.headers.get("Content-Length", 0)))
            base = owner.upstream.split("/apis/", 1)[0]
            sent = urllib.request.Request(  # noqa: S310 - the test's own registry
                base + request.path,
                data=body,
                headers={"Content-Type": request.headers.get("Content-Type", "")},
                method="POST",
            )
            try:
                with urllib.request.urlopen(sent, timeout=10) as answer:  # noqa: S310
                    request._answer(answer.status, answer.read())
            except urllib.error.HTTPError as error:
                request._answer(error.code, error.read())

        handler.do_POST = do_post  # type: ignore[attr-defined]


async def test_an_output_the_registry_cannot_frame_is_not_parked_and_is_handled_again(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hopchain")
    source, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{source}.dlq", f"{shipped}.dlq")
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        client.register_schema(f"{shipped}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    await produce(
        kafka_bootstrap,
        source,
        foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(3))),
    )
    backoff = RegistryBackoff(first=0.2, longest=1.0)
    calls: list[str] = []
    with ForwardingRegistry(schema_registry_url) as proxy:
        # The records are read through the registry itself; only their outputs need the proxy.
        runtime = Hopchain(
            registry(
                avro_contract(source, schema_registry_url, adopt_bare=True),
                avro_contract(shipped, proxy.url),
            ),
            component="shipper",
        )
        group = unique_topic_name("shipper")
        middleware = HopchainMiddleware(runtime, group=group, registry_backoff=backoff)
        broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
        @broker.publisher(shipped)
        async def ship(order: Order) -> Order:
            calls.append(order.order_id)
            return Order(order_id=order.order_id, amount_cents=order.amount_cents + 1)

        await broker.start()
        try:
            await wait_until(lambda: len(pauses(caplog)) >= 4, within=60, what="four pauses")
            assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
            assert await record_count(kafka_bootstrap, shipped) == 0
            assert await committed_offsets(kafka_bootstrap, group) in ({}, {(source, 0): 0})
            during = pauses(caplog)
            proxy.down = False
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, source),
                within=60,
                what="every order handled once the registry answers",
            )
        finally:
            await middleware.close()
            await broker.stop()

    # At least once: the handler ran again for each pause, its output was sent once.
    assert set(calls) == {"o-0", "o-1", "o-2"}
    assert calls.count("o-0") == len(during) + 1
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 30}) as client:
        context = SerializationContext(shipped, MessageField.VALUE)
        written = [
            AvroDeserializer(client)(record.value, context)
            for record in await read_topic(kafka_bootstrap, shipped)
        ]
    assert written == [{"order_id": f"o-{n}", "amount_cents": n + 1} for n in range(3)]
    assert_growing(during, backoff)
    assert unavailable_count(runtime, source) == len(pauses(caplog))


async def test_records_enveloped_by_hopchain_wait_out_an_outage_and_none_is_parked(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Records a hopchain stage wrote (an envelope in the header, framed Avro as the value)."""
    caplog.set_level(logging.WARNING, logger="hopchain")
    source = await new_topic(prefix="orders")
    await create_topics(kafka_bootstrap, f"{source}.dlq")
    foreign_frames(schema_registry_url, source, orders(ORDER_V1, range(1)))  # registers v1
    writer = Hopchain(registry(avro_contract(source, schema_registry_url)), component="intake")
    async with raw_producer(kafka_bootstrap) as plain:
        sender = EnvelopeProducer(plain, writer)
        for n in range(5):
            with origin(run_id="outage", work_item_id=f"o-{n}"):
                await sender.send(source, Order(order_id=f"o-{n}", amount_cents=n))
    handled: list[str] = []
    backoff = RegistryBackoff(first=0.25, longest=1.0, jitter=0.0)
    with SwitchableRegistry(schema_registry_url) as proxy:
        runtime = Hopchain(registry(avro_contract(source, proxy.url)), component="shipper")
        group = unique_topic_name("shipper")
        middleware = HopchainMiddleware(runtime, group=group, registry_backoff=backoff)
        broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)

        @broker.subscriber(source, group_id=group, auto_offset_reset="earliest")
        async def ship(order: Order) -> None:
            handled.append(order.order_id)

        await broker.start()
        try:
            await wait_until(lambda: len(pauses(caplog)) >= 3, within=60, what="three pauses")
            # Down: nothing handled, parked or committed past the first record.
            assert handled == []
            assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
            assert await committed_offsets(kafka_bootstrap, group) == {}
            proxy.down = False
            await wait_until(lambda: len(handled) == 5, within=60, what="five orders")
            await wait_until(
                lambda: committed_to_end(kafka_bootstrap, group, source),
                within=30,
                what="the orders committed",
            )
        finally:
            await middleware.close()
            await broker.stop()

    assert handled == [f"o-{n}" for n in range(5)]
    assert await record_count(kafka_bootstrap, f"{source}.dlq") == 0
    assert unavailable_count(runtime, source) == len(pauses(caplog))
