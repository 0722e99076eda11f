"""``prepare()`` asks the real schema registry about every contract with a registry format.

A subject that is missing (and that the format may not register), or whose latest version the
registry judges incompatible with the contract's schema, or a registry that does not answer:
start-up stops with one line per problem, before any dead-letter topic is made. Fixed in the
registry, the same middleware prepares.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import admin_client, contract, registry
from test_registry_payloads import ORDER_V1, ORDER_V2, Order, avro_contract

from hopchain import Hopchain, HopchainMiddleware
from hopchain.exceptions import ConfigurationError
from hopchain.formats import AvroFormat
from hopchain.schemas import TopicContract
from hopchain.testing import TopicFactory

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

ORDER_RETYPED: dict[str, Any] = {  # amount_cents as a string: v1's data cannot be read with it
    **ORDER_V1,
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "string"},
    ],
}


def avro(topic: str, url: str, schema: dict[str, Any], **options: Any) -> TopicContract:
    return TopicContract(
        topic=topic,
        model=Order,
        owner="shop-team",
        payload_format=AvroFormat(schema=json.dumps(schema), registry_url=url, **options),
    )


async def topic_exists(bootstrap: str, topic: str) -> bool:
    async with admin_client(bootstrap) as admin:
        return topic in await admin.list_topics()


def middleware_for(kafka_bootstrap: str, *contracts: TopicContract) -> HopchainMiddleware:
    """A middleware checked on a broker that subscribes to every contract's topic."""
    middleware = HopchainMiddleware(Hopchain(registry(*contracts), component="shop"))
    broker = KafkaBroker(kafka_bootstrap, middlewares=[middleware], ack_policy=AckPolicy.ACK)
    for item in contracts:

        @broker.subscriber(item.topic, group_id="shop")
        async def take(order: Order) -> None:
            del order

    middleware.check(broker)
    return middleware


async def test_prepare_names_every_missing_or_incompatible_subject_then_passes_once_fixed(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    url = schema_registry_url
    same, evolved, missing, automatic, retyped, plain = [
        await new_topic(prefix=name)
        for name in ("same", "evolved", "missing", "auto", "retyped", "plain")
    ]
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        for topic in (same, evolved, retyped):
            client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
            client.set_compatibility(subject_name=f"{topic}-value", level="BACKWARD")
    middleware = middleware_for(
        kafka_bootstrap,
        avro_contract(same, url),
        avro(evolved, url, ORDER_V2),  # a field with a default added: backward compatible
        avro(missing, url, ORDER_V1),
        avro(automatic, url, ORDER_V1, auto_register=True),  # registers on its first write
        avro(retyped, url, ORDER_RETYPED),
        contract(plain),  # JSON: no registry involved
    )

    with pytest.raises(ConfigurationError) as caught:
        await middleware.prepare()

    header, *lines = str(caught.value).splitlines()
    assert header == (
        "the schema registry does not accept the contracts (2 problem(s); "
        "`hopchain schema check` shows the same):"
    )
    assert lines[0] == (
        f"- topic {missing!r}: subject '{missing}-value' is not in the schema registry at "
        f"{url}; register the contract's schema there, or give the format auto_register=True"
    )
    assert lines[1].startswith(
        f"- topic {retyped!r}: the contract's avro schema is not compatible with the latest "
        f"version of subject '{retyped}-value'"
    )
    assert len(lines) == 2
    # Start-up stopped before the broker was asked for anything.
    assert not await topic_exists(kafka_bootstrap, f"{same}.dlq")

    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        client.register_schema(f"{missing}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
        client.set_compatibility(subject_name=f"{retyped}-value", level="NONE")
    created = await middleware.prepare()
    await middleware.close()

    assert sorted(created) == sorted(
        f"{topic}.dlq" for topic in (same, evolved, missing, automatic, retyped, plain)
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_prepare_reports_a_registry_that_does_not_answer_once_with_its_topics(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    nowhere = f"http://127.0.0.1:{closed_port()}/apis/ccompat/v7"
    first, second = await new_topic(prefix="orders"), await new_topic(prefix="refunds")
    middleware = middleware_for(
        kafka_bootstrap, avro(first, nowhere, ORDER_V1), avro(second, nowhere, ORDER_V1)
    )

    with pytest.raises(ConfigurationError) as caught:
        await middleware.prepare()

    _, *lines = str(caught.value).splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"- the schema registry at {nowhere} could not be reached: ")
    assert lines[0].endswith(f": the subjects of topic(s) {first!r}, {second!r} were not checked")
    assert not await topic_exists(kafka_bootstrap, f"{first}.dlq")


async def test_prepare_says_which_setting_names_the_registry_when_none_is_given(
    kafka_bootstrap: str, new_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPCHAIN_SCHEMA_REGISTRY_URL", raising=False)
    orders = await new_topic(prefix="orders")
    middleware = middleware_for(
        kafka_bootstrap,
        TopicContract(
            topic=orders,
            model=Order,
            owner="shop-team",
            payload_format=AvroFormat(schema=json.dumps(ORDER_V1)),
        ),
    )

    with pytest.raises(ConfigurationError) as caught:
        await middleware.prepare()

    assert str(caught.value).splitlines()[1:] == [
        (
            f"- topic(s) {orders!r} carry registry payloads but no schema registry is given: "
            "set HOPCHAIN_SCHEMA_REGISTRY_URL (or give the format registry_url=...)"
        )
    ]
