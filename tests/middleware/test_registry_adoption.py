"""Bare Avro records adopted by a declared stage, on the real broker and the real registry.

A producer in a process of its own, which has never heard of hopchain, writes Avro with
confluent-kafka's librdkafka ``Producer`` and ``AvroSerializer``: no hopchain header at all.
A declared stage whose input contract says ``adopt_bare=True`` adopts it (its origin hop says
so), hands the handler the typed payload and forwards the producer's bytes unchanged.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import read_topic, record_count, registry, wait_until
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware
from hopchain.formats import AvroFormat
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ENVELOPE_HEADER, Decision, TopicContract
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import TopicFactory, create_topics, unique_topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
FOREIGN_PRODUCER = textwrap.dedent(
    """
    import json, sys
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap, registry, topic, schema, value = sys.argv[1:]
    with SchemaRegistryClient({"url": registry, "timeout": 30}) as client:
        framed = AvroSerializer(client, schema)(
            json.loads(value), SerializationContext(topic, MessageField.VALUE)
        )
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, framed, key=b"o-42")
    assert producer.flush(30) == 0
    sys.stdout.write(framed.hex())
    """
)


class Order(BaseModel):
    order_id: str
    amount_cents: int


def produce_foreign(bootstrap: str, url: str, topic: str, value: dict[str, Any]) -> bytes:
    """What the foreign producer wrote, as it wrote it."""
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed program
        [
            sys.executable,
            "-c",
            FOREIGN_PRODUCER,
            bootstrap,
            url,
            topic,
            *map(json.dumps, (ORDER, value)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return bytes.fromhex(done.stdout)


async def test_a_declared_stage_adopts_a_bare_avro_record_and_forwards_its_bytes_unchanged(
    kafka_bootstrap: str, new_topic: TopicFactory, schema_registry_url: str
) -> None:
    url = schema_registry_url
    orders, packed = await new_topic(prefix="orders"), await new_topic(prefix="packed")
    await create_topics(kafka_bootstrap, f"{orders}.dlq", f"{packed}.dlq")

    def avro(topic: str, **options: Any) -> TopicContract:
        return TopicContract(
            topic=topic,
            model=Order,
            owner="shop-team",
            payload_format=AvroFormat(schema=json.dumps(ORDER), registry_url=url),
            **options,
        )

    runtime = Hopchain(registry(avro(orders, adopt_bare=True), avro(packed)), component="packer")
    pipeline = Pipeline("shop")
    pack = pipeline.stage(
        "pack", input=orders, output=packed, owner="shop-team", side_effects_free=True
    )
    group = unique_topic_name("packer")
    broker = KafkaBroker(
        kafka_bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    handled: list[Order] = []

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(packed)
    @pack
    async def handle(order: Order) -> Order:
        handled.append(order)
        return order

    sent = await asyncio.to_thread(
        produce_foreign, kafka_bootstrap, url, orders, {"order_id": "o-42", "amount_cents": 4200}
    )
    [bare] = await read_topic(kafka_bootstrap, orders)
    assert (bare.value, list(bare.headers)) == (sent, [])  # framed, and no header at all
    await broker.start()
    try:
        await wait_until(
            lambda: record_count(kafka_bootstrap, packed), within=60, what="the order forwarded"
        )
    finally:
        await broker.stop()

    assert handled == [Order(order_id="o-42", amount_cents=4200)]
    [out] = await read_topic(kafka_bootstrap, packed)
    assert out.value == sent  # the foreign producer's bytes, not encoded again
    envelope = load_envelope(dict(out.headers)[ENVELOPE_HEADER])
    origin, forwarded = envelope.chain
    assert (origin.decision, origin.component) == (Decision.ORIGINATED, "packer")
    assert origin.observation is not None
    assert origin.observation.startswith(f"adopted a record without an envelope from {orders}")
    assert forwarded.destination == packed
    adopted = runtime.metrics.registry.get_sample_value(
        "hopchain_adopted_total", {"topic": orders, "component": "packer"}
    )
    assert adopted == 1.0
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        assert foreign(out.value, SerializationContext(packed, MessageField.VALUE)) == {
            "order_id": "o-42",
            "amount_cents": 4200,
        }
