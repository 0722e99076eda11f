"""The ceiling: plain aiokafka writing and reading the same 1 KiB records, no framework.

One produce pass (sends without waiting for each acknowledgement, a window at a time) and
one consume pass (``getmany`` from the beginning, no consumer group) over a fresh topic.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.workload import Item, make_item
from hopchain.testing import create_topics, delete_topics, unique_topic_name

PRODUCE_WINDOW = 1000


@dataclass
class PassResult:
    """Records per second of one produce pass and one consume pass."""

    records: int
    produce_seconds: float
    consume_seconds: float

    @property
    def produce_rate(self) -> float:
        return self.records / self.produce_seconds

    @property
    def consume_rate(self) -> float:
        return self.records / self.consume_seconds


async def _produce(bootstrap: str, topic: str, records: int) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        started = time.perf_counter()
        pending = []
        for seq in range(records):
            item = make_item(seq)
            pending.append(await producer.send(topic, item.__pydantic_serializer__.to_json(item)))
            if len(pending) >= PRODUCE_WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        return time.perf_counter() - started
    finally:
        await producer.stop()


async def _consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        started = time.perf_counter()
        seen = 0
        while seen < records:
            batches = await consumer.getmany(partition, timeout_ms=1000, max_records=5000)
            for batch in batches.values():
                for record in batch:
                    Item.model_validate_json(record.value)
                seen += len(batch)
        return time.perf_counter() - started
    finally:
        await consumer.stop()


async def run_passes(bootstrap: str, records: int) -> PassResult:
    """Produce ``records`` records to a fresh topic, then read them all back (validated)."""
    topic = unique_topic_name("bench-ceiling")
    await create_topics(bootstrap, topic)
    try:
        produce = await _produce(bootstrap, topic, records)
        consume = await _consume(bootstrap, topic, records)
    finally:
        await delete_topics(bootstrap, topic)
    return PassResult(records=records, produce_seconds=produce, consume_seconds=consume)
