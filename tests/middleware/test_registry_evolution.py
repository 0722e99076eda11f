"""A topic's Avro schema evolves while a FastStream stage reads it, on the real broker and registry.

The stage's contract reads with reader schema v1. A producer that has never heard of hopchain
(confluent-kafka's own ``AvroSerializer``, which registers what it writes) frames records with
v1, then with a compatible v2 (a field with a default added): they are handled. Then the
subject's compatibility is set to NONE and a v3 that changes a field's type is registered: the
records framed with it, and only those, are parked byte for byte as ``unresolvable_schema``,
and the group's committed offset passes none of them before its dead letter is acknowledged.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import (
    DeadLetterWatch,
    committed_to_end,
    raw_producer,
    read_topic,
    registry,
    wait_until,
)
from test_registry_payloads import ORDER_V1, ORDER_V2, Order, avro_contract, foreign_frames

from hopchain import Hopchain, HopchainMiddleware
from hopchain.schemas.deadletter import read_dead_letter_headers
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

ORDER_V3: dict[str, Any] = {  # incompatible with v1 and v2: a field's type changed
    **ORDER_V1,
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "string"},
    ],
}


def v1(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return ORDER_V1, {"order_id": f"v1-{n}", "amount_cents": n}


def v2(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return ORDER_V2, {"order_id": f"v2-{n}", "amount_cents": 100 + n, "note": f"gift {n}"}


def v3(n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return ORDER_V3, {"order_id": f"v3-{n}", "amount_cents": f"{n} euros"}


async def test_compatible_versions_pass_and_exactly_the_incompatible_ones_are_parked(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    schema_registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = schema_registry_url
    orders = await new_topic(prefix="orders")
    await create_topics(kafka_bootstrap, f"{orders}.dlq")
    runtime = Hopchain(registry(avro_contract(orders, url, adopt_bare=True)), component="shop")
    group = unique_topic_name("shop")
    watch = DeadLetterWatch(kafka_bootstrap, group)
    watch.install(monkeypatch)
    broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    handled: list[Order] = []

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    async def take(order: Order) -> None:
        handled.append(order)

    async def send(values: list[bytes]) -> None:
        async with raw_producer(kafka_bootstrap) as plain:
            for value in values:
                await plain.send_and_wait(orders, value)

    async def all_read(what: str) -> None:
        await wait_until(
            lambda: committed_to_end(kafka_bootstrap, group, orders), within=60, what=what
        )

    await broker.start()
    try:
        first = foreign_frames(url, orders, [v1(n) for n in range(4)])
        await send(first)
        await all_read("the v1 orders")
        second = foreign_frames(url, orders, [v2(n) for n in range(4)])
        await send(second)
        await all_read("the v2 orders")
        with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
            client.set_compatibility(subject_name=f"{orders}-value", level="NONE")
        # Mid-run: the incompatible version's records between records the stage can read.
        third = foreign_frames(url, orders, [v3(0), v1(4), v3(1), v3(2), v2(4), v3(3)])
        await send(third)
        await all_read("the orders after the incompatible version")
    finally:
        await broker.stop()

    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        versions = client.get_versions(f"{orders}-value")
        ids = {client.get_version(f"{orders}-value", v).schema_id for v in versions}
    assert len(versions) == len(ids) == 3  # v1, v2 and v3 were each registered, once
    unreadable = [third[0], third[2], third[3], third[5]]
    # At least once: a consumer whose session expires (a loaded machine) reads again from
    # the last commit, so a record handled or parked just before may come twice. Each record
    # counts once here, by its offset; a repeat is the same record, never another.
    handled_once = {order.order_id: order for order in handled}
    assert list(handled_once.values()) == [
        *(Order(order_id=f"v1-{n}", amount_cents=n) for n in range(4)),
        *(Order(order_id=f"v2-{n}", amount_cents=100 + n) for n in range(4)),
        Order(order_id="v1-4", amount_cents=4),
        Order(order_id="v2-4", amount_cents=104),
    ]
    parked = await read_topic(kafka_bootstrap, f"{orders}.dlq")
    infos = [read_dead_letter_headers(record.headers) for record in parked]
    by_offset = {
        info.source_offset: record.value for info, record in zip(infos, parked, strict=True)
    }
    assert list(by_offset.values()) == unreadable  # byte for byte, in order
    assert list(by_offset) == [8, 10, 11, 13]
    assert {(info.reason and info.reason.value, info.path) for info in infos} == {
        ("unresolvable_schema", "$.payload")
    }
    # Each dead letter was acknowledged before the group's offset passed its record.
    assert len(watch.observed) == 2 * len(parked)
    assert watch.passed() == []
    rejected = runtime.metrics.registry.get_sample_value(
        "hopchain_rejected_total",
        {"topic": orders, "direction": "consume", "reason": "unresolvable_schema"},
    )
    assert rejected == len(parked)  # one for each time a record was parked
