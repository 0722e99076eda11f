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
from avro_packer import (
    ORDER,
    Order,
    assert_adopted_then_forwarded,
    envelope_header,
    foreign_read,
    packer,
)
from middleware_helpers import read_topic, record_count, wait_until

from hopchain.testing import TopicFactory, create_topics

pytestmark = [pytest.mark.kafka, pytest.mark.registry]

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

    stage = packer(kafka_bootstrap, url, orders, packed, group_prefix="packer")
    sent = await asyncio.to_thread(
        produce_foreign, kafka_bootstrap, url, orders, {"order_id": "o-42", "amount_cents": 4200}
    )
    [bare] = await read_topic(kafka_bootstrap, orders)
    assert (bare.value, list(bare.headers)) == (sent, [])  # framed, and no header at all
    await stage.broker.start()
    try:
        await wait_until(
            lambda: record_count(kafka_bootstrap, packed), within=60, what="the order forwarded"
        )
    finally:
        await stage.broker.stop()

    assert stage.handled == [Order(order_id="o-42", amount_cents=4200)]
    [out] = await read_topic(kafka_bootstrap, packed)
    assert out.value == sent  # the foreign producer's bytes, not encoded again
    assert_adopted_then_forwarded(envelope_header(out), orders, packed)
    assert stage.adopted(orders) == 1.0
    assert await record_count(kafka_bootstrap, f"{orders}.dlq") == 0
    assert foreign_read(url, packed, [out.value]) == [{"order_id": "o-42", "amount_cents": 4200}]
