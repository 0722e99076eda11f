"""A schema registry named only in code, ``HopchainConfig(schema_registry_url=...)``, is the one
a stage's registry formats and ``prepare()`` ask, on the real broker and the real registry.

The environment names a registry that is not there, so a stage that read it instead would
only stall: the format's own ``registry_url`` comes first, then the engine's config, then
``HOPCHAIN_SCHEMA_REGISTRY_URL``.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    committed_to_end,
    raw_producer,
    read_topic,
    record_count,
    registry,
    wait_until,
)
from test_registry_payloads import ORDER_V1, ORDER_V2, Order, foreign_frames

from hopchain import Hopchain, HopchainConfig, HopchainMiddleware
from hopchain.exceptions import ConfigurationError
from hopchain.formats import AvroFormat
from hopchain.schemas import ENVELOPE_HEADER, TopicContract
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]


def closed_registry() -> str:
    """The address of a registry that is not there: a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/apis/ccompat/v7"


def avro_without_url(topic: str, **options: Any) -> TopicContract:
    """An Avro contract whose format names no registry of its own."""
    url = options.pop("registry_url", None)
    return TopicContract(
        topic=topic,
        model=Order,
        owner="shop-team",
        payload_format=AvroFormat(
            schema=json.dumps(ORDER_V1),
            registry_url=url,
            auto_register=options.pop("auto_register", False),
        ),
        **options,
    )


def checked_middleware(
    bootstrap: str, runtime: Hopchain, group: str
) -> tuple[HopchainMiddleware, KafkaBroker]:
    middleware = HopchainMiddleware(runtime, group=group)
    broker = KafkaBroker(bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    return middleware, broker


async def test_a_stage_reads_avro_from_the_registry_given_only_in_its_hopchain_config(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = schema_registry_url
    nowhere = closed_registry()
    monkeypatch.setenv("HOPCHAIN_SCHEMA_REGISTRY_URL", nowhere)
    orders, shipped = await new_topic(prefix="orders"), await new_topic(prefix="shipped")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{shipped}.dlq")
    good = foreign_frames(
        url,
        orders,
        [
            (ORDER_V1, {"order_id": "o-1", "amount_cents": 1200}),
            (ORDER_V2, {"order_id": "o-2", "amount_cents": 7, "note": "gift"}),
        ],
    )
    runtime = Hopchain(
        registry(
            avro_without_url(orders, adopt_bare=True),
            avro_without_url(shipped, auto_register=True),
        ),
        component="shipper",
        config=HopchainConfig(schema_registry_url=url + "/"),
    )
    group = unique_topic_name("shipper")
    middleware, broker = checked_middleware(kafka_bootstrap, runtime, group)
    handled: list[Order] = []

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(shipped)
    async def ship(order: Order) -> Order:
        handled.append(order)
        return order

    middleware.check(broker)
    await middleware.prepare()  # asks the config's registry: the environment's is not there
    async with raw_producer(kafka_bootstrap) as plain:
        for key, value in zip((b"o-1", b"o-2"), good, strict=True):
            await plain.send_and_wait(orders, value, key=key)
    await broker.start()
    try:

        async def both_shipped() -> bool:
            return await record_count(kafka_bootstrap, shipped) == len(good)

        await wait_until(both_shipped, within=60, what="both orders shipped")
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
    assert [record.value for record in out] == good
    assert all(ENVELOPE_HEADER in dict(record.headers) for record in out)
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
    context = SerializationContext(shipped, MessageField.VALUE)
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        assert [foreign(record.value, context)["order_id"] for record in out] == ["o-1", "o-2"]


async def test_the_formats_own_url_comes_first_then_the_config_then_the_environment(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = schema_registry_url
    nowhere = closed_registry()
    orders = await new_topic(prefix="orders")
    foreign_frames(url, orders, [(ORDER_V1, {"order_id": "o-1", "amount_cents": 1})])

    async def prepared(contract: TopicContract, config: HopchainConfig) -> str | None:
        """None when prepare() passed; else its first problem."""
        runtime = Hopchain(registry(contract), component="shop", config=config)
        middleware, broker = checked_middleware(kafka_bootstrap, runtime, "shop")

        @broker.subscriber(contract.topic, group_id="shop")
        async def take(order: Order) -> None:
            del order

        middleware.check(broker)
        try:
            await middleware.prepare()
        except ConfigurationError as exc:
            return str(exc).splitlines()[1]
        return None

    monkeypatch.setenv("HOPCHAIN_SCHEMA_REGISTRY_URL", nowhere)
    # The format's own URL, though the config names the missing one.
    own = avro_without_url(orders, registry_url=url)
    assert await prepared(own, HopchainConfig(schema_registry_url=nowhere)) is None
    # The config's, though the environment names the missing one.
    assert await prepared(avro_without_url(orders), HopchainConfig(schema_registry_url=url)) is None
    # Neither: the environment's, which is not there.
    problem = await prepared(avro_without_url(orders), HopchainConfig())
    assert problem is not None
    assert problem.startswith(f"- the schema registry at {nowhere} could not be reached: ")

    monkeypatch.setenv("HOPCHAIN_SCHEMA_REGISTRY_URL", url)
    assert await prepared(avro_without_url(orders), HopchainConfig()) is None
    monkeypatch.delenv("HOPCHAIN_SCHEMA_REGISTRY_URL")
    problem = await prepared(avro_without_url(orders), HopchainConfig())
    assert problem == (
        f"- topic(s) {orders!r} carry registry payloads but no schema registry is given: "
        "set HOPCHAIN_SCHEMA_REGISTRY_URL (or give the format registry_url=...)"
    )
