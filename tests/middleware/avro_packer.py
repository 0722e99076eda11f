"""A declared stage that adopts bare Avro orders and forwards them, for the adoption tests.

Its input contract says ``adopt_bare=True``: a record written by a producer that has never
heard of hopchain (confluent-kafka's ``AvroSerializer`` in a process of its own, a JVM with
Apicurio's serializer) is adopted, handed to the handler typed, and forwarded as the bytes the
producer wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from middleware_helpers import registry
from pydantic import BaseModel

from hopchain import Hopchain, HopchainMiddleware
from hopchain.formats import AvroFormat
from hopchain.middleware.stage import Pipeline
from hopchain.schemas import ENVELOPE_HEADER, Decision, TopicContract
from hopchain.schemas.text_v2 import load_envelope
from hopchain.testing import unique_topic_name

ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
COMPONENT = "packer"


class Order(BaseModel):
    order_id: str
    amount_cents: int


@dataclass
class Packer:
    """The stage's engine, its broker (not started) and the orders its handler was given."""

    runtime: Hopchain
    broker: KafkaBroker
    handled: list[Order] = field(default_factory=list)

    def adopted(self, orders: str) -> float | None:
        """``hopchain_adopted_total`` of the input topic."""
        return self.runtime.metrics.registry.get_sample_value(
            "hopchain_adopted_total", {"topic": orders, "component": COMPONENT}
        )


def packer(bootstrap: str, url: str, orders: str, packed: str, *, group_prefix: str) -> Packer:
    """The stage ``pack``: Avro orders read from ``orders``, adopted, forwarded to ``packed``."""

    def avro(topic: str, **options: Any) -> TopicContract:
        return TopicContract(
            topic=topic,
            model=Order,
            owner="shop-team",
            payload_format=AvroFormat(schema=json.dumps(ORDER), registry_url=url),
            **options,
        )

    runtime = Hopchain(registry(avro(orders, adopt_bare=True), avro(packed)), component=COMPONENT)
    pack = Pipeline("shop").stage(
        "pack", input=orders, output=packed, owner="shop-team", side_effects_free=True
    )
    group = unique_topic_name(group_prefix)
    broker = KafkaBroker(
        bootstrap,
        middlewares=[HopchainMiddleware(runtime, group=group)],
        ack_policy=AckPolicy.ACK,
    )
    stage = Packer(runtime, broker)

    @broker.subscriber(orders, group_id=group, auto_offset_reset="earliest")
    @broker.publisher(packed)
    @pack
    async def handle(order: Order) -> Order:
        stage.handled.append(order)
        return order

    return stage


def assert_adopted_then_forwarded(header: bytes, orders: str, packed: str) -> None:
    """The envelope of a forwarded record: the stage's adoption, then its hop to ``packed``."""
    origin, forwarded = load_envelope(header).chain
    assert (origin.decision, origin.component) == (Decision.ORIGINATED, COMPONENT)
    assert origin.observation is not None
    assert origin.observation.startswith(f"adopted a record without an envelope from {orders}")
    assert forwarded.destination == packed


def foreign_read(url: str, topic: str, values: list[bytes]) -> list[Any]:
    """``values`` as confluent-kafka's ``AvroDeserializer`` reads them from ``topic``."""
    with SchemaRegistryClient({"url": url, "timeout": 30}) as client:
        foreign = AvroDeserializer(client)
        context = SerializationContext(topic, MessageField.VALUE)
        return [foreign(value, context) for value in values]


def envelope_header(record: Any) -> bytes:
    """The hopchain envelope header of a record read back."""
    header: bytes = dict(record.headers)[ENVELOPE_HEADER]
    return header
